#include "pipelines/merge_file.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <new>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/checked.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/paths.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/file_modules.h"
#include "lora/lora.h"
#include "lora/merge_output.h"

namespace lora {

namespace fs = std::filesystem;
using gl::DType;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

}  // namespace

namespace {

// A merged weight must be finite as stored: NaN or inf (a NaN in the base or the delta, or values
// beyond what the file's dtype holds, 65504 in f16) would break every image made with it. The
// message says whether the base already held it or the LoRA's delta made it.
void check_finite(const gl::io::TensorSource& src, const gl::io::TensorInfo& t, const void* stored, float multiplier) {
    const int64_t n = t.numel();
    int64_t bad = 0;
    while (bad < n && std::isfinite(gl::load_as_f32(stored, t.dtype, bad))) bad++;
    if (bad == n) return;
    std::vector<float> base(static_cast<size_t>(n));
    src.read(t.name, base.data(), gl::DType::f32);
    const bool base_bad = std::any_of(base.begin(), base.end(), [](float v) { return !std::isfinite(v); });
    gl::fail("lora merge: merged tensor '", t.name, "' holds ", std::isnan(gl::load_as_f32(stored, t.dtype, bad)) ? "NaN" : "inf",
             " as ", gl::dtype_name(t.dtype), " (element ", bad, "): ",
             base_bad ? gl::cat("the base (", src.origin(), ") already holds non-finite values there")
                      : gl::cat("multiplier ", multiplier, " x the LoRA's delta overflows; nothing was written"));
}

// A merged weight: its leaf, its layout in the graph, and which of the stored tensor's equal row
// blocks it is (slice of slices; 0 of 1: the whole tensor). A tensor may take several (q, k, v).
struct Piece {
    gl::ValueId id;
    nn::WeightLayout layout;
    int slice = 0, slices = 1;
};
using Merged = std::vector<Piece>;

// Writes every tensor of src to path: merged ones from rt (back to PyTorch's layout and the
// stored dtype), the others copied.
size_t write_source(const gl::io::TensorSource& src, const std::map<std::string, Merged>& merged, const gl::Runtime& rt,
                    const std::string& path, std::map<std::string, std::string> metadata, float multiplier) {
    const gl::Graph& g = rt.plan().graph;
    std::vector<gl::io::TensorToWrite> out;
    std::vector<std::vector<unsigned char>> data;
    const std::vector<gl::io::TensorInfo> list = src.list();
    data.reserve(list.size());
    for (const gl::io::TensorInfo& t : list) {
        const size_t n = size_t(t.numel());
        try {
            data.emplace_back(t.nbytes());
        } catch (const std::bad_alloc&) {
            gl::fail("lora merge: ", src.origin(), ": tensor '", t.name, "' ", shape_str(t.shape), " needs ", t.nbytes(),
                     " bytes of host memory, more than can be allocated");
        }
        auto it = merged.find(t.name);
        bool whole = false;
        if (it != merged.end())
            for (const Piece& p : it->second) whole = whole || p.slices == 1;
        // The stored values first where pieces replace only some of the tensor's rows.
        if (!whole) src.read(t.name, data.back().data(), t.dtype);
        if (it == merged.end()) {
            out.push_back({t.name, t.dtype, t.shape, data.back().data()});
            continue;
        }
        for (const Piece& piece : it->second) {
            std::vector<float> w = rt.read_f32(piece.id);
            const size_t part = piece.slices >= 1 ? n / size_t(piece.slices) : 0;
            GL_CHECK(piece.slices >= 1 && piece.slice >= 0 && piece.slice < piece.slices && !t.shape.empty() &&
                         t.shape[0] % piece.slices == 0 && w.size() == part,
                     "lora merge: ", src.origin(), ": ", t.name, " ", shape_str(t.shape), " holds ", n,
                     " values; the model's ", piece.slices == 1 ? "weight" : gl::cat("part ", piece.slice, " of ", piece.slices),
                     " for it ", w.size());

            if (piece.layout == nn::WeightLayout::conv_ohwi) {  // [O][kh][kw][I] -> [O][I][kh][kw]
                const gl::Shape s = g.shape(piece.id);
                const int64_t O = s[0], kh = s[1], kw = s[2], I = s[3];
                std::vector<float> oihw(w.size());
                for (int64_t o = 0; o < O; o++)
                    for (int64_t y = 0; y < kh; y++)
                        for (int64_t x = 0; x < kw; x++)
                            for (int64_t i = 0; i < I; i++)
                                oihw[size_t(((o * I + i) * kh + y) * kw + x)] = w[size_t(((o * kh + y) * kw + x) * I + i)];
                w.swap(oihw);
            }
            const size_t at = size_t(piece.slice) * part;
            for (size_t i = 0; i < part; i++) gl::store_from_f32(data.back().data(), t.dtype, int64_t(at + i), w[i]);
        }
        check_finite(src, t, data.back().data(), multiplier);
        out.push_back({t.name, t.dtype, t.shape, data.back().data()});
    }
    if (const auto* st = dynamic_cast<const gl::io::SafetensorsFile*>(&src))
        for (const auto& [k, v] : st->metadata()) metadata.emplace(k, v);  // ours first: they win
    gl::io::write_safetensors(path, out, metadata);
    return out.size();
}

// Bytes a safetensors file of src's tensors takes (the header is generously estimated).
uint64_t add_saturated(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

uint64_t file_bytes(const gl::io::TensorSource& src) {
    uint64_t b = uint64_t(1) << 20;
    for (const gl::io::TensorInfo& t : src.list()) b = add_saturated(b, t.nbytes());
    return b;
}

// Where file (inside the base folder) goes in the copy: its path relative to the folder, taken
// lexically, so that a symlinked sub-folder can never lead the write back into the base.
std::string relative_in(const std::string& base_dir, const std::string& file) {
    const fs::path rel = fs::path(file).lexically_normal().lexically_relative(fs::path(base_dir).lexically_normal());
    GL_CHECK(!rel.empty() && *rel.begin() != "..", "lora merge: ", file, " is not inside the base folder ", base_dir);
    return rel.string();
}

std::string parent_dir(const std::string& path) {
    const fs::path p = fs::path(path).parent_path();
    return p.empty() ? "." : p.string();
}

}  // namespace

std::unique_ptr<FileNetwork> file_network(const models::ModelFiles& base, std::shared_ptr<const FileModules> modules,
                                          float multiplier) {
    auto fn = std::make_unique<FileNetwork>();
    gl::Graph& g = fn->g;
    fn->unet = std::make_unique<nn::Weights>(g, DType::f32);
    fn->text_encoder = std::make_unique<nn::Weights>(g, DType::f32);
    const models::Family& family = base.fam();
    const models::ModelConfig& mc = base.cfg();
    LoraConfig cfg;
    cfg.family = &family;
    cfg.from_file = std::move(modules);
    cfg.multiplier = multiplier;
    fn->net = std::make_unique<LoraNetwork>(cfg);
    fn->net->attach_unet(*fn->unet);
    fn->net->attach_text_encoder(*fn->text_encoder);
    const int64_t side = mc.size_multiple(), seq = family.tokens().sequence;
    gl::ValueId x = g.input("x", DType::f32, {1, side, side, mc.latent_channels()});
    gl::ValueId t = g.input("t", DType::f32, {1});
    gl::ValueId ctx = g.input("context", DType::f32, {1, seq, mc.context_width()});
    g.mark_output(family.denoiser(*fn->unet, mc, x, t, ctx));
    gl::ValueId ids = g.input("ids", DType::i32, {1, seq});
    g.mark_output(family.text_states(*fn->text_encoder, g, ids, mc, 1));
    return fn;
}

std::string checkpoint_key(const models::ModelFiles& base, Part part, const std::string& name) {
    return base.fam().weight_key(base, part, name);
}

MergeReport merge_lora_into_checkpoint(const models::ModelFiles& base, const std::string& base_path,
                                       const gl::io::TensorSource& lora_file, const std::string& out_arg,
                                       const MergeOptions& opt) {
    MergeReport rep;
    std::string out = out_arg;  // "merged/" names the folder "merged"
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    GL_CHECK(std::isfinite(opt.multiplier), "lora merge: the multiplier ", opt.multiplier, " is not a finite number");
    // The file's modules as it holds them (not shared: lora_file outlives the merge).
    const auto modules = std::make_shared<FileModules>(
        std::shared_ptr<const gl::io::TensorSource>(&lora_file, [](const gl::io::TensorSource*) {}), base.fam().ldm_names(base.cfg()));
    modules->check_holds_modules();
    const bool folder = base.layout == models::Layout::diffusers;
    std::string unet_rel, te_rel;
    FolderCopy plan;
    if (folder) {
        for (const std::string* f : {&base.unet_path, &base.text_encoder_path})
            GL_CHECK(ends_with(*f, ".safetensors"), "lora merge: ", *f,
                     " is not a safetensors file; the merged folder is written as safetensors only");
        unet_rel = relative_in(base_path, base.unet_path);
        te_rel = relative_in(base_path, base.text_encoder_path);
        plan = plan_folder_copy(base_path, {unet_rel, te_rel});
    }
    check_merge_output(base_path, folder ? plan.parts : std::vector<std::string>{gl::io::resolved_path(base_path)}, folder, out,
                       opt.overwrite);
    std::error_code ec;
    const bool replace = fs::exists(fs::symlink_status(out, ec));
    rep.stale_removed = gl::io::remove_stale_temps(out);
    // Before the (long) merge: the output's folder takes new files, and what will be written fits.
    gl::io::check_can_create(parent_dir(out), out);
    uint64_t need = file_bytes(*base.unet);
    if (folder) need = add_saturated(add_saturated(need, plan.bytes), file_bytes(*base.text_encoder));
    gl::io::check_free_space(parent_dir(out), need, "lora merge: " + out);

    // The base models in f32 with the network on them (tiny inputs: only the weights matter).
    const std::unique_ptr<FileNetwork> fn = file_network(base, modules, opt.multiplier);
    gl::Graph& g = fn->g;
    nn::Weights &wu = *fn->unet, &wc = *fn->text_encoder;
    LoraNetwork& net = *fn->net;
    // The network holds every module at the file's ranks: a huge rank is refused before anything
    // is allocated, naming the tensor it was read from.
    int64_t lora_bytes = 0;
    const Module* largest = nullptr;
    int64_t largest_bytes = -1;
    for (const Module& m : net.modules()) {
        int& rank = m.layer().kind == ModuleKind::conv ? rep.conv_rank : rep.rank;
        rank = std::max(rank, m.rank());
        int64_t bytes = 0;
        const std::string from = gl::cat("'", m.key(), ".", m.tensors().front().suffix, "'");
        for (const Tensor& tn : m.tensors())
            bytes = gl::checked_add(bytes, gl::checked_mul(g.shape(tn.id).numel(), int64_t(4), "lora merge: ", from),
                                    "lora merge: ", from);
        lora_bytes = gl::checked_add(lora_bytes, bytes, "lora merge: ", from);
        if (bytes > largest_bytes) largest = &m, largest_bytes = bytes;
    }
    rep.types = net.title();
    const uint64_t host = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
    if (largest != nullptr && uint64_t(lora_bytes) > host) {
        const Tensor& lead = largest->tensors().front();
        std::string shape;
        for (int64_t d : lead.file_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        gl::fail("lora merge: ", lora_file.origin(), ": tensor '", largest->key(), ".", lead.suffix, "' [", shape,
                 "] gives rank ", largest->rank(), "; the network at that rank needs ",
                 gl::format_bytes(size_t(lora_bytes)), ", more than this machine's ", gl::format_bytes(size_t(host)),
                 " of memory");
    }
    auto rt = gl::make_cpu_runtime(gl::make_plan(g));
    base.fam().load(Part::unet, wu, base, *rt);
    base.fam().load(Part::text_encoder, wc, base, *rt);

    const LoadReport lr = load_lora(lora_file, net, *rt, base.fam().ldm_names(base.cfg()));
    rep.format = lr.format;
    if (!lr.unexpected.empty()) {
        std::string list;
        for (size_t i = 0; i < lr.unexpected.size() && i < 10; i++) list += "\n  " + lr.unexpected[i];
        gl::fail("lora merge: ", lora_file.origin(), " holds ", lr.unexpected.size(),
                 " tensors this ", base.fam().description(), " network does not use; merging would drop them:", list);
    }
    size_t missing_unet = 0, missing_te = 0;
    for (const std::string& k : lr.missing) (k.rfind("lora_unet_", 0) == 0 ? missing_unet : missing_te)++;
    merge_into(net, *rt, Part::unet, wu, *rt);
    merge_into(net, *rt, Part::text_encoder, wc, *rt);

    // Where the base's files store every weight a module changed.
    std::map<std::string, Merged> unet_keys, te_keys;
    size_t n_unet = 0, n_te = 0;
    for (const Module& m : net.modules()) {
        const bool unet = m.layer().part == Part::unet;
        (unet ? n_unet : n_te)++;
        const std::string name = m.layer().path + ".weight";
        for (const nn::WeightEntry& e : (unet ? wu : wc).entries()) {
            if (e.name != name) continue;
            const models::StoredWeight at = base.fam().stored_weight(base, m.layer().part, name);
            GL_CHECK(!at.key.empty(), "lora merge: no checkpoint key for ", name);
            (unet ? unet_keys : te_keys)[at.key].push_back(Piece{e.id, e.layout, at.slice, at.slices});
        }
    }
    rep.unet_modules = n_unet - missing_unet;
    rep.text_encoder_modules = n_te - missing_te;

    const std::map<std::string, std::string> md = {
        {"gl.merged_lora", fs::path(lora_file.origin()).filename().string()},
        {"gl.merged_lora_multiplier", gl::cat(opt.multiplier)},
    };
    if (!folder) {
        std::map<std::string, Merged> all = unet_keys;
        all.insert(te_keys.begin(), te_keys.end());
        rep.tensors_written = write_source(*base.unet, all, *rt, out, md, opt.multiplier);
        return rep;
    }
    // Built beside the target and renamed when complete: a failure or a kill leaves no
    // half-merged folder under `out`.
    const std::string partial = gl::io::partial_dir_name(out);
    try {
        copy_folder(plan, partial);
        rep.tensors_written += write_source(*base.unet, unet_keys, *rt, (fs::path(partial) / unet_rel).string(), md,
                                            opt.multiplier);
        rep.tensors_written += write_source(*base.text_encoder, te_keys, *rt, (fs::path(partial) / te_rel).string(), md,
                                            opt.multiplier);
        publish_folder(partial, out, replace);
    } catch (...) {
        std::error_code ec;
        fs::remove_all(partial, ec);
        throw;
    }
    return rep;
}

}  // namespace lora
