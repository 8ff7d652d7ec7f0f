// The loader (data/loader.h): the same batches whatever the thread count and queue depth under
// one seed (images, flips, captions, pixels), other batches under another seed, latents from the
// cache (the flipped entry when flipped), images that fail to decode dropped and reported, and a
// loader destroyed mid-run; the worker pool's ordered prefetch (data/workers.h) it runs on.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include "data/loader.h"
#include "fake_encoders.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::string golden(const std::string& rel) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/" + rel;
}

struct LoaderFixture {
    fs::path root = fs::temp_directory_path() / ("gl_loader_" + std::to_string(getpid()));
    data::Dataset ds;
    data::BucketAssignment a;
    LoaderFixture() {
        const char* files[] = {"rgb.png", "rgb.jpg", "lossless.webp", "orient6.jpg", "grey.png", "rgba.png"};
        fs::create_directories(root / "3_tag");
        int n = 0;
        for (const char* f : files) {
            const fs::path dst = root / "3_tag" / (std::to_string(n++) + fs::path(f).extension().string());
            fs::copy_file(golden(std::string("dataset/images/ok/") + f), dst);
            std::ofstream(fs::path(dst).replace_extension(".txt")) << "tag" << n << ", a, b, c, d";
        }
        fs::copy_file(golden("dataset/images/ok/rgb.png"), root / "3_tag" / "z.png");  // same size as the corrupt file
        data::ConfigLevel cli = {{"resolution", std::array<int64_t, 2>{16, 16}}, {"enable_bucket", true},
                                 {"min_bucket_reso", int64_t(8)}, {"max_bucket_reso", int64_t(32)},
                                 {"bucket_reso_steps", int64_t(8)}, {"flip_aug", true},
                                 {"shuffle_caption", true}, {"keep_tokens", int64_t(1)},
                                 {"caption_extension", std::string(".txt")}, {"batch_size", int64_t(2)}};
        std::vector<std::string> w;
        ds = data::build_dataset(data::folder_dataset_config(root, std::nullopt, cli, w));
        a = data::assign_buckets(ds);
        // Damaged after the dataset read it (which checks every file whole): what decoding finds later.
        fs::copy_file(golden("dataset/images/bad/corrupt_data.png"), root / "3_tag" / "z.png",
                      fs::copy_options::overwrite_existing);
    }
    ~LoaderFixture() { fs::remove_all(root); }
};

std::vector<data::Batch> drain(data::Loader& l) {
    std::vector<data::Batch> out;
    while (std::optional<data::Batch> b = l.next()) out.push_back(std::move(*b));
    return out;
}

}  // namespace

TEST_CASE("data loader: deterministic under a seed whatever the threads and queue depth") {
    LoaderFixture f;
    REQUIRE(f.a.buckets.size() >= 2);  // 24x16, 16x24 and 16x16 images
    auto run = [&](uint64_t seed, int threads, int depth) {
        data::LoaderOptions o;
        o.seed = seed;
        o.epochs = 3;
        o.threads = threads;
        o.queue_depth = depth;
        data::Loader l(f.ds, f.a, o);
        std::vector<data::Batch> b = drain(l);
        const std::vector<data::SkippedImage> sk = l.skipped();
        REQUIRE(sk.size() == 3 * 3);  // the corrupt file, each repeat of each epoch
        CHECK(sk[0].reason.find("corrupt or truncated PNG data") == 0);
        return b;
    };
    const auto one = run(9, 1, 1), many = run(9, 4, 3), other = run(10, 2, 2);
    REQUIRE(one.size() == many.size());
    size_t samples = 0, flips = 0;
    bool differs = false;
    for (size_t i = 0; i < one.size(); i++) {
        CHECK(one[i].epoch == many[i].epoch);
        CHECK(one[i].bucket == many[i].bucket);
        REQUIRE(one[i].samples.size() == many[i].samples.size());
        for (size_t k = 0; k < one[i].samples.size(); k++) {
            const data::Sample &x = one[i].samples[k], &y = many[i].samples[k];
            CHECK(x.image == y.image);
            CHECK(x.flipped == y.flipped);
            CHECK(x.caption == y.caption);
            CHECK(x.pixels == y.pixels);
            CHECK(x.pixels.size() == size_t(one[i].bucket.w) * one[i].bucket.h * 3);
            CHECK(x.caption.rfind("tag", 0) == 0);  // keep_tokens 1
            samples++;
            flips += x.flipped;
        }
        differs |= i < other.size() && (one[i].samples.size() != other[i].samples.size() ||
                                        one[i].samples[0].image != other[i].samples[0].image);
    }
    CHECK(samples == 3 * 6 * 3);  // epochs x images x repeats, the corrupt one dropped
    CHECK(flips > samples / 4);
    CHECK(flips < samples * 3 / 4);
    CHECK(differs);
}

