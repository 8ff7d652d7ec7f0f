// gl-sd15check: the full-size SD1.5 check. Opens a model the way users have it (an original single
// file or a diffusers folder, through open_sd15), runs the UNet, the CLIP text encoder and the VAE
// (encode and decode) on the inputs stored in a reference file made by tests/golden/make_fullsize.py,
// and compares with diffusers' / transformers' fp32 outputs stored there. Per model it prints the
// load time (graph + plan, arena allocation, reading + converting + uploading the weights), the
// forward times and the device memory (the runtime's memory report and cudaMemGetInfo's used delta).
//
// Tolerance (on the relative error ||ours - ref|| / ||ref||; max abs error and the worst element
// are printed beside it):
//   f32:  1e-4. Both sides compute in fp32 (the reference with TF32 off); only summation order differs.
//   bf16: 3x diffusers' own bf16-vs-fp32 spread for that output (the larger of torch.autocast and
//         the model cast to bf16, measured by the generator and stored in the reference), at least
//         4e-3. Our bf16 graphs round at other points (fused epilogues, norm outputs), so they land
//         about as far from fp32 as diffusers' bf16 does, in another direction; a wrong tensor or a
//         layout mix-up gives errors of 0.1 to 1.
// Exit status: 0 when every output is within tolerance and the tokenizer gives the reference's ids,
// 1 when one is not, 2 on an error (bad file, unsupported model, CUDA failure).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef GL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "models/sd15/model_files.h"
#include "tools/common/cli.h"

using namespace gl;

namespace {

constexpr double kF32Tolerance = 1e-4;
constexpr double kSpreadFactor = 3.0;
constexpr double kBf16Floor = 4e-3;

struct Options {
    std::string model, reference, dtype = "bf16";
    Backend backend = Backend::cuda;
    int runs = 0;  // 0: the backend's default
};

Options parse(int argc, char** argv) {
    Options o;
    cli::Parser p("gl-sd15check", "gl-sd15check: the full-size SD1.5 check. Loads a model (single file or diffusers "
                                  "folder), runs the UNet, CLIP text encoder and VAE on a reference's inputs and "
                                  "compares with its outputs. Exit status 0: all within tolerance; 1: one is not; "
                                  "2: an error.");
    p.add_path("MODEL", o.model, "an SD1.5 single file or diffusers folder");
    p.add_path("REFERENCE", o.reference, "reference .safetensors made by tests/golden/make_fullsize.py");
    p.add_backend(o.backend, "where the models run");
    p.add_choice("--dtype", o.dtype, {"bf16", "f32"}, "weights and activations");
    p.add_int("--runs", o.runs, 1, 100, "forward passes per model (default 3 on CUDA: eager, CUDA-graph capture, "
                                        "replay; 1 on the CPU)")
        ->default_str("");
    p.parse(argc, argv);
    return o;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Bytes in use on the current device (all processes), or -1 without CUDA.
double device_used() {
#ifdef GL_HAVE_CUDA
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return double(total - free);
#else
    return -1;
#endif
}

nlohmann::json meta_json(const io::SafetensorsFile& ref, const std::string& key, bool required) {
    const auto& m = ref.metadata();
    const auto it = m.find(key);
    if (it == m.end()) {
        GL_CHECK(!required, ref.origin(), ": metadata '", key, "' is missing (not written by make_fullsize.py?)");
        return nullptr;
    }
    nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    GL_CHECK(!j.is_discarded(), ref.origin(), ": metadata '", key, "' is not valid JSON");
    return j;
}

// One field of a metadata JSON object; a missing field or one of the wrong type is named with
// the file and the path to it ("reference.safetensors: metadata 'spread'.'unet.eps': ...").
const nlohmann::json& field(const nlohmann::json& j, const std::string& key, const std::string& where) {
    GL_CHECK(j.is_object() && j.contains(key), where, ".'", key, "' is missing");
    return j.at(key);
}
std::string string_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
    const nlohmann::json& v = field(j, key, where);
    GL_CHECK(v.is_string(), where, ".'", key, "' is not a string");
    return v.get<std::string>();
}
double number_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
    const nlohmann::json& v = field(j, key, where);
    GL_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0, where, ".'", key,
             "' is not a non-negative number");
    return v.get<double>();
}

struct Check {
    std::string name;
    double rel = 0, max_abs = 0, max_ref = 0, tol = 0;
    std::string worst;  // the element with the largest error: index, ours, reference
    std::string basis;  // where the tolerance comes from
    bool pass = false;
};

// Index of flat element i in shape s, as "[b, y, x, c]".
std::string index_str(size_t i, const std::vector<int64_t>& s) {
    std::vector<int64_t> idx(s.size());
    for (size_t k = s.size(); k-- > 0;) {
        idx[k] = int64_t(i) % s[k];
        i /= size_t(s[k]);
    }
    std::string out = "[";
    for (size_t k = 0; k < idx.size(); k++) out += (k ? ", " : "") + std::to_string(idx[k]);
    return out + "]";
}

