// The latent cache (data/latent_cache.h) with the tiny VAE golden weights on the CPU runtime:
// entries equal the VAE's sample of the prepared image, hits on a second run (RAM and disk),
// invalidation when an image changes, flips, batching per VAE call, interruption and resume,
// and partial files from an interrupted write treated as missing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "data/latent_cache.h"
#include "ggml-lite/io/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::string golden(const std::string& rel) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/" + rel;
}

struct Fixture {
    fs::path root = fs::temp_directory_path() / ("gl_latents_" + std::to_string(getpid()));
    gl::io::SafetensorsFile weights{golden("vae/weights_diffusers.safetensors")};
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

}  // namespace

TEST_CASE("data latents: each entry is one scaled sample of the VAE's distribution for the prepared image") {
    Fixture f;
    data::VaeGraphEncoder enc(sd::VaeConfig::tiny(), f.weights, "tiny-vae");
    data::LatentCache cache;
    data::CacheOptions opt;
    opt.vae_batch_size = 2;
    const data::CacheReport r = data::cache_latents(f.ds, f.buckets, cache, enc, opt);
    CHECK(r.total == 3);
    CHECK(r.encoded == 3);
    CHECK(r.vae_calls == 2);      // 2 + 1 images
    CHECK(enc.graphs_built() == 1);  // the last batch padded to the bucket's batch size
    const data::ImageEntry& e = f.ds.images[1];
    const data::PreparedImage p = data::prepare_image(e, f.buckets.choice[1], false, false);
    CHECK(p.width == 16);
    CHECK(p.height == 8);
    std::vector<float> x(p.rgb.size());
    data::to_unit_range(p.rgb, x.data());
    const std::vector<float> m = enc.moments(x, 1, 8, 16);
    const data::Latent l = *cache.get(r.keys[2]);
    REQUIRE(l.data.size() * 2 == m.size());
    CHECK(l.height == 4);
    CHECK(l.width == 8);
    // latent = sf * (mean + exp(logvar / 2) * noise): recover the noise and check it is N(0, 1)-like.
    const sd::VaeConfig c = sd::VaeConfig::tiny();
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < l.data.size(); i++) {
        const size_t px = i / 4, ch = i % 4;
        const double mean = m[px * 8 + ch], logvar = std::clamp(double(m[px * 8 + 4 + ch]), -30.0, 20.0);
        const double noise = (l.data[i] / c.scaling_factor - mean) / std::exp(logvar / 2);
        s1 += noise;
        s2 += noise * noise;
    }
    const double n = double(l.data.size());
    CHECK(std::fabs(s1 / n) < 0.35);
    CHECK(std::fabs(s2 / n - 1) < 0.5);
    enc.release();
}

TEST_CASE("data latents: disk hits, invalidation on change, flips, interrupted runs resume") {
    Fixture f(true);
    data::VaeGraphEncoder enc(sd::VaeConfig::tiny(), f.weights, "tiny-vae");
    const fs::path dir = f.root / "cache dir ü";
    std::atomic<bool> stop{false};
    data::CacheOptions opt;
    opt.vae_batch_size = 2;
    opt.stop = &stop;
    int calls = 0;
    opt.progress = [&](size_t, size_t, double) {
        if (++calls == 1) stop = true;  // interrupt after the first VAE call
    };
    {
        data::LatentCache cache(dir);
        const data::CacheReport r = data::cache_latents(f.ds, f.buckets, cache, enc, opt);
        CHECK(r.interrupted);
        CHECK(r.encoded == 2);
    }
    // A write cut short (a temporary file) and a truncated entry are both ignored and redone.
    size_t files = 0;
    fs::path one;
    for (const auto& d : fs::directory_iterator(dir)) files++, one = d.path();
    CHECK(files == 2);
    std::ofstream(one.string() + ".tmp.999") << "partial";
    fs::resize_file(one, 40);
    stop = false;
    opt.progress = nullptr;
    data::LatentCache cache(dir);
    const data::CacheReport r = data::cache_latents(f.ds, f.buckets, cache, enc, opt);
    CHECK_FALSE(r.interrupted);
    CHECK(r.total == 6);  // 3 images x (plain, flipped)
    CHECK(r.hits == 1);
    CHECK(r.encoded == 5);
    CHECK(cache.get(r.keys[0])->data != cache.get(r.keys[1])->data);  // the mirror has its own latent

    data::LatentCache fresh(dir);  // another run: everything from disk, no VAE call
    const data::CacheReport again = data::cache_latents(f.ds, f.buckets, fresh, enc, opt);
    CHECK(again.hits == 6);
    CHECK(again.vae_calls == 0);
    CHECK(fresh.get(r.keys[4])->data == cache.get(r.keys[4])->data);

    // A changed image gets a new key: only its two entries are encoded.
    fs::copy_file(golden("dataset/images/ok/rgb_q70.jpeg"), f.ds.images[1].path, fs::copy_options::overwrite_existing);
    const data::CacheReport changed = data::cache_latents(f.ds, f.buckets, fresh, enc, opt);
    CHECK(changed.encoded == 2);
    CHECK(changed.hits == 4);
    CHECK(changed.keys[2] != r.keys[2]);
    // Another encoder identity (another VAE file) shares nothing.
    data::VaeGraphEncoder other(sd::VaeConfig::tiny(), f.weights, "another-vae");
    CHECK(data::cache_latents(f.ds, f.buckets, fresh, other, opt).encoded == 6);
}

TEST_CASE("data latents: random_crop cannot be cached") {
    Fixture f;
    f.ds.config.subsets[0].random_crop = true;
    data::VaeGraphEncoder enc(sd::VaeConfig::tiny(), f.weights, "tiny-vae");
    data::LatentCache cache;
    CHECK(gltest::error_of([&] { data::cache_latents(f.ds, f.buckets, cache, enc); })
              .find("random_crop / color_aug change the image every step") != std::string::npos);
}
