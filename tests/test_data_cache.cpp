// The latent cache (data/latent_cache.h) with a stand-in encoder (fake_encoders.h), no model:
// each entry is the encoder's latent of the prepared image with its own unit noise (from the seed
// and the entry's key), hits on a second run (RAM and disk), invalidation when an image changes,
// flips, batching per encoder call with every shape prepared first, interruption and resume,
// partial files from an interrupted write treated as missing and a killed writer's temporaries
// removed; the same entries for any thread count and batch size, an image that fails to decode
// mid-run, and images staged in bf16 on the host. The SD1.5 VAE under it: test_pipelines_cache.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <set>

#include "fake_encoders.h"
#include "latent_cache_fixtures.h"

namespace fs = std::filesystem;
using cachetest::BucketsFixture;
using cachetest::Cached;
using cachetest::cache_all;
using cachetest::dead_pid;
using cachetest::FakeImageEncoder;
using cachetest::Fixture;
using cachetest::golden;
using cachetest::temp_name;

TEST_CASE("data latents: each entry is the encoder's latent of the prepared image with its own unit noise") {
    Fixture f;
    FakeImageEncoder enc("fake");
    data::LatentCache cache;
    data::CacheOptions opt;
    opt.vae_batch_size = 2;
    const data::CacheReport r = data::cache_latents(f.ds, f.buckets, cache, enc, opt);
    CHECK(r.total == 3);
    CHECK(r.encoded == 3);
    CHECK(r.vae_calls == 2);  // 2 + 1 images
    REQUIRE(enc.prepared.size() == 1);  // both shapes, before the first call
    CHECK(enc.prepared[0] == std::vector<data::EncoderShape>{{1, 8, 16}, {2, 8, 16}});
    CHECK(enc.calls == std::vector<data::EncoderShape>{{2, 8, 16}, {1, 8, 16}});
    const data::PreparedImage p = data::prepare_image(f.ds.images[1], f.buckets.choice[1], false, false);
    std::vector<float> x(p.rgb.size());
    data::to_unit_range(p.rgb, x.data());
    const std::vector<float> mean = FakeImageEncoder::block_means(x, 1, 8, 16);
    const data::Latent l = *cache.get(r.keys[2]);
    CHECK(l.height == 4);
    CHECK(l.width == 8);
    CHECK(l.channels == 4);
    REQUIRE(l.data.size() == mean.size());
    // latent = mean + noise / 2: recover the noise and check it is N(0, 1)-like.
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < l.data.size(); i++) {
        const double noise = (double(l.data[i]) - mean[i]) * 2;
        s1 += noise;
        s2 += noise * noise;
    }
    const double n = double(l.data.size());
    CHECK(std::fabs(s1 / n) < 0.35);
    CHECK(std::fabs(s2 / n - 1) < 0.5);
    // Each entry's noise is its own and comes from (seed, key): the same again, another under another seed.
    CHECK(cache.get(r.keys[0])->data != cache.get(r.keys[2])->data);
    data::LatentCache again, reseeded;
    data::cache_latents(f.ds, f.buckets, again, enc, opt);
    CHECK(again.get(r.keys[2])->data == l.data);
    opt.seed = 1;
    data::cache_latents(f.ds, f.buckets, reseeded, enc, opt);
    CHECK(reseeded.get(r.keys[2])->data != l.data);
}

TEST_CASE("data latents: disk hits, invalidation on change, flips, interrupted runs resume") {
    Fixture f(true);
    FakeImageEncoder enc("fake");
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
    FakeImageEncoder other("another fake");
    CHECK(data::cache_latents(f.ds, f.buckets, fresh, other, opt).encoded == 6);
}

TEST_CASE("data latents: random_crop cannot be cached") {
    Fixture f;
    f.ds.config.subsets[0].random_crop = true;
    FakeImageEncoder enc("fake");
    data::LatentCache cache;
    CHECK(gltest::error_of([&] { data::cache_latents(f.ds, f.buckets, cache, enc); })
              .find("random_crop / color_aug change the image every step") != std::string::npos);
}

TEST_CASE("data latents: the same entries for any thread count and batch size, a failed image's place refilled") {
    BucketsFixture f;
    REQUIRE(f.a.buckets.size() == 3);
    FakeImageEncoder enc("fake");
    const Cached one = cache_all(f, enc, 1, 3);
    const Cached many = cache_all(f, enc, 4, 3);
    const Cached single = cache_all(f, enc, 3, 1);
    // Every run gave the encoder all its shapes before its first call, and called with no others.
    REQUIRE(enc.prepared.size() == 3);
    std::set<data::EncoderShape> prepared(enc.prepared[0].begin(), enc.prepared[0].end());
    CHECK(prepared.size() >= 3);  // one per bucket, and a smaller last batch
    for (size_t c = 0; c < one.report.vae_calls; c++) CHECK(prepared.count(enc.calls[c]) == 1);
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
    CHECK(one.report.times.prepare_busy > 0);
    CHECK(one.report.times.total >= one.report.times.encode);
}

namespace {

// The fake encoder taking f32 input, which it rounds to bf16 itself before encoding.
class RoundsToBf16 : public FakeImageEncoder {
public:
    RoundsToBf16() : FakeImageEncoder("fake") {}
    std::vector<float> encode(const void* x, gl::DType t, const data::EncoderShape& s,
                              std::span<const float> noise) override {
        CHECK(t == gl::DType::f32);
        std::vector<float> v(size_t(s.batch) * size_t(s.height) * size_t(s.width) * 3);
        for (size_t i = 0; i < v.size(); i++) v[i] = gl::bf16_to_f32(gl::f32_to_bf16(static_cast<const float*>(x)[i]));
        return FakeImageEncoder::encode(v.data(), t, s, noise);
    }
};

}  // namespace

TEST_CASE("data latents: images staged in bf16 on the host are the bf16 of their f32 values") {
    BucketsFixture f;
    FakeImageEncoder staged_enc("fake", gl::DType::bf16);
    RoundsToBf16 rounded_enc;
    const Cached staged = cache_all(f, staged_enc, 2, 4);
    const Cached rounded = cache_all(f, rounded_enc, 2, 4);
    CHECK(staged.entries.size() == 14);
    CHECK(staged.entries == rounded.entries);
    FakeImageEncoder f32_enc("fake");
    CHECK(cache_all(f, f32_enc, 2, 4).entries != staged.entries);  // bf16 is not f32
}
