// The dataset pipeline's throughput (a benchmark, not a test; results go to bench/RESULTS.md):
//  1. decode + resize: a generated set of 512-class JPEGs (sizes around 512x512 .. 1024x768, as
//     training sets hold) decoded, resized to their kohya bucket and cropped, on N threads;
//  2. the loader: batches drawn while a simulated step of --step-ms runs, and how long next()
//     waited for data (0 in steady state means the GPU never waits for the host);
//  3. latent caching with a VAE file (--vae): images per second at the bucket sizes, batch
//     --vae-batch, on --backend cpu|cuda in bf16 (f32 on the CPU). Compare with
//     bench/bench_vae_diffusers.py (diffusers' AutoencoderKL.encode, same sizes and batch).
// Usage: bench_data --help.
// (--tiny: the golden tests' tiny VAE, tests/golden/data/vae/weights_diffusers.safetensors; it
// only checks the flow, and its one-level downscale makes attention at these sizes very slow.)
// A plain program (ninja bench_data), like bench_step.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/bucket.h"
#include "data/latent_cache.h"
#include "data/loader.h"
#include "data/resize.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "tools/common/cli.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A photo-like picture: smooth gradients, shapes and fine noise (JPEG size close to real photos).
std::vector<uint8_t> picture(int w, int h, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> px(size_t(w) * h * 3);
    const float fx = 0.01f + float(rng() % 100) / 4000.f, fy = 0.01f + float(rng() % 100) / 4000.f;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                const float v = 128 + 90 * std::sin(fx * x * (c + 1) + fy * y) + float(int(rng() % 17) - 8);
                px[(size_t(y) * w + x) * 3 + c] = uint8_t(std::clamp(v, 0.f, 255.f));
            }
    return px;
}

void write_jpeg_set(const fs::path& dir, int n) {
    const int sizes[][2] = {{512, 512}, {640, 480}, {480, 640}, {768, 512}, {512, 768}, {1024, 768}, {768, 1024}, {600, 600}};
    fs::create_directories(dir / "1_bench");
    for (int i = 0; i < n; i++) {
        const fs::path p = dir / "1_bench" / ("img" + std::to_string(i) + ".jpg");
        if (fs::exists(p)) continue;
        const int w = sizes[i % 8][0], h = sizes[i % 8][1];
        const std::vector<uint8_t> px = picture(w, h, uint32_t(i));
        GL_CHECK(stbi_write_jpg(p.string().c_str(), w, h, 3, px.data(), 90), "cannot write ", p.string());
    }
}

}  // namespace

int run(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    int images = 256, step_ms = 50, vae_batch = 8;
    std::vector<int> threads = {1, 2, 4, 8, 16};
    std::string vae_path, dir_arg;
    gl::Backend backend = gl::Backend::cpu;
    bool tiny = false;
    gl::cli::Parser p("bench_data", "bench_data: the dataset pipeline's throughput (decode + resize on N threads, "
                                    "the loader against a simulated step, latent caching with a VAE file)");
    p.add_int("--images", images, 1, 1'000'000, "JPEGs in the generated set");
    p.add_int_list("--threads", threads, 1, 1024, "decode + resize thread counts");
    p.add_int("--step-ms", step_ms, 0, 100'000, "the simulated training step the loader runs beside");
    p.add_path("--vae", vae_path, "VAE weights (diffusers' vae/diffusion_pytorch_model.safetensors): latent caching");
    p.add_flag("--tiny", tiny, "the --vae file is the golden tests' tiny VAE");
    p.add_backend(backend, "where the VAE runs (bf16 on CUDA, f32 on the CPU)");
    p.add_int("--vae-batch", vae_batch, 1, 4096, "images per VAE call");
    p.add_path("--dir", dir_arg, "where the generated set lives (default: a temp folder)");
    p.parse(argc, argv);
    const fs::path dir = dir_arg.empty() ? fs::temp_directory_path() / "gl_bench_data" : fs::path(dir_arg);
    const auto t_gen = Clock::now();
    write_jpeg_set(dir, images);
    std::printf("data set: %d JPEGs (q90, 512x512 .. 1024x768) in %s, made in %.1f s\n", images, dir.c_str(),
                seconds_since(t_gen));

    std::vector<std::string> warnings;
    data::ConfigLevel cli = {{"enable_bucket", true}, {"batch_size", int64_t(vae_batch)}};
    const data::Dataset ds = data::build_dataset(data::folder_dataset_config(dir, std::nullopt, cli, warnings));
    const data::BucketAssignment a = data::assign_buckets(ds);
    std::fputs(data::bucket_table(a).c_str(), stdout);

    std::printf("\ndecode + resize + crop to the bucket (kohya's resize), %u hardware threads:\n",
                std::thread::hardware_concurrency());
    for (int t : threads) {
        std::atomic<size_t> next{0}, pixels{0};
        const auto t0 = Clock::now();
        std::vector<std::thread> pool;
        for (int k = 0; k < t; k++)
            pool.emplace_back([&] {
                for (size_t i; (i = next++) < ds.images.size();) {
                    const data::PreparedImage p = data::prepare_image(ds.images[i], a.choice[i], false, false);
                    pixels += p.rgb.size();
                }
            });
        for (std::thread& th : pool) th.join();
        const double s = seconds_since(t0);
        std::printf("  %2d threads: %8.1f images/s  (%.1f ms per image per thread)\n", t, double(ds.images.size()) / s,
                    1000.0 * s * t / double(ds.images.size()));
    }

    std::printf("\nloader (images prepared, %d threads, queue 4) against a %d ms step:\n", threads.back(), step_ms);
    {
        data::LoaderOptions o;
        o.threads = threads.back();
        o.epochs = 2;
        data::Loader l(ds, a, o);
        size_t n = 0;
        double first_wait = -1;
        const auto t0 = Clock::now();
        while (std::optional<data::Batch> b = l.next()) {
            if (first_wait < 0) first_wait = l.wait_seconds();
            n++;
            std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        }
        std::printf("  %zu batches in %.2f s; waited %.3f s for the first batch, %.3f s for all the others\n", n,
                    seconds_since(t0), first_wait, l.wait_seconds() - first_wait);
    }

    if (vae_path.empty()) {
        std::printf("\nlatent caching: skipped (give --vae vae/diffusion_pytorch_model.safetensors)\n");
        return 0;
    }
    gl::io::SafetensorsFile weights(vae_path);
    const sd::VaeConfig vc = tiny ? sd::VaeConfig::tiny() : sd::VaeConfig::sd15();
    const bool cuda = gl::resolve_backend(backend) == gl::Backend::cuda;
    data::VaeGraphEncoder enc(vc, weights, "bench", cuda ? gl::DType::bf16 : gl::DType::f32,
                              cuda ? gl::Backend::cuda : gl::Backend::cpu);
    data::LatentCache cache;  // in RAM: every run encodes everything
    data::CacheOptions co;
    co.vae_batch_size = vae_batch;
    const auto t0 = Clock::now();
    const data::CacheReport r = data::cache_latents(ds, a, cache, enc, co);
    const double s = seconds_since(t0);
    std::printf("\nlatent caching (%s, %s, batch %d): %zu images in %.2f s = %.1f images/s, %zu VAE calls, "
                "%d graphs built (bucket shapes and last partial batches; their build and weight load included)\n",
                cuda ? "cuda" : "cpu", cuda ? "bf16" : "f32", vae_batch, r.encoded, s, double(r.encoded) / s, r.vae_calls,
                enc.graphs_built());
    return 0;
}

int main(int argc, char** argv) {
    return gl::cli::run_main("bench_data", [&] { return run(argc, argv); });
}
