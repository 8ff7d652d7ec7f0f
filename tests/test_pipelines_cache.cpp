// The SD1.5 VAE encoder (pipelines/cache_encoders.h) under the latent cache, with the tiny VAE
// golden weights on the CPU runtime: entries equal the VAE's sample of the prepared image, one
// weight load for every bucket shape (and the same entries for any thread count and batch size),
// images staged in bf16 on the host. The cache's own logic is test_data_cache.cpp's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "ggml-lite/io/safetensors.h"
#include "latent_cache_fixtures.h"
#include "pipelines/cache_encoders.h"

using cachetest::BucketsFixture;
using cachetest::Cached;
using cachetest::cache_all;
using cachetest::Fixture;

namespace {

std::string vae_weights() { return cachetest::golden("vae/weights_diffusers.safetensors"); }

}  // namespace

TEST_CASE("pipelines latents: each entry is one scaled sample of the VAE's distribution for the prepared image") {
    Fixture f;
    gl::io::SafetensorsFile weights(vae_weights());
    sd::VaeGraphEncoder enc(sd::VaeConfig::tiny(), weights, "tiny-vae");
    const data::LatentSpec spec = enc.latent_spec();
    CHECK(spec.channels == 4);
    CHECK(spec.downscale == 2);
    CHECK(spec.scale == sd::VaeConfig::tiny().scaling_factor);
    CHECK(spec.shift == 0.0f);
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

namespace {

// The same encoder, taking its input in f32 (the runtime converts it on write).
class F32Input : public data::ImageEncoder {
public:
    explicit F32Input(data::ImageEncoder& e) : e_(e) {}
    std::string identity() const override { return e_.identity(); }
    data::LatentSpec latent_spec() const override { return e_.latent_spec(); }
    std::vector<float> encode(const void* x, gl::DType t, const data::EncoderShape& s,
                              std::span<const float> noise) override {
        CHECK(t == gl::DType::f32);
        return e_.encode(x, t, s, noise);
    }
    void release() override { e_.release(); }

private:
    data::ImageEncoder& e_;
};

}  // namespace

TEST_CASE("pipelines latents: the same entries for any thread count and batch size, one weight load for all buckets") {
    BucketsFixture f;
    REQUIRE(f.a.buckets.size() == 3);
    gl::io::SafetensorsFile weights(vae_weights());
    sd::VaeGraphEncoder enc(sd::VaeConfig::tiny(), weights, "tiny-vae");
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
    sd::VaeGraphEncoder grows(sd::VaeConfig::tiny(), weights, "tiny-vae");
    CHECK(cache_all(f, grows, 2, 1).entries == one.entries);
    CHECK(cache_all(f, grows, 2, 3).entries == one.entries);
    CHECK(grows.weight_loads() == 2);
    CHECK(one.report.times.prepare_busy > 0);
    CHECK(one.report.times.total >= one.report.times.encode);
    enc.release();
    CHECK(enc.memory_report().empty());
}

TEST_CASE("pipelines latents: images staged in bf16 on the host give the entries of f32 input converted by the runtime") {
    BucketsFixture f;
    gl::io::SafetensorsFile weights(vae_weights());
    sd::VaeGraphEncoder enc(sd::VaeConfig::tiny(), weights, "tiny-vae", gl::DType::bf16);
    CHECK(enc.input_dtype() == gl::DType::bf16);
    const Cached staged = cache_all(f, enc, 2, 4);
    F32Input f32(enc);
    const Cached converted = cache_all(f, f32, 2, 4);
    CHECK(staged.entries.size() == 14);
    CHECK(staged.entries == converted.entries);
}