TEST_CASE("data loader: cached latents, the flipped entry when flipped, stops cleanly mid-run") {
    LoaderFixture f;
    f.ds.images.pop_back();  // the corrupt file cannot be cached
    f.a = data::assign_buckets(f.ds);
    cachetest::FakeImageEncoder enc("fake");
    data::LatentCache cache;
    const data::CacheReport rep = data::cache_latents(f.ds, f.a, cache, enc);
    REQUIRE(rep.encoded == 12);
    data::LoaderOptions o;
    o.seed = 1;
    o.latents = &cache;
    o.latent_keys = &rep;
    o.prior_loss_weight = 0.5;
    {
        data::Loader l(f.ds, f.a, o);
        for (const data::Batch& b : drain(l))
            for (const data::Sample& s : b.samples) {
                CHECK(s.pixels.empty());
                CHECK(s.latent == cache.get(rep.keys[size_t(s.image) * 2 + s.flipped])->data);
                CHECK(s.loss_weight == 1.0f);
            }
    }
    o.epochs = 50;
    data::Loader stopped(f.ds, f.a, o);
    CHECK(stopped.next().has_value());
}

TEST_CASE("data workers: results in order whatever the timing, a bounded window, errors in order") {
    data::Workers pool(4);
    std::atomic<int> running{0}, most{0};
    auto make = [&](size_t i) {
        const int now = ++running;
        for (int m = most; now > m && !most.compare_exchange_weak(m, now);) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 5 * 300));
        --running;
        if (i == 37) throw std::runtime_error("item 37");
        return i * i;
    };
    {
        data::Prefetch<size_t> p(pool, 37, 3, make);
        for (size_t i = 0; i < 37; i++) CHECK(*p.next() == i * i);
        CHECK_FALSE(p.next().has_value());
        CHECK(most <= 3);
    }
    data::Prefetch<size_t> failing(pool, 50, 8, make);
    for (size_t i = 0; i < 37; i++) CHECK(*failing.next() == i * i);
    CHECK_THROWS_WITH(failing.next(), "item 37");
    CHECK_THROWS_WITH(failing.next(), "item 37");  // and again: the stream is broken
    // Destroyed with work queued and under way: nothing runs on freed state (ASan would say).
    data::Prefetch<size_t> abandoned(pool, 1000, 16, make);
    CHECK(*abandoned.next() == 0);
}

TEST_CASE("data loader: token warm-up draws each batch's caption for its optimizer step (kohya's global_step)") {
    const fs::path root = fs::temp_directory_path() / ("gl_loader_warmup_" + std::to_string(getpid()));
    fs::create_directories(root / "4_x");
    fs::copy_file(golden("dataset/images/ok/rgb.png"), root / "4_x" / "a.png");
    std::ofstream(root / "4_x" / "a.txt") << "t1, t2, t3, t4, t5";
    data::ConfigLevel cli = {{"resolution", std::array<int64_t, 2>{16, 16}}, {"caption_extension", std::string(".txt")},
                             {"token_warmup_step", int64_t(4)}, {"batch_size", int64_t(1)}};
    std::vector<std::string> w;
    const data::Dataset ds = data::build_dataset(data::folder_dataset_config(root, std::nullopt, cli, w));
    const data::BucketAssignment a = data::assign_buckets(ds);
    data::LoaderOptions o;
    o.epochs = 2;
    o.threads = 2;
    o.max_train_steps = 6;
    o.batches_per_update = 3;  // 4 batches an epoch: updates of 3 and 1 batches
    data::Loader l(ds, a, o);
    std::vector<size_t> tags;
    for (const data::Batch& b : drain(l)) {
        REQUIRE(b.samples.size() == 1);
        const std::string& c = b.samples[0].caption;
        tags.push_back(size_t(std::count(c.begin(), c.end(), ',')) + 1);
    }
    // Updates 0 0 0 1 | 2 2 2 3: floor(step * (5 - 1) / 4) + 1 tags, all 5 from step 4 on.
    CHECK(tags == std::vector<size_t>{1, 1, 1, 2, 3, 3, 3, 4});
    fs::remove_all(root);
}
