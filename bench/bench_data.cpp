// The dataset pipeline's throughput (a benchmark, not a test; results go to bench/RESULTS.md):
//  1. decode + resize: a generated set of 512-class JPEGs (sizes around 512x512 .. 1024x768, as
//     training sets hold) decoded, resized to their kohya bucket and cropped, on N threads;
//  2. the loader: batches drawn while a simulated step of --step-ms runs, and how long next()
//     waited for data (0 in steady state means the GPU never waits for the host);
//  3. latent caching with a VAE file (--vae): images per second at the bucket sizes, batch
//     --vae-batch, on --backend cpu|cuda in bf16 (f32 on the CPU), run --cache-runs times on one
//     encoder (the first plans the shapes and loads the weights; later ones show the steady state),
//     with the call's wall time split into scan / setup / waiting for prepared images / encoder
//     calls / waiting for writes; then the encoder alone on one batch of the most common shape
//     (--encode-iters calls, warm), and with --profile its per-node profile. Compare with
//     bench/bench_vae_diffusers.py (diffusers' AutoencoderKL.encode, same size and batch).
//     --null-encoder replaces the VAE by an encoder that returns zeros at once: the host side alone
//     (read, hash, decode, resize, convert, sample, write), on any machine.
//  0. with --read-check DIR: what reading a kohya folder (DIR/<repeats>_<name>/) costs: each
//     file's header alone, as the dataset read did before it checked whole files; build_dataset
//     (every file read and checked by its decoder on the worker pool); a full decode of every
//     file on as many threads, for scale. Then it stops.
// Usage: bench_data --help.
// (--tiny: the golden tests' tiny VAE, tests/golden/data/vae/weights_diffusers.safetensors; it
// only checks the flow, and its one-level downscale makes attention at 512 very slow: give it
// --resolution 64.)
// A plain program (ninja bench_data), like bench_step.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/bucket.h"
#include "data/latent_cache.h"
#include "data/loader.h"
#include "data/resize.h"
#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "pipelines/cache_encoders.h"
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

// The host side of caching alone: SD1.5-shaped latents of zeros, at once.
class NullEncoder : public data::ImageEncoder {
public:
    NullEncoder(gl::DType input) : input_(input) {}
    std::string identity() const override { return "null"; }
    data::LatentSpec latent_spec() const override { return {4, 8, 0.18215f, 0.0f}; }
    gl::DType input_dtype() const override { return input_; }
    std::vector<float> encode(const void*, gl::DType, const data::EncoderShape&, std::span<const float> noise) override {
        return std::vector<float>(noise.size(), 0.0f);
    }
    void release() override {}

private:
    gl::DType input_;
};

void print_times(const data::CacheReport& r, int threads) {
    const data::CacheTimes& t = r.times;
    std::printf("    wall %.2f s = scan %.2f + encoder setup %.2f + waiting for prepared images %.2f + encoder calls "
                "%.2f + waiting for writes %.2f (+ %.2f other)\n",
                t.total, t.scan, t.setup, t.wait_prepare, t.encode, t.wait_write,
                t.total - t.scan - t.setup - t.wait_prepare - t.encode - t.wait_write);
    std::printf("    workers (%d threads) busy %.2f s reading, decoding, resizing, converting: %.1f ms per image\n", threads,
                t.prepare_busy, r.encoded ? 1000.0 * t.prepare_busy / double(r.encoded) : 0.0);
}

// Part 0 (--read-check): the dataset read's cost on a folder of the user's own images.
void read_check(const fs::path& dir) {
    std::vector<std::string> warnings;
    const data::DatasetConfig cfg = data::folder_dataset_config(dir, std::nullopt, {}, warnings);
    std::vector<fs::path> files;
    uint64_t bytes = 0;
    for (const data::SubsetConfig& s : cfg.subsets)
        for (const fs::directory_entry& e : fs::directory_iterator(s.image_dir))
            if (data::has_image_extension(e.path())) files.push_back(e.path()), bytes += e.file_size();
    const auto t0 = Clock::now();
    int64_t pixels = 0;
    for (const fs::path& f : files) {
        const std::vector<uint8_t> b = data::read_file_bytes(f);
        const data::ImageHeader h = data::read_image_header(b.data(), b.size(), f.string());
        pixels += int64_t(h.width) * h.height;
    }
    const double headers = seconds_since(t0);
    const auto t1 = Clock::now();
    const data::Dataset ds = data::build_dataset(cfg);
    const double checked = seconds_since(t1);
    const int threads = data::default_worker_threads();
    std::atomic<size_t> next{0};
    const auto t2 = Clock::now();
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; k++)
        pool.emplace_back([&] {
            for (size_t i; (i = next++) < ds.images.size();) data::load_image(ds.images[i].path);
        });
    for (std::thread& th : pool) th.join();
    const double decoded = seconds_since(t2);
    std::printf("dataset read of %zu files (%.1f MB, %.1f megapixels) in %s, %d threads:\n", files.size(),
                double(bytes) / 1e6, double(pixels) / 1e6, dir.c_str(), threads);
    std::printf("  headers only (the read before the check, one thread): %7.3f s  (%.1f ms per file)\n", headers,
                1000 * headers / double(files.size()));
    std::printf("  build_dataset (every file checked whole):            %7.3f s  (%.1f ms per file; %zu skipped)\n",
                checked, 1000 * checked / double(files.size()), ds.skipped.size());
    std::printf("  full decode of every image, for scale:                %7.3f s  (%.1f ms per file)\n", decoded,
                1000 * decoded / double(files.size()));
}

}  // namespace

