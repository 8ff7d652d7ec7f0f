// The latent cache (data/latent_cache.h) with the tiny VAE golden weights on the CPU runtime:
// entries equal the VAE's sample of the prepared image, hits on a second run (RAM and disk),
// invalidation when an image changes, flips, batching per VAE call, interruption and resume,
// partial files from an interrupted write treated as missing and a killed writer's temporaries
// removed; the same entries for any thread count and batch size, one weight load for every bucket
// shape, an image that fails to decode mid-run, and images staged in bf16 on the host.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <map>
#include <sys/wait.h>

#include "data/latent_cache.h"
#include "data/png_file.h"
#include "ggml-lite/io/files.h"
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

// A temporary file name of an atomic write to path by process pid (gl::io::temp_file_pattern).
std::string temp_name(const std::string& path, long pid) {
    std::string p = gl::io::temp_file_pattern(path, pid);
    return p.replace(p.size() - 6, 6, "q1w2e3");
}

long dead_pid() {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    ::waitpid(p, nullptr, 0);
    return long(p);
}

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
    CHECK(r.vae_calls == 2);         // 2 + 1 images
    CHECK(enc.graphs_built() == 2);  // batches of 2 and 1
    CHECK(enc.weight_loads() == 1);  // both planned first, on one copy of the weights
    const data::ImageEntry& e = f.ds.images[1];
    const data::PreparedImage p = data::prepare_image(e, f.buckets.choice[1], false, false);
    CHECK(p.width == 16);
    CHECK(p.height == 8);
    std::vector<float> x(p.rgb.size());
    data::to_unit_range(p.rgb, x.data());
    const std::vector<float> m = enc.moments(x, 1, 8, 16);
    CHECK(enc.weight_loads() == 1);  // a planned shape: nothing reloaded
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
    // Complete entries only. A write cut short by a kill (its temporary file) is removed by the
    // next run; a running writer's temporary stays; a truncated entry is ignored and redone.
    size_t files = 0;
    fs::path one;
    for (const auto& d : fs::directory_iterator(dir)) files++, one = d.path();
    CHECK(files == 2);
    const std::string killed = temp_name(one.string(), dead_pid()), running = temp_name(one.string(), getpid());
    std::ofstream(killed) << "partial";
    std::ofstream(running) << "partial";
    fs::resize_file(one, 40);
    stop = false;
    opt.progress = nullptr;
    data::LatentCache cache(dir);
    CHECK(cache.stale_removed() == std::vector<std::string>{killed});
    CHECK_FALSE(fs::exists(killed));
    CHECK(fs::exists(running));
    fs::remove(running);
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

namespace {

// Seven images in three buckets (wide, tall, square), mirrored, and a file whose header reads but
// whose pixels do not decode.
struct BucketsFixture {
    fs::path root = fs::temp_directory_path() / ("gl_latent_buckets_" + std::to_string(getpid()));
    gl::io::SafetensorsFile weights{golden("vae/weights_diffusers.safetensors")};
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

Cached cache_all(const BucketsFixture& f, data::LatentEncoder& enc, int threads, int batch) {
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

// The same encoder, taking its input in f32 (the runtime converts it on write).
class F32Input : public data::LatentEncoder {
public:
    explicit F32Input(data::LatentEncoder& e) : e_(e) {}
    std::string identity() const override { return e_.identity(); }
    const sd::VaeConfig& config() const override { return e_.config(); }
    std::vector<float> moments(const void* x, gl::DType t, const data::EncoderShape& s) override {
        CHECK(t == gl::DType::f32);
        return e_.moments(x, t, s);
    }
    void release() override { e_.release(); }

private:
    data::LatentEncoder& e_;
};

}  // namespace

TEST_CASE("data latents: the same entries for any thread count and batch size, one weight load for all buckets") {
    BucketsFixture f;
    REQUIRE(f.a.buckets.size() == 3);
    data::VaeGraphEncoder enc(sd::VaeConfig::tiny(), f.weights, "tiny-vae");
    const Cached one = cache_all(f, enc, 1, 3);
    CHECK(enc.weight_loads() == 1);
    const int shapes = enc.graphs_built();
    CHECK(shapes >= 3);  // one per bucket, and a smaller last batch
    const Cached many = cache_all(f, enc, 4, 3);
    const Cached single = cache_all(f, enc, 3, 1);
    CHECK(enc.graphs_built() > shapes);  // batches of 1 are new shapes, but they fit the memory:
    CHECK(enc.weight_loads() == 1);      // nothing laid out or loaded again
    for (const Cached* c : {&one, &many, &single}) {
        CHECK(c->report.total == 16);  // 8 images x (plain, flipped)
        CHECK(c->report.encoded == 14);  // the corrupt file's two entries failed
        REQUIRE(c->report.skipped.size() == 1);  // the corrupt file: its place went to another image
        CHECK(c->report.skipped[0].path.find("3b.png") != std::string::npos);
        CHECK(c->report.skipped[0].reason.find("corrupt or truncated PNG data") == 0);
        CHECK(c->report.keys == one.report.keys);
        CHECK(c->entries == one.entries);  // bit for bit
    }
    CHECK(one.entries.size() == 14);
    CHECK(single.report.vae_calls == 14);  // the corrupt file's places were not called alone
    const int corrupt = int(std::find_if(f.ds.images.begin(), f.ds.images.end(), [](const data::ImageEntry& e) {
                                return e.path.filename() == "3b.png";
                            }) - f.ds.images.begin());
    CHECK(one.report.keys[size_t(corrupt) * 2].empty());
    CHECK(one.report.keys[size_t(corrupt) * 2 + 1].empty());
    // Planned the other way round, the batches of 3 do not fit the memory of batches of 1: it is
    // laid out again for both and the weights reloaded, once.
    data::VaeGraphEncoder grows(sd::VaeConfig::tiny(), f.weights, "tiny-vae");
    CHECK(cache_all(f, grows, 2, 1).entries == one.entries);
    CHECK(cache_all(f, grows, 2, 3).entries == one.entries);
    CHECK(grows.weight_loads() == 2);
    CHECK(one.report.times.prepare_busy > 0);
    CHECK(one.report.times.total >= one.report.times.encode);
    enc.release();
    CHECK(enc.memory_report().empty());
}

TEST_CASE("data latents: images staged in bf16 on the host give the entries of f32 input converted by the runtime") {
    BucketsFixture f;
    data::VaeGraphEncoder enc(sd::VaeConfig::tiny(), f.weights, "tiny-vae", gl::DType::bf16);
    CHECK(enc.input_dtype() == gl::DType::bf16);
    const Cached staged = cache_all(f, enc, 2, 4);
    F32Input f32(enc);
    const Cached converted = cache_all(f, f32, 2, 4);
    CHECK(staged.entries.size() == 14);
    CHECK(staged.entries == converted.entries);
}
