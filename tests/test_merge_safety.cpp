// gl-merge never loses data: the base is compared byte for byte (sha256 of every file it reaches,
// through symlinks) before and after each merge here. Symlinked sub-folders and the Hugging Face
// cache layout, outputs that are (part of) the base or exist, temporaries of killed merges,
// non-finite values, a FIFO in the base and a full disk.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <limits>

#include "ggml-lite/io/files.h"
#include "ggml-lite/io/sha256.h"
#include "merge_fixtures.h"
#include "test_util.h"

using namespace merge_test;
using gltest::error_of;

namespace {

// Every file reached from root (symlinks followed) -> sha256 of its content.
std::map<std::string, std::string> checksums(const fs::path& root) {
    std::map<std::string, std::string> out;
    auto one = [&](const fs::path& p) {
        const std::string bytes = io::read_small_file(p.string(), uint64_t(1) << 30);
        io::Sha256 h;
        h.update(bytes.data(), bytes.size());
        out[p.lexically_relative(root).string()] = h.hex();
    };
    if (!fs::is_directory(root)) {
        one(root);
        return out;
    }
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink);
         it != fs::recursive_directory_iterator(); ++it)
        if (fs::is_regular_file(it->path())) one(it->path());
    return out;
}

bool has_symlink(const fs::path& root) {
    for (const auto& e : fs::recursive_directory_iterator(root))
        if (e.is_symlink()) return true;
    return false;
}

pid_t dead_pid() {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    ::waitpid(p, nullptr, 0);
    return p;
}

int g_fault_after = 0;
int enospc_after(size_t) { return g_fault_after-- > 0 ? 0 : ENOSPC; }

// A diffusers folder of the tiny models, made in `root` by `place(relative path, golden file)`.
void tiny_folder(const fs::path& root, const std::function<void(const std::string&, const fs::path&)>& place) {
    fs::create_directories(root);
    std::ofstream(root / "model_index.json") << "{}";
    place("unet/diffusion_pytorch_model.safetensors", golden("unet", "unet_diffusers.safetensors"));
    place("unet/diffusion_pytorch_model.fp16.safetensors", golden("unet", "unet_diffusers.safetensors"));
    place("text_encoder/model.safetensors", golden("clip", "clip_tiny.safetensors"));
    place("vae/diffusion_pytorch_model.safetensors", golden("vae", "weights_diffusers.safetensors"));
}

// A single-file base (the tiny UNet and text encoder in one file) and a LoRA for it, made in dir.
struct SingleFileBase {
    fs::path base_path;
    std::shared_ptr<io::SafetensorsFile> base_file;
    models::ModelFiles base;
    io::SafetensorsFile lora_file;

    explicit SingleFileBase(const fs::path& dir)
        : base_path(dir / "base.safetensors"), base_file(concatenated(base_path)),
          base(tiny_files(base_file, base_file, base_path.string(), base_path.string(), sd::Sd15Layout::single_file)),
          lora_file(lora_for(*base_file, dir / "lora.safetensors")) {}

private:
    static std::shared_ptr<io::SafetensorsFile> concatenated(const fs::path& path) {
        concat_files({golden("unet", "unet_original.safetensors"), golden("clip", "clip_tiny_original.safetensors")},
                     path);
        return std::make_shared<io::SafetensorsFile>(path.string());
    }
    static std::string lora_for(const io::SafetensorsFile& base, const fs::path& path) {
        size_t modules = 0;
        make_lora(base, base, path, &modules);
        return path.string();
    }
};

// The base as open_sd15_folder gives it: paths spelled under the folder, whatever they link to.
struct FolderBase {
    fs::path dir;
    std::shared_ptr<io::SafetensorsFile> unet, te;
    models::ModelFiles files;
    explicit FolderBase(const fs::path& d) : dir(d) {
        const std::string u = (d / "unet" / "diffusion_pytorch_model.safetensors").string(),
                          t = (d / "text_encoder" / "model.safetensors").string();
        unet = std::make_shared<io::SafetensorsFile>(u);
        te = std::make_shared<io::SafetensorsFile>(t);
        files = tiny_files(unet, te, u, t, sd::Sd15Layout::diffusers);
    }
    lora::MergeReport merge(const io::TensorSource& lora_file, const fs::path& out, lora::MergeOptions opt = {}) {
        return lora::merge_lora_into_checkpoint(files, dir.string(), lora_file, out.string(), opt);
    }
};

