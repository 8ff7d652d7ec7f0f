// Bucketing (data/bucket.h) against kohya's own BucketManager / make_bucket_resolutions run on 230
// image sizes under five settings (tests/golden/data/dataset/buckets/, make_data_buckets.py), the
// bucket table, skipped extremes, and the epoch order (batches from one bucket, every repeat once
// per epoch, determinism under a seed).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "data/bucket.h"
#include "test_util.h"

namespace {

std::string buckets_file() {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/dataset/buckets/buckets.txt";
}

data::Dataset synthetic(const std::vector<std::pair<int, int>>& sizes, int repeats = 1) {
    data::Dataset ds;
    ds.config.enable_bucket = true;
    for (size_t i = 0; i < sizes.size(); i++) {
        data::ImageEntry e;
        e.path = "img" + std::to_string(i) + ".png";
        e.width = sizes[i].first;
        e.height = sizes[i].second;
        e.num_repeats = repeats;
        ds.images.push_back(e);
    }
    return ds;
}

}  // namespace

TEST_CASE("data bucket: the same resolutions and bucket per image as kohya's code") {
    std::ifstream f(buckets_file());
    REQUIRE(f);
    std::string line;
    std::optional<data::BucketSelector> sel;
    std::string setting;
    int settings = 0, images = 0, errors = 0;
    while (std::getline(f, line)) {
        std::istringstream is(line);
        std::string head;
        is >> head;
        if (head == "setting") {
            int noup, w, h, lo, hi, steps;
            is >> setting >> noup >> w >> h >> lo >> hi >> steps;
            sel.emplace(noup != 0, data::Reso{w, h}, lo, hi, steps);
            settings++;
        } else if (head == "resos") {
            std::string want, r;
            while (is >> r) want += r + " ";
            std::string got;
            for (const data::Reso& x : sel->predefined()) got += std::to_string(x.w) + "x" + std::to_string(x.h) + " ";
            CAPTURE(setting);
            CHECK(got == want);
        } else {
            const int w = std::stoi(head);
            int h;
            std::string rest;
            is >> h >> rest;
            CAPTURE(setting);
            CAPTURE(line);
            const data::BucketChoice c = sel->select(w, h);
            if (rest == "error") {  // kohya divides by zero on an empty bucket
                CHECK((c.bucket.w == 0 || c.bucket.h == 0));
                errors++;
                continue;
            }
            int bh, rw, rh;
            is >> bh >> rw >> rh;
            CHECK(c.bucket.w == std::stoi(rest));
            CHECK(c.bucket.h == bh);
            CHECK(c.resized.w == rw);
            CHECK(c.resized.h == rh);
            images++;
        }
    }
    CHECK(settings == 5);
    CHECK(images + errors == 5 * 230);
}

TEST_CASE("data bucket: assignment, the printed table, skipped extremes") {
    data::Dataset ds = synthetic({{512, 512}, {1024, 1024}, {768, 512}, {1920, 1080}, {10000, 10}, {600, 400}}, 3);
    const data::BucketAssignment a = data::assign_buckets(ds);
    REQUIRE(a.skipped.size() == 1);
    CHECK(a.skipped[0].reason ==
          "aspect ratio too far from every bucket: 10000x10 would be resized to 256000x256 for bucket 1024x256");
    REQUIRE(a.buckets.size() == 2);
    CHECK(a.buckets[0].reso == data::Reso{512, 512});
    CHECK(a.buckets[0].distinct == 2);
    CHECK(a.buckets[0].images.size() == 6);
    CHECK(a.buckets[1].reso == data::Reso{640, 384});
    CHECK(a.buckets[1].distinct == 3);  // 768x512, 1920x1080 and 600x400: the nearest ratio
    const std::string table = data::bucket_table(a);
    MESSAGE(table);
    CHECK(table.find("     0   512 x 512        2             6\n") != std::string::npos);
    CHECK(table.find(" total                    5            15") != std::string::npos);

    ds.config.min_bucket_reso = 600;  // above the resolution's side
    CHECK(gltest::error_of([&] { data::assign_buckets(ds); }).find("min_bucket_reso (576) must not exceed") == 0);
    data::Dataset small = synthetic({{1, 1}, {300, 200}});
    small.config.bucket_no_upscale = true;
    const data::BucketAssignment n = data::assign_buckets(small);
    REQUIRE(n.skipped.size() == 1);
    CHECK(n.skipped[0].reason == "1x1 is too small for bucket_reso_steps 64 (bucket 0x0)");
    REQUIRE(n.buckets.size() == 1);
    CHECK(n.buckets[0].reso == data::Reso{256, 192});  // never enlarged, cropped to steps
}

TEST_CASE("data bucket: epoch order: one bucket per batch, every repeat once, seeded") {
    std::vector<std::pair<int, int>> sizes;
    for (int i = 0; i < 23; i++) sizes.push_back({512 + 64 * (i % 4), 512});
    const data::Dataset ds = synthetic(sizes, 2);
    const data::BucketAssignment a = data::assign_buckets(ds);
    auto run = [&](uint64_t seed) {
        data::EpochPlanner p(a, 4, seed);
        std::vector<std::vector<data::BatchRef>> epochs;
        for (int e = 1; e <= 3; e++) epochs.push_back(p.epoch(e));
        return epochs;
    };
    const auto e1 = run(42), e2 = run(42), e3 = run(43);
    for (size_t e = 0; e < e1.size(); e++) {
        std::map<int, int> seen;
        for (const data::BatchRef& b : e1[e]) {
            CHECK(b.images.size() >= 1);
            CHECK(b.images.size() <= 4);
            for (int i : b.images) {
                CHECK(a.choice[size_t(i)].bucket == a.buckets[size_t(b.bucket)].reso);
                seen[i]++;
            }
        }
        CHECK(seen.size() == 23);
        for (const auto& [i, n] : seen) CHECK(n == 2);
        REQUIRE(e1[e].size() == e2[e].size());
        for (size_t k = 0; k < e1[e].size(); k++) CHECK(e1[e][k].images == e2[e][k].images);
    }
    bool differs = false, changes = false;
    for (size_t k = 0; k < e1[0].size(); k++) {
        differs |= e1[0][k].images != e3[0][k].images;
        changes |= e1[0][k].images != e1[1][k].images;
    }
    CHECK(differs);  // another seed, another order
    CHECK(changes);  // and every epoch reshuffles
    data::EpochPlanner p(a, 4, 1);
    p.epoch(2);
    CHECK(gltest::error_of([&] { p.epoch(2); }).find("epochs are planned in increasing order") == 0);
}