Check compare(const std::string& name, const std::vector<float>& ours, const std::vector<float>& ref,
              const std::vector<int64_t>& shape, double tol, const std::string& basis) {
    GL_CHECK(ours.size() == ref.size(), name, ": ", ours.size(), " values computed, the reference holds ", ref.size());
    Check c;
    c.name = name;
    double d2 = 0, r2 = 0;
    size_t worst = 0;
    bool finite = true;
    for (size_t i = 0; i < ours.size(); i++) {
        const double d = double(ours[i]) - double(ref[i]);
        finite = finite && std::isfinite(ours[i]);
        d2 += d * d;
        r2 += double(ref[i]) * double(ref[i]);
        c.max_ref = std::max(c.max_ref, std::fabs(double(ref[i])));
        if (!(std::fabs(d) <= c.max_abs)) c.max_abs = std::fabs(d), worst = i;  // NaN sticks as the worst
    }
    c.rel = finite ? std::sqrt(d2 / std::max(r2, 1e-300)) : INFINITY;
    c.tol = tol;
    c.basis = basis;
    c.worst = cat(index_str(worst, shape), " ours ", ours.empty() ? 0.0f : ours[worst], " ref ",
                  ref.empty() ? 0.0f : ref[worst]);
    c.pass = c.rel <= tol;
    return c;
}

struct Ctx {
    Options opt;
    DType dtype;
    io::SafetensorsFile ref;
    nlohmann::json spread;  // per output: {"autocast_bf16": {"rel", "max_abs"}, "bf16": {...}}
    std::vector<Check> checks;
};

// The tolerance of one output and the sentence that says where it comes from.
std::pair<double, std::string> tolerance(const Ctx& c, const std::string& out) {
    if (c.dtype == DType::f32) return {kF32Tolerance, "f32 vs fp32"};
    GL_CHECK(c.spread.is_object() && c.spread.contains(out), c.ref.origin(), ": no diffusers bf16 spread for ", out);
    const std::string where = c.ref.origin() + ": metadata 'spread'.'" + out + "'";
    const nlohmann::json& s = c.spread.at(out);
    const double a = number_field(field(s, "autocast_bf16", where), "rel", where + ".'autocast_bf16'"),
                 b = number_field(field(s, "bf16", where), "rel", where + ".'bf16'");
    const double tol = std::max(kSpreadFactor * std::max(a, b), kBf16Floor);
    return {tol, cat("diffusers bf16 spread: autocast ", a, ", bf16 model ", b)};
}

std::vector<float> ref_f32(const io::SafetensorsFile& ref, const std::string& k) {
    std::vector<float> v(size_t(ref.info(k).numel()));
    ref.read(k, v.data(), DType::f32);
    return v;
}

// One model: what its graph reads from the reference and what it should give.
struct Binding {
    std::string ref;
    ValueId id;
};
struct ModelGraph {
    std::vector<Binding> inputs, outputs;
};