// Merges into out and checks the result: real files only, the unmerged fp16 variant dropped,
// the runtime LoRA's outputs.
void check_merged_folder(FolderBase& base, const fs::path& lora_path, const fs::path& out) {
    size_t modules = 0;
    const auto with_lora = make_lora(*base.unet, *base.te, lora_path, &modules);
    io::SafetensorsFile lora_file(lora_path.string());
    const lora::MergeReport r = base.merge(lora_file, out);
    CHECK(r.unet_modules + r.text_encoder_modules == modules);
    CHECK(!has_symlink(out));
    CHECK(fs::exists(out / "vae" / "diffusion_pytorch_model.safetensors"));
    CHECK(!fs::exists(out / "unet" / "diffusion_pytorch_model.fp16.safetensors"));
    io::SafetensorsFile mu((out / "unet" / "diffusion_pytorch_model.safetensors").string());
    io::SafetensorsFile mt((out / "text_encoder" / "model.safetensors").string());
    TinyModels plain(nullptr);
    plain.load(mu, mt);
    const auto got = plain.run();
    CHECK(gltest::rel_err(got.first, with_lora.first, 1e-6) < 2e-3);  // the UNet file is f16
    CHECK(gltest::rel_err(got.second, with_lora.second, 1e-6) < 1e-5);
}

}  // namespace

TEST_CASE("merge safety: a base whose unet/ and text_encoder/ link to a shared folder is never written") {
    TempDir tmp;
    const fs::path shared = tmp.path / "shared", base = tmp.path / "base";
    tiny_folder(shared, [&](const std::string& rel, const fs::path& from) {
        fs::create_directories((shared / rel).parent_path());
        fs::copy_file(from, shared / rel);
    });
    fs::create_directories(base);
    std::ofstream(base / "model_index.json") << "{}";
    for (const char* sub : {"unet", "text_encoder", "vae"}) fs::create_directory_symlink(fs::path("..") / "shared" / sub, base / sub);
    const auto before = checksums(tmp.path);
    FolderBase b(base);
    check_merged_folder(b, tmp.path / "lora.safetensors", tmp.path / "out");
    auto after = checksums(tmp.path);
    for (auto it = after.begin(); it != after.end();)  // what the merge made
        it = it->first.rfind("out/", 0) == 0 || it->first == "lora.safetensors" ? after.erase(it) : std::next(it);
    CHECK(after == before);
}

TEST_CASE("merge safety: a Hugging Face cache snapshot, every file a link into blobs/, is never written") {
    TempDir tmp;
    const fs::path repo = tmp.path / "models--someone--tiny", snap = repo / "snapshots" / "0123abcd";
    int n = 0;
    tiny_folder(snap, [&](const std::string& rel, const fs::path& from) {
        const std::string blob = "blob" + std::to_string(n++);
        fs::create_directories(repo / "blobs");
        fs::copy_file(from, repo / "blobs" / blob);
        fs::create_directories((snap / rel).parent_path());
        const int depth = int(std::count(rel.begin(), rel.end(), '/'));
        fs::path target = "..";
        for (int i = 0; i < depth + 1; i++) target /= "..";
        fs::create_symlink(target / "blobs" / blob, snap / rel);
    });
    std::ofstream(repo / "blobs" / "index") << "{}";
    fs::remove(snap / "model_index.json");
    fs::create_symlink(fs::path("..") / ".." / "blobs" / "index", snap / "model_index.json");
    REQUIRE(fs::is_symlink(snap / "unet" / "diffusion_pytorch_model.safetensors"));
    const auto before = checksums(repo);
    FolderBase b(snap);
    check_merged_folder(b, tmp.path / "lora.safetensors", tmp.path / "out");
    CHECK(checksums(repo) == before);
    // Outputs among the cache's parts are refused: a blob, the blobs folder (holds the base).
    io::SafetensorsFile lora_file((tmp.path / "lora.safetensors").string());
    lora::MergeOptions overwrite;
    overwrite.overwrite = true;
    CHECK(error_of([&] { b.merge(lora_file, repo / "blobs", overwrite); }).find("part of the base") != std::string::npos);
    CHECK(error_of([&] { b.merge(lora_file, repo / "blobs" / "blob0", overwrite); }).find("part of the base") !=
          std::string::npos);
    CHECK(checksums(repo) == before);
}