int run(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    int images = 256, step_ms = 50, vae_batch = 8, resolution = 512;
    std::vector<int> threads = {1, 2, 4, 8, 16};
    std::string vae_path, dir_arg;
    gl::Backend backend = gl::Backend::cpu;
    bool tiny = false, null_encoder = false, profile = false;
    int cache_threads = 0, cache_runs = 2, encode_iters = 10;
    std::string cache_dir;
    gl::cli::Parser p("bench_data", "bench_data: the dataset pipeline's throughput (decode + resize on N threads, "
                                    "the loader against a simulated step, latent caching with a VAE file)");
    p.add_int("--images", images, 1, 1'000'000, "JPEGs in the generated set");
    p.add_int_list("--threads", threads, 1, 1024, "decode + resize thread counts");
    p.add_int("--resolution", resolution, 64, 4096, "the buckets' resolution (a multiple of 64; buckets from half to twice it)");
    p.add_int("--step-ms", step_ms, 0, 100'000, "the simulated training step the loader runs beside");
    p.add_path("--vae", vae_path, "VAE weights (diffusers' vae/diffusion_pytorch_model.safetensors): latent caching");
    p.add_flag("--tiny", tiny, "the --vae file is the golden tests' tiny VAE");
    p.add_backend(backend, "where the VAE runs (bf16 on CUDA, f32 on the CPU)");
    p.add_int("--vae-batch", vae_batch, 1, 4096, "images per VAE call");
    p.add_flag("--null-encoder", null_encoder, "cache with an encoder that returns zeros at once (the host side alone)");
    p.add_int("--cache-threads", cache_threads, 0, 1024, "latent caching's worker threads (0: one per hardware thread)");
    p.add_int("--cache-runs", cache_runs, 1, 100, "latent caching runs on one encoder (the first includes setup)");
    p.add_path("--cache-dir", cache_dir, "write the entries to this folder (emptied first; default: RAM only)");
    p.add_int("--encode-iters", encode_iters, 0, 100'000, "encoder calls timed alone on one batch after caching");
    p.add_flag("--profile", profile, "print the encoder graph's per-node profile for one batch");
    p.add_path("--dir", dir_arg, "where the generated set lives (default: a temp folder)");
    std::string read_dir;
    p.add_path("--read-check", read_dir, "time the dataset read of this kohya folder (headers, the whole-file check, "
                                         "a full decode) and stop");
    p.parse(argc, argv);
    if (!read_dir.empty()) {
        read_check(read_dir);
        return 0;
    }
    GL_CHECK(resolution % 64 == 0, "--resolution must be a multiple of 64, got ", resolution);
    const fs::path dir = dir_arg.empty() ? fs::temp_directory_path() / "gl_bench_data" : fs::path(dir_arg);
    const auto t_gen = Clock::now();
    write_jpeg_set(dir, images);
    std::printf("data set: %d JPEGs (q90, 512x512 .. 1024x768) in %s, made in %.1f s\n", images, dir.c_str(),
                seconds_since(t_gen));

    std::vector<std::string> warnings;
    data::ConfigLevel cli = {{"enable_bucket", true}, {"batch_size", int64_t(vae_batch)},
                             {"resolution", std::array<int64_t, 2>{resolution, resolution}},
                             {"min_bucket_reso", int64_t(resolution / 2)}, {"max_bucket_reso", int64_t(resolution * 2)},
                             {"bucket_reso_steps", int64_t(resolution / 8)}};  // kohya's defaults at 512
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

    if (vae_path.empty() && !null_encoder) {
        std::printf("\nlatent caching: skipped (give --vae vae/diffusion_pytorch_model.safetensors, or --null-encoder)\n");
        return 0;
    }
    std::unique_ptr<gl::io::SafetensorsFile> weights;
    std::unique_ptr<data::ImageEncoder> enc;
    sd::VaeGraphEncoder* vae = nullptr;
    const bool cuda = !null_encoder && gl::resolve_backend(backend) == gl::Backend::cuda;
    const gl::DType dtype = cuda ? gl::DType::bf16 : gl::DType::f32;
    if (null_encoder) {
        enc = std::make_unique<NullEncoder>(gl::DType::bf16);
    } else {
        weights = std::make_unique<gl::io::SafetensorsFile>(vae_path);
        auto v = std::make_unique<sd::VaeGraphEncoder>(tiny ? sd::VaeConfig::tiny() : sd::VaeConfig::sd15(), *weights,
                                                         "bench", dtype, cuda ? gl::Backend::cuda : gl::Backend::cpu);
        vae = v.get();
        enc = std::move(v);
    }
    const char* what = null_encoder ? "null encoder, bf16 input" : cuda ? "cuda, bf16" : "cpu, f32";
    const int threads_used = cache_threads ? cache_threads : data::default_worker_threads();
    for (int run = 1; run <= cache_runs; run++) {
        std::optional<data::LatentCache> cache;  // every run encodes everything
        if (cache_dir.empty()) {
            cache.emplace();
        } else {
            fs::remove_all(cache_dir);
            cache.emplace(fs::path(cache_dir));
        }
        data::CacheOptions co;
        co.vae_batch_size = vae_batch;
        co.threads = cache_threads;
        const data::CacheReport r = data::cache_latents(ds, a, *cache, *enc, co);
        std::printf("\nlatent caching run %d (%s, batch %d, %d threads, %s): %zu images in %.2f s = %.1f images/s, "
                    "%zu VAE calls\n",
                    run, what, vae_batch, threads_used, cache_dir.empty() ? "RAM" : "disk", r.encoded, r.times.total,
                    double(r.encoded) / r.times.total, r.vae_calls);
        print_times(r, threads_used);
    }
    if (!vae) return 0;
    const sd::VaeGraphEncoder::Times& t = vae->times();
    std::printf("  encoder: %d graphs planned, weights loaded %d time(s), setup %.2f s; over %d calls: upload %.3f s, "
                "run + read back %.3f s\n%s",
                vae->graphs_built(), vae->weight_loads(), t.setup, t.calls, t.upload, t.run,
                vae->memory_report().c_str());

    // The encoder alone on one batch of the most common shape, as diffusers' loop runs it.
    std::map<data::EncoderShape, size_t> seen;
    for (const data::Bucket& b : a.buckets) seen[{vae_batch, b.reso.h, b.reso.w}] += size_t(b.distinct);
    const data::EncoderShape shape =
        std::max_element(seen.begin(), seen.end(), [](const auto& x, const auto& y) { return x.second < y.second; })->first;
    std::vector<uint16_t> x(size_t(shape.batch) * size_t(shape.height) * size_t(shape.width) * 3);
    std::mt19937 rng(1);
    for (uint16_t& v : x) v = gl::f32_to_bf16(float(rng() % 2001) / 1000.f - 1.f);
    if (encode_iters > 0) {
        vae->moments(x.data(), gl::DType::bf16, shape);  // warm: the runtime made, its graph captured
        vae->moments(x.data(), gl::DType::bf16, shape);
        const auto t0 = Clock::now();
        for (int i = 0; i < encode_iters; i++) vae->moments(x.data(), gl::DType::bf16, shape);
        const double s = seconds_since(t0);
        std::printf("\nencoder alone (%s, %dx%d, batch %d, %d calls, bf16 input uploaded and moments read back each "
                    "call): %.1f images/s, %.1f ms per call\n",
                    what, shape.width, shape.height, shape.batch, encode_iters,
                    double(shape.batch) * encode_iters / s, 1000.0 * s / encode_iters);
    }
    if (profile) {
        vae->set_profiling(true);
        for (int i = 0; i < 3; i++) vae->moments(x.data(), gl::DType::bf16, shape);
        vae->set_profiling(false);
        std::printf("\nencoder profile (%dx%d, batch %d, 3 runs):\n%s", shape.width, shape.height, shape.batch,
                    vae->profile_report(shape, 30).c_str());
    }
    return 0;
}

int main(int argc, char** argv) {
    return gl::cli::run_main("bench_data", [&] { return run(argc, argv); });
}