// Builds a model's graph (build), plans it, allocates a runtime, poisons it (so an unloaded weight
// shows as NaN), loads the weights (load), runs, compares, and prints times and memory.
void check_model(Ctx& c, const char* name, const std::function<ModelGraph(nn::Weights&, Graph&)>& build,
                 const std::function<nn::LoadReport(const nn::Weights&, Runtime&)>& load) {
    std::printf("\n== %s ==\n", name);
    auto t0 = Clock::now();
    Graph g;
    nn::Weights w(g, c.dtype);
    const ModelGraph mg = build(w, g);
    for (const Binding& b : mg.outputs) g.mark_output(b.id);
    Plan plan = make_plan(g);
    const double plan_ms = ms_since(t0);

    const double used0 = device_used();
    t0 = Clock::now();
    std::unique_ptr<Runtime> rt = make_runtime(std::move(plan), c.opt.backend);
    rt->poison(0xff);  // NaN in f32, bf16 and f16
    const double alloc_ms = ms_since(t0);
    t0 = Clock::now();
    const nn::LoadReport rep = load(w, *rt);
    rt->synchronize();
    const double load_ms = ms_since(t0);
    GL_CHECK(rep.missing.empty(), name, ": ", rep.missing.size(), " weights missing, first ", rep.missing.front());
    std::printf("load: graph + plan %.0f ms (%zu nodes), allocate + poison %.0f ms, weights %.0f ms (%zu tensors, %.1f MiB "
                "on the device, %.2f GB/s)%s\n",
                plan_ms, rt->plan().graph.nodes.size(), alloc_ms, load_ms, rep.tensors, mib(double(rep.bytes)),
                double(rep.bytes) / (load_ms * 1e6), rep.unexpected.empty() ? "" : cat("; ", rep.unexpected.size(),
                " unexpected keys, first ", rep.unexpected.front()).c_str());

    for (const Binding& b : mg.inputs) {
        const io::TensorInfo ti = c.ref.info(b.ref);
        if (ti.dtype == DType::i32) {
            std::vector<int32_t> v(size_t(ti.numel()));
            c.ref.read(b.ref, v.data(), DType::i32);
            rt->write(b.id, v.data(), DType::i32);
        } else {
            rt->write_f32(b.id, ref_f32(c.ref, b.ref));
        }
    }
    std::vector<std::vector<float>> first;
    std::string times;
    for (int r = 0; r < c.opt.runs; r++) {
        t0 = Clock::now();
        rt->run();
        rt->synchronize();
        times += cat(r ? ", " : "", int(std::lround(ms_since(t0))), " ms");
        if (r == 0)
            for (const Binding& b : mg.outputs) first.push_back(rt->read_f32(b.id));
    }
    std::printf("forward: %s%s\n", times.c_str(),
                c.opt.backend == Backend::cuda && c.opt.runs >= 3 ? " (eager, CUDA-graph capture + launch, replay)" : "");
    const double used1 = device_used();

    bool same = true;
    for (size_t i = 0; i < mg.outputs.size(); i++) {
        const Binding& b = mg.outputs[i];
        const std::vector<float> ours = rt->read_f32(b.id);
        same = same && ours == first[i];
        const auto [tol, basis] = tolerance(c, b.ref);
        c.checks.push_back(compare(b.ref, ours, ref_f32(c.ref, b.ref), c.ref.info(b.ref).shape, tol, basis));
        const Check& k = c.checks.back();
        std::printf("%-12s rel %.3e (tolerance %.3e: %s)  max abs %.3e (max |ref| %.3f)  worst %s  %s\n",
                    k.name.c_str(), k.rel, k.tol, k.basis.c_str(), k.max_abs, k.max_ref, k.worst.c_str(),
                    k.pass ? "ok" : "FAIL");
    }
    if (c.opt.runs > 1) std::printf("runs 1 and %d bitwise identical: %s\n", c.opt.runs, same ? "yes" : "no");

    double arenas = 0;
    for (int k = 0; k < kCategoryCount; k++) arenas += double(rt->allocated_bytes(Category(k)));
    std::printf("memory: arenas %.1f MiB (frozen weights %.1f, activations %.1f)", mib(arenas),
                mib(double(rt->allocated_bytes(Category::frozen))), mib(double(rt->allocated_bytes(Category::activations))));
    if (used0 >= 0 && used1 >= 0) std::printf("; cudaMemGetInfo used +%.1f MiB over the run", mib(used1 - used0));
    std::printf("\n%s", rt->memory_report().c_str());
}

// The ids of the reference (transformers' CLIPTokenizer) against the model's tokenizer.
bool check_tokenizer(const Ctx& c, const sd::Sd15Files& m) {
    const nlohmann::json caps = meta_json(c.ref, "captions", true);
    const io::TensorInfo ti = c.ref.info("clip.ids");
    GL_CHECK(caps.is_array() && ti.shape.size() == 2 && int64_t(caps.size()) == ti.shape[0] && ti.shape[1] == 77,
             c.ref.origin(), ": captions do not match clip.ids");
    std::vector<int32_t> ids(size_t(ti.numel()));
    c.ref.read("clip.ids", ids.data(), DType::i32);
    bool ok = true;
    for (size_t i = 0; i < caps.size(); i++) {
        GL_CHECK(caps[i].is_string(), c.ref.origin(), ": metadata 'captions'[", i, "] is not a string");
        const std::vector<int32_t> ours = m.tokenizer->encode(caps[i].get<std::string>());
        for (size_t k = 0; k < ours.size(); k++)
            if (ours[k] != ids[i * 77 + k]) {
                std::printf("tokenizer: caption %zu differs at token %zu: ours %d, transformers %d\n", i, k, ours[k],
                            ids[i * 77 + k]);
                ok = false;
                break;
            }
    }
    std::printf("tokenizer (%s): %zu captions, ids %s transformers' CLIPTokenizer\n",
                m.tokenizer_path.empty() ? "built in" : m.tokenizer_path.c_str(), caps.size(),
                ok ? "equal to" : "DIFFER from");
    return ok;
}