TEST_CASE("merge safety: the output is never the base, and an existing output is replaced only with overwrite") {
    TempDir tmp;
    const SingleFileBase single(tmp.path);
    const fs::path& base_path = single.base_path;
    const models::ModelFiles& base = single.base;
    const io::SafetensorsFile& lora_file = single.lora_file;
    const auto before = checksums(base_path);
    lora::MergeOptions keep, overwrite;
    overwrite.overwrite = true;
    auto merge = [&](const fs::path& out, const lora::MergeOptions& o) {
        return error_of([&] { lora::merge_lora_into_checkpoint(base, base_path.string(), lora_file, out.string(), o); });
    };
    fs::create_symlink(base_path, tmp.path / "link.safetensors");
    fs::create_hard_link(base_path, tmp.path / "hard.safetensors");
    for (const fs::path& same : {base_path, tmp.path / "." / "base.safetensors", tmp.path / "link.safetensors",
                                 tmp.path / "hard.safetensors"})
        for (const lora::MergeOptions& o : {keep, overwrite}) {
            const std::string e = merge(same, o);
            CHECK_MESSAGE(e.find("itself; the base is never written") != std::string::npos, e);
        }
    CHECK(merge("", keep) == "lora merge: the output path is empty");
    CHECK(merge(tmp.path / "missing" / "x.safetensors", keep).find("does not exist") != std::string::npos);
    CHECK(merge(tmp.path, overwrite).find("holds") != std::string::npos);  // a folder holding the base

    const fs::path other = tmp.path / "other.safetensors";
    std::ofstream(other) << "unrelated";
    CHECK(merge(other, keep).find("exists; choose a new path, or allow replacing it") != std::string::npos);
    CHECK(io::read_small_file(other.string()) == "unrelated");
    CHECK(merge(other, overwrite) == "(no error)");
    CHECK(io::SafetensorsFile(other.string()).metadata().at("gl.merged_lora") == "lora.safetensors");
    fs::create_directories(tmp.path / "adir");
    CHECK(merge(tmp.path / "adir", overwrite).find("exists and is a folder") != std::string::npos);
    CHECK(checksums(base_path) == before);

    // A folder base: the base folder, a path inside it, a folder holding it; a shared folder it
    // links to; an existing folder with and without overwrite.
    const fs::path shared = tmp.path / "shared", fbase = tmp.path / "fbase";
    tiny_folder(shared, [&](const std::string& rel, const fs::path& from) {
        fs::create_directories((shared / rel).parent_path());
        fs::copy_file(from, shared / rel);
    });
    fs::create_directories(fbase);
    for (const char* sub : {"unet", "text_encoder", "vae"}) fs::create_directory_symlink(shared / sub, fbase / sub);
    FolderBase fb(fbase);
    const auto folder_before = checksums(tmp.path / "shared");
    auto fmerge = [&](const fs::path& out, const lora::MergeOptions& o) { return error_of([&] { fb.merge(lora_file, out, o); }); };
    CHECK(fmerge(fbase, overwrite).find("itself") != std::string::npos);
    CHECK(fmerge(fbase / "merged", keep).find("lies inside") != std::string::npos);
    CHECK(fmerge(fbase / "unet", overwrite).find("part of the base") != std::string::npos);
    CHECK(fmerge(shared / "unet", overwrite).find("part of the base") != std::string::npos);
    CHECK(fmerge(shared, overwrite).find("holds") != std::string::npos);
    CHECK(fmerge(tmp.path, overwrite).find("holds") != std::string::npos);
    const fs::path out = tmp.path / "out";
    fs::create_directories(out / "old");
    CHECK(fmerge(out, keep).find("exists; choose a new path") != std::string::npos);
    CHECK(fs::exists(out / "old"));
    CHECK(fmerge(out, overwrite) == "(no error)");
    CHECK(!fs::exists(out / "old"));
    CHECK(fs::exists(out / "unet" / "diffusion_pytorch_model.safetensors"));
    CHECK(fmerge(other, overwrite).find("exists and is a file; a diffusers base is merged into a folder") !=
          std::string::npos);
    CHECK(checksums(tmp.path / "shared") == folder_before);
    for (const auto& e : fs::directory_iterator(tmp.path))  // no temporaries left by any refusal
        CHECK_MESSAGE(e.path().filename().string().find(".tmp-") == std::string::npos, e.path());
}

TEST_CASE("merge safety: temporaries of a killed merge to the same output are found and removed") {
    TempDir tmp;
    const SingleFileBase single(tmp.path);
    const fs::path& base_path = single.base_path;
    const models::ModelFiles& base = single.base;
    const io::SafetensorsFile& lora_file = single.lora_file;
    const fs::path out = tmp.path / "merged.safetensors";
    std::string pattern = io::temp_file_pattern(out.string(), dead_pid());
    const fs::path tmp_file = pattern.replace(pattern.size() - 6, 6, "Ab12Cd");
    const fs::path partial = io::partial_dir_name(out.string(), dead_pid());
    std::ofstream(tmp_file) << std::string(1000, 'x');
    fs::create_directories(partial / "unet");
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(base, base_path.string(), lora_file, out.string(), {});
    CHECK(r.stale_removed.size() == 2);
    CHECK(!fs::exists(tmp_file));
    CHECK(!fs::exists(partial));
    CHECK(fs::exists(out));
}

