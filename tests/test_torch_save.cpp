// torch.save's format written (ggml-lite/io/torch_save.h): a LoRA-shaped dict (f32, f16 and a 0-d
// bf16 alpha) read back by our reader, byte for byte the committed file that torch.load(weights_only
// =True) reads as this dict (tests/golden/make_torch_save_golden.py checks it, mmap included), and
// the archive laid out as torch's own torch.save of the same dict (its entries, 64-byte aligned
// data, CRCs).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/convert.h"
#include "ggml-lite/io/torch_ckpt.h"
#include "ggml-lite/io/torch_save.h"
#include "ggml-lite/io/zip.h"
#include "test_util.h"

using namespace gl;
using namespace gl::io;
namespace fs = std::filesystem;

namespace {

std::string golden(const std::string& name) { return gltest::golden_dir("ckpt") + name; }

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE(f.good());
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The golden script's dict: (i * 0.25 - 2) in each tensor's dtype (exact in all three).
struct Dict {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<TensorToWrite> tensors;
    Dict() {
        const std::tuple<const char*, DType, std::vector<int64_t>> spec[] = {
            {"lora_unet_mid.lora_down.weight", DType::f32, {2, 3}},
            {"lora_unet_mid.lora_up.weight", DType::f16, {3, 2, 1, 1}},
            {"lora_unet_mid.alpha", DType::bf16, {}}};
        for (const auto& [name, dtype, shape] : spec) {
            int64_t n = 1;
            for (int64_t d : shape) n *= d;
            std::vector<float> v(static_cast<size_t>(n));
            for (size_t i = 0; i < v.size(); i++) v[i] = float(i) * 0.25f - 2.0f;
            if (shape.empty()) v = {4.0f};
            std::vector<uint8_t> b(size_t(n) * dtype_size(dtype));
            convert_elements(v.data(), StoredType::f32, b.data(), dtype, n, name);
            bytes.push_back(std::move(b));
            tensors.push_back({name, dtype, shape, nullptr});
        }
        for (size_t i = 0; i < tensors.size(); i++) tensors[i].data = bytes[i].data();
    }
};

struct TempDir {
    fs::path dir = fs::temp_directory_path() / ("gl_torch_save_" + std::to_string(getpid()));
    TempDir() { fs::create_directories(dir); }
    ~TempDir() {
        std::error_code ec;
        if (!std::getenv("GL_KEEP_SCRATCH")) fs::remove_all(dir, ec);
    }
};

}  // namespace

TEST_CASE("torch save: a LoRA dict reads back, and is byte for byte the file torch.load checked") {
    TempDir t;
    const Dict d;
    const std::string path = (t.dir / "sdtrain_written.pt").string();
    write_torch_checkpoint(path, d.tensors);
    CHECK(file_bytes(path) == file_bytes(golden("sdtrain_written.pt")));
    const CkptFile f(path);
    REQUIRE(f.list().size() == 3);
    for (const TensorToWrite& w : d.tensors) {
        CAPTURE(w.name);
        REQUIRE(f.has(w.name));
        CHECK(f.info(w.name).shape == w.shape);
        CHECK(f.stored_type(w.name) == stored_of(w.dtype));
        std::vector<float> got(size_t(f.info(w.name).numel())), want(got.size());
        f.read(w.name, got.data(), DType::f32);
        convert_elements(w.data, stored_of(w.dtype), want.data(), DType::f32, int64_t(want.size()), w.name);
        CHECK(got == want);
    }
}

TEST_CASE("torch save: the archive is laid out as torch.save lays out the same dict") {
    TempDir t;
    const Dict d;
    const std::string path = (t.dir / "lora-000003.ckpt").string();
    write_torch_checkpoint(path, d.tensors);
    const std::vector<uint8_t> ours = file_bytes(path), torchs = file_bytes(golden("torch_saved.pt"));
    const ZipIndex a(ours.data(), ours.size(), path), b(torchs.data(), torchs.size(), "torch_saved.pt");
    // Our entries are torch's, under the file's stem as torch names its top folder; torch adds
    // records its reader does not need (.format_version, .storage_alignment, .data/serialization_id).
    std::vector<std::string> names;
    for (const ZipEntry& e : a.entries()) {
        CAPTURE(e.name);
        CHECK(e.name.rfind("lora-000003/", 0) == 0);
        names.push_back(e.name.substr(e.name.find('/') + 1));
        const ZipEntry* theirs = b.find("torch_saved/" + names.back());
        REQUIRE(theirs);
        if (names.back() != "data.pkl") CHECK(theirs->crc32 == e.crc32);  // the same bytes
        a.check_crc(e);
        if (names.back().rfind("data/", 0) == 0) CHECK(e.offset % 64 == 0);  // torch's alignment
    }
    CHECK(names == std::vector<std::string>{"data.pkl", "byteorder", "data/0", "data/1", "data/2", "version"});
    // torch's file holds the same tensors as ours, read by the same reader.
    const CkptFile mine(path), torch(golden("torch_saved.pt"));
    REQUIRE(torch.list().size() == mine.list().size());
    for (const TensorToWrite& w : d.tensors) {
        CAPTURE(w.name);
        CHECK(torch.info(w.name).shape == mine.info(w.name).shape);
        CHECK(torch.stored_type(w.name) == mine.stored_type(w.name));
        std::vector<float> x(size_t(mine.info(w.name).numel())), y(x.size());
        mine.read(w.name, x.data(), DType::f32);
        torch.read(w.name, y.data(), DType::f32);
        CHECK(x == y);
    }
    // A name twice is refused; a stem that is no plain name gives torch's "archive".
    std::vector<TensorToWrite> twice = d.tensors;
    twice.push_back(twice[0]);
    CHECK(gltest::error_of([&] { write_torch_checkpoint(path, twice); }).find("tensor lora_unet_mid.lora_down.weight twice") !=
          std::string::npos);
    const std::string odd = (t.dir / "caf\xc3\xa9 lora.pt").string();
    write_torch_checkpoint(odd, d.tensors);
    const std::vector<uint8_t> o = file_bytes(odd);
    CHECK(ZipIndex(o.data(), o.size(), odd).find("archive/data.pkl"));
}
