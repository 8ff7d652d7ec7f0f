// Datasets and helpers shared by the latent cache's tests: data/'s own (test_data_cache.cpp, with a
// stand-in encoder) and the SD1.5 VAE encoder's through it (test_pipelines_cache.cpp).
#pragma once
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/latent_cache.h"
#include "data/png_file.h"
#include "ggml-lite/io/files.h"
#include "test_util.h"

namespace cachetest {

namespace fs = std::filesystem;

inline std::string golden(const std::string& rel) {
    const std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/" + rel;
}

// Three images (PNG, JPEG, WebP) of one subset at 16x8, mirrored when flip.
struct Fixture {
    fs::path root = fs::temp_directory_path() / ("gl_latents_" + std::to_string(getpid()));
    data::Dataset ds;
    data::BucketAssignment buckets;

    explicit Fixture(bool flip = false) {
        fs::create_directories(root / "img" / "2_x");
        const char* files[] = {"ok/rgb.png", "ok/rgb.jpg", "ok/lossless.webp"};
        for (int i = 0; i < 3; i++)
            fs::copy_file(golden(std::string("dataset/images/") + files[i]),
                          root / "img" / "2_x" / (std::to_string(i) + fs::path(files[i]).extension().string()));
        rebuild(flip);
    }
    void rebuild(bool flip) {
        std::vector<std::string> w;
        data::ConfigLevel cli = {{"resolution", std::array<int64_t, 2>{16, 8}}, {"flip_aug", flip}};
        ds = data::build_dataset(data::folder_dataset_config(root / "img", std::nullopt, cli, w));
        buckets = data::assign_buckets(ds);
    }
    ~Fixture() { fs::remove_all(root); }
};

// Seven images in three buckets (wide, tall, square), mirrored, and a file whose header reads but
// whose pixels do not decode.
struct BucketsFixture {
    fs::path root = fs::temp_directory_path() / ("gl_latent_buckets_" + std::to_string(getpid()));
    data::Dataset ds;
    data::BucketAssignment a;
    BucketsFixture() {
        const int sizes[][2] = {{48, 16}, {96, 32}, {48, 16}, {16, 48}, {16, 48}, {16, 16}, {32, 32}};
        fs::create_directories(root / "1_x");
        for (int n = 0; n < 7; n++) {
            data::Bitmap img;
            img.width = sizes[n][0], img.height = sizes[n][1], img.channels = 3;
            for (int i = 0; i < img.width * img.height * 3; i++) img.pixels.push_back(uint8_t((i * 37 + n * 91) % 251));
            data::write_png((root / "1_x" / (std::to_string(n) + ".png")).string(), img);
        }
        fs::copy_file(golden("dataset/images/ok/rgb.png"), root / "1_x" / "3b.png");  // same size as the corrupt file
        data::ConfigLevel cli = {{"resolution", std::array<int64_t, 2>{16, 16}}, {"enable_bucket", true},
                                 {"min_bucket_reso", int64_t(8)}, {"max_bucket_reso", int64_t(32)},
                                 {"bucket_reso_steps", int64_t(8)}, {"flip_aug", true}};
        std::vector<std::string> w;
        ds = data::build_dataset(data::folder_dataset_config(root, std::nullopt, cli, w));
        a = data::assign_buckets(ds);
        // Damaged after the dataset read it (which checks every file whole): what decoding finds later.
        fs::copy_file(golden("dataset/images/bad/corrupt_data.png"), root / "1_x" / "3b.png",
                      fs::copy_options::overwrite_existing);
    }
    ~BucketsFixture() { fs::remove_all(root); }
};

struct Cached {
    data::CacheReport report;
    std::map<std::string, std::vector<float>> entries;
};

inline Cached cache_all(const BucketsFixture& f, data::ImageEncoder& enc, int threads, int batch) {
    data::LatentCache cache;
    data::CacheOptions opt;
    opt.threads = threads;
    opt.vae_batch_size = batch;
    opt.seed = 5;
    Cached c;
    c.report = data::cache_latents(f.ds, f.a, cache, enc, opt);
    for (const std::string& k : c.report.keys)
        if (!k.empty()) c.entries[k] = cache.get(k)->data;
    return c;
}

// A temporary file name of an atomic write to path by process pid (gl::io::temp_file_pattern).
inline std::string temp_name(const std::string& path, long pid) {
    std::string p = gl::io::temp_file_pattern(path, pid);
    return p.replace(p.size() - 6, 6, "q1w2e3");
}

inline long dead_pid() {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    ::waitpid(p, nullptr, 0);
    return long(p);
}

}  // namespace cachetest