TEST_CASE("merge safety: non-finite LoRA weights, multipliers and merged values are refused by tensor name") {
    TempDir tmp;
    const SingleFileBase single(tmp.path);
    const fs::path& base_path = single.base_path;
    const auto& base_file = single.base_file;
    const models::ModelFiles& base = single.base;
    const io::SafetensorsFile& lora_file = single.lora_file;
    const fs::path out = tmp.path / "merged.safetensors";
    auto merge = [&](const models::ModelFiles& b, const io::TensorSource& l, float multiplier) {
        lora::MergeOptions o;
        o.multiplier = multiplier;
        return error_of([&] { lora::merge_lora_into_checkpoint(b, b.unet_path, l, out.string(), o); });
    };
    CHECK(merge(base, lora_file, std::numeric_limits<float>::quiet_NaN()) ==
          "lora merge: the multiplier nan is not a finite number");
    CHECK(merge(base, lora_file, INFINITY).find("is not a finite number") != std::string::npos);
    // f32 holds the merged values of a multiplier of 1e30; inf needs more.
    const std::string e = merge(base, lora_file, 3e38f);
    CHECK_MESSAGE(e.find("lora merge: merged tensor '") == 0, e);
    CHECK_MESSAGE(e.find("holds inf as f32") != std::string::npos, e);
    CHECK_MESSAGE(e.find("multiplier 3e+38 x the LoRA's delta overflows") != std::string::npos, e);
    CHECK(!fs::exists(out));

    // A NaN in one up matrix of the LoRA file.
    std::vector<io::TensorToWrite> ts;
    std::vector<std::vector<float>> data;
    std::string poisoned;
    for (const io::TensorInfo& t : lora_file.list()) {
        data.emplace_back(size_t(t.numel()));
        lora_file.read(t.name, data.back().data(), DType::f32);
        if (poisoned.empty() && t.name.find("lora_up") != std::string::npos) {
            data.back()[3] = std::numeric_limits<float>::quiet_NaN();
            poisoned = t.name;
        }
        ts.push_back({t.name, DType::f32, t.shape, data.back().data()});
    }
    io::write_safetensors((tmp.path / "nan.safetensors").string(), ts);
    const std::string n = merge(base, io::SafetensorsFile((tmp.path / "nan.safetensors").string()), 1.0f);
    CHECK_MESSAGE(n.find(": " + poisoned + " holds NaN (element 3)") != std::string::npos, n);

    // An inf already in the base, in a weight the LoRA changes: the base is blamed.
    std::vector<io::TensorToWrite> bt;
    std::vector<std::vector<float>> bdata;
    const std::string target = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight";
    REQUIRE(base_file->has(target));
    for (const io::TensorInfo& t : base_file->list()) {
        bdata.emplace_back(t.nbytes() / sizeof(float) + 1);
        base_file->read(t.name, bdata.back().data(), t.dtype);
        if (t.name == target) bdata.back()[0] = INFINITY;
        bt.push_back({t.name, t.dtype, t.shape, bdata.back().data()});
    }
    const fs::path bad_base = tmp.path / "inf.safetensors";
    io::write_safetensors(bad_base.string(), bt);
    auto bad_file = std::make_shared<io::SafetensorsFile>(bad_base.string());
    const std::string b = merge(tiny_files(bad_file, bad_file, bad_base.string(), bad_base.string(), sd::Sd15Layout::single_file),
                                lora_file, 1.0f);
    CHECK_MESSAGE(b.find("merged tensor '" + target + "' holds inf as f32 (element 0): the base") != std::string::npos, b);
    CHECK(!fs::exists(out));
}

