// Start-up cost of the SD1.5 UNet: writes a UNet-shaped checkpoint (diffusers names, PyTorch
// layouts, fp16 random values, as SD1.5 files ship) once, then times opening it and loading it
// into a runtime's bf16 arenas (conversion, conv weights to [O][kh][kw][I], upload).
// Usage: bench_load [--backend auto|cpu|cuda (default cpu)] [--file PATH (default: a temp file, removed at exit)]
// A plain program (ninja bench_load), like bench_step.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/rng.h"
#include "models/sd15/unet.h"
#include "tools/common/cli.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct UnetGraph {
    gl::Graph g;
    nn::Weights w{g, gl::DType::bf16};
    sd::UnetConfig c = sd::UnetConfig::sd15();
    UnetGraph() {
        gl::ValueId x = g.input("x", gl::DType::bf16, {1, 64, 64, 4});
        gl::ValueId t = g.input("t", gl::DType::f32, {1});
        gl::ValueId ctx = g.input("context", gl::DType::bf16, {1, 77, 768});
        g.mark_output(sd::unet_forward(w, c, x, t, ctx));
    }
};

void write_checkpoint(const UnetGraph& u, const std::string& path) {
    std::vector<gl::io::TensorToWrite> ts;
    std::vector<std::vector<uint16_t>> data;
    data.reserve(u.w.entries().size());
    for (const nn::WeightEntry& e : u.w.entries()) {
        gl::Shape s = u.g.shape(e.id);
        std::vector<int64_t> shape = s.vec();
        if (e.layout == nn::WeightLayout::conv_ohwi) shape = {s[0], s[3], s[1], s[2]};  // PyTorch OIHW
        data.emplace_back(size_t(s.numel()));
        for (size_t i = 0; i < data.back().size(); i++)
            data.back()[i] = gl::f32_to_f16(0.05f * (2.0f * gl::rng_uniform(e.id, i) - 1.0f));
        ts.push_back({sd::unet_key_diffusers(e.name), gl::DType::f16, shape, data.back().data()});
    }
    gl::io::write_safetensors(path, ts, {});
}

int run(int argc, char** argv) {
    gl::Backend backend = gl::Backend::cpu;
    std::string file;
    gl::cli::Parser p("bench_load", "bench_load: times loading a UNet-shaped fp16 checkpoint into bf16 arenas.");
    p.add_backend(backend, "where the arenas live");
    p.add_path("--file", file, "the checkpoint, written first when missing (default: a temp file, removed at exit)");
    p.parse(argc, argv);
    backend = gl::resolve_backend(backend);
    const bool temp = file.empty();
    if (temp) file = (std::filesystem::temp_directory_path() / "gl_bench_load_unet.safetensors").string();
    UnetGraph u;
    if (!std::filesystem::exists(file)) {
        const auto t = Clock::now();
        write_checkpoint(u, file);
        std::printf("wrote %s (%.1f MiB) in %.1f s\n", file.c_str(), double(std::filesystem::file_size(file)) / 1048576.0,
                    seconds_since(t));
    }
    auto t0 = Clock::now();
    gl::Plan plan = gl::make_plan(u.g);
    auto rt = gl::make_runtime(std::move(plan), backend);
    const double setup = seconds_since(t0);
    for (int rep = 0; rep < 2; rep++) {  // the second pass reads the file from the page cache
        const auto t = Clock::now();
        gl::io::SafetensorsFile f(file);
        nn::LoadReport r = sd::load_unet(u.w, u.c, f, *rt);
        rt->synchronize();
        const double s = seconds_since(t);
        std::printf("load %d (%s): %zu tensors, %.1f MiB in the arenas, %.2f s, %.2f GB/s (runtime set-up %.2f s)\n", rep + 1,
                    gl::backend_name(backend), r.tensors, double(r.bytes) / 1048576.0, s, double(r.bytes) / s * 1e-9, setup);
    }
    if (temp) std::filesystem::remove(file);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("bench_load", [&] { return run(argc, argv); });
}