sd::Sd15Files open_model(const Ctx& c) {
    const nlohmann::json cfgs = meta_json(c.ref, "single_file_configs", false);
    if (cfgs.is_null() || std::filesystem::is_directory(c.opt.model)) return sd::open_sd15(c.opt.model);
    // A tiny test model's single file: it is no SD1.5, so the configs it was made with come along.
    GL_CHECK(cfgs.is_object(), c.ref.origin(), ": metadata 'single_file_configs' is not an object");
    const std::string where = c.ref.origin() + ": metadata 'single_file_configs'";
    sd::Sd15Files m = sd::open_sd15_single_file(
        c.opt.model, sd::parse_unet_config(string_field(cfgs, "unet", where), where + ".'unet'"),
        sd::parse_clip_config(string_field(cfgs, "text_encoder", where), where + ".'text_encoder'"),
        sd::parse_vae_config(string_field(cfgs, "vae", where), where + ".'vae'"));
    sd::check_sd15_pipeline(m);
    std::printf("configs: from the reference's single_file_configs (a tiny test model)\n");
    return m;
}

int run(Options o) {
    o.backend = resolve_backend(o.backend);  // --backend cuda without CUDA: refused before any work
    if (o.runs == 0) o.runs = o.backend == Backend::cuda ? 3 : 1;
    Ctx c{o, o.dtype == "bf16" ? DType::bf16 : DType::f32, io::SafetensorsFile(o.reference), nullptr, {}};
    c.spread = meta_json(c.ref, "spread", c.dtype == DType::bf16);
    const auto& md = c.ref.metadata();
    auto meta = [&](const char* k) { return md.count(k) ? md.at(k) : std::string("?"); };
    std::printf("gl-sd15check: %s vs %s (%s, reference made on %s with %s), backend %s, dtype %s\n", o.model.c_str(),
                o.reference.c_str(), meta("size").c_str(), meta("device").c_str(), meta("models").c_str(),
                backend_name(o.backend), o.dtype.c_str());

    auto t0 = Clock::now();
    const sd::Sd15Files m = open_model(c);
    std::printf("open (%s): %.0f ms\n  unet %s\n  text encoder %s\n  vae %s\n", sd::sd15_layout_name(m.layout), ms_since(t0),
                m.unet_path.c_str(), m.text_encoder_path.c_str(), m.vae_path.c_str());
    const bool tok_ok = check_tokenizer(c, m);
    auto input = [&](Graph& g, const char* k, DType t) {
        return Binding{k, g.input(k, t, Shape::of(c.ref.info(k).shape))};
    };

    check_model(
        c, "UNet",
        [&](nn::Weights& w, Graph& g) {
            ModelGraph mg{{input(g, "unet.x", DType::f32), input(g, "unet.t", DType::f32),
                           input(g, "unet.context", DType::f32)}, {}};
            mg.outputs.push_back({"unet.eps", sd::unet_forward(w, m.unet_cfg, mg.inputs[0].id, mg.inputs[1].id,
                                                               mg.inputs[2].id)});
            return mg;
        },
        [&](const nn::Weights& w, Runtime& rt) { return sd::load_unet(w, m.unet_cfg, *m.unet, rt); });
    check_model(
        c, "CLIP text encoder",
        [&](nn::Weights& w, Graph& g) {
            ModelGraph mg{{input(g, "clip.ids", DType::i32)}, {}};
            mg.outputs.push_back({"clip.last", sd::build_clip(w, g, mg.inputs[0].id, m.clip_cfg, 1)});
            mg.outputs.push_back({"clip.skip2", sd::build_clip(w, g, mg.inputs[0].id, m.clip_cfg, 2)});
            return mg;
        },
        [&](const nn::Weights& w, Runtime& rt) { return sd::load_clip(w, *m.text_encoder, rt); });
    check_model(
        c, "VAE",
        [&](nn::Weights& w, Graph& g) {
            ModelGraph mg{{input(g, "vae.x", DType::f32), input(g, "vae.z", DType::f32)}, {}};
            mg.outputs.push_back({"vae.moments", sd::vae_encode(w, m.vae_cfg, mg.inputs[0].id).moments});
            mg.outputs.push_back({"vae.image", sd::vae_decode(w, m.vae_cfg, mg.inputs[1].id)});
            return mg;
        },
        [&](const nn::Weights& w, Runtime& rt) { return sd::load_vae(w, m.vae_cfg, *m.vae, rt); });

    int failed = tok_ok ? 0 : 1;
    std::printf("\nsummary (%s, %s, %s):\n", sd::sd15_layout_name(m.layout), backend_name(o.backend), o.dtype.c_str());
    for (const Check& k : c.checks) {
        std::printf("  %-12s rel %.3e  tolerance %.3e  %s\n", k.name.c_str(), k.rel, k.tol, k.pass ? "ok" : "FAIL");
        failed += k.pass ? 0 : 1;
    }
    std::printf("%s\n", failed ? "FAILED" : "all within tolerance");
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // logs go to files: keep what was printed if a run dies
    return cli::run_main("gl-sd15check", [&] { return run(parse(argc, argv)); }, /*failure_status=*/2);
}