TEST_CASE("merge safety: a FIFO in the base folder and a full disk are refused, leaving nothing behind") {
    TempDir tmp;
    const fs::path base = tmp.path / "base";
    tiny_folder(base, [&](const std::string& rel, const fs::path& from) {
        fs::create_directories((base / rel).parent_path());
        fs::copy_file(from, base / rel);
    });
    FolderBase b(base);
    size_t modules = 0;
    make_lora(*b.unet, *b.te, tmp.path / "lora.safetensors", &modules);
    io::SafetensorsFile lora_file((tmp.path / "lora.safetensors").string());
    // An f16 UNet file holds at most 65504: a multiplier of 1e30 overflows it to inf.
    const std::string big = error_of([&] {
        lora::MergeOptions o;
        o.multiplier = 1e30f;
        b.merge(lora_file, tmp.path / "out", o);
    });
    CHECK_MESSAGE(big.find("holds inf as f16") != std::string::npos, big);
    CHECK_MESSAGE(big.find("multiplier 1e+30 x the LoRA's delta overflows") != std::string::npos, big);
    CHECK(!fs::exists(tmp.path / "out"));

    const fs::path fifo = base / "vae" / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    const std::string e = error_of([&] { b.merge(lora_file, tmp.path / "out"); });
    CHECK_MESSAGE(e == "lora merge: " + fifo.string() + " is a FIFO; a model folder holds only files and folders, and it is not copied", e);
    fs::remove(fifo);

    const auto before = checksums(base);
    for (int after : {0, 3, 40}) {  // while copying, while writing the merged UNet, and later
        g_fault_after = after;
        io::set_write_fault(enospc_after);
        const std::string full = error_of([&] { b.merge(lora_file, tmp.path / "out"); });
        io::set_write_fault(nullptr);
        CHECK_MESSAGE(full.find("no space left on the device") != std::string::npos, full);
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(tmp.path)) names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        CHECK(names == std::vector<std::string>{"base", "lora.safetensors"});
    }
    CHECK(checksums(base) == before);
}

namespace {

// A LoRA whose one module declares rank `rank` (only its header: the data is never read).
class HugeRankLora : public io::TensorSource {
public:
    HugeRankLora(const io::TensorSource& real, int64_t rank) {
        for (const io::TensorInfo& t : real.list()) {
            const std::string suffix = ".lora_down.weight";
            if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix))
                continue;
            const std::string base = t.name.substr(0, t.name.size() - suffix.size());
            io::TensorInfo down = t, up = real.info(base + ".lora_up.weight");
            down.shape[0] = rank;
            up.shape[1] = rank;
            tensors_ = {down, up};
            return;
        }
    }
    std::string origin() const override { return "huge.safetensors"; }
    std::vector<io::TensorInfo> list() const override { return tensors_; }
    bool has(const std::string& name) const override {
        return std::any_of(tensors_.begin(), tensors_.end(), [&](const io::TensorInfo& t) { return t.name == name; });
    }
    io::TensorInfo info(const std::string& name) const override {
        for (const io::TensorInfo& t : tensors_)
            if (t.name == name) return t;
        fail("no tensor ", name);
    }
    void read(const std::string& name, void*, DType) const override { fail("huge LoRA: ", name, " is never read"); }
    const std::string& down_name() const { return tensors_.at(0).name; }

private:
    std::vector<io::TensorInfo> tensors_;
};

}  // namespace

TEST_CASE("merge safety: a LoRA of rank 2^30 or 2^31 is refused naming its tensor, before anything is allocated") {
    TempDir tmp;
    const SingleFileBase single(tmp.path);
    const auto before = checksums(single.base_path);
    for (const int64_t rank : {int64_t(1) << 30, int64_t(1) << 31, int64_t(1) << 62, int64_t(0), int64_t(-4)}) {
        CAPTURE(rank);
        const HugeRankLora lora_file(single.lora_file, rank);
        const fs::path out = tmp.path / "merged.safetensors";
        const std::string e = error_of([&] {
            lora::merge_lora_into_checkpoint(single.base, single.base_path.string(), lora_file, out.string(), {});
        });
        CHECK_MESSAGE(e.find("tensor '" + lora_file.down_name() + "' [" + std::to_string(rank)) != std::string::npos, e);
        if (rank == int64_t(1) << 30)
            CHECK_MESSAGE(e.find("gives rank 1073741824; the network at that rank needs") != std::string::npos, e);
        else
            CHECK_MESSAGE(e.find("a LoRA's rank lies in [1, 2147483647]") != std::string::npos, e);
        CHECK(!fs::exists(out));
    }
    CHECK(checksums(single.base_path) == before);
}

TEST_CASE("merge safety: an output where nothing can be created is refused before the merge, naming why") {
    TempDir tmp;
    const SingleFileBase single(tmp.path);
    // procfs takes no files, even from root (a read-only mount is named by io::cannot_create's
    // EROFS message, tested in test_files.cpp).
    const std::string e = error_of([&] {
        lora::merge_lora_into_checkpoint(single.base, single.base_path.string(), single.lora_file,
                                         "/proc/self/merged.safetensors", {});
    });
    CHECK(e == "/proc/self/merged.safetensors: permission denied");
}
