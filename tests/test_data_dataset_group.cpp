// Several [[datasets]] trained together (data/dataset_group.h, train/run/data_plan.h) as kohya's
// DatasetGroup: each dataset's buckets apart (never shared, even at the same resolution), its batch
// size on its buckets' batches, an epoch holding every dataset's batches, the steps arithmetic and
// the plan per dataset, graph shapes at each dataset's batch size.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "data/dataset_group.h"
#include "data/png_file.h"
#include "test_util.h"
#include "train/run/data_plan.h"

namespace fs = std::filesystem;

namespace {

void png(const fs::path& p, int w, int h) {
    fs::create_directories(p.parent_path());
    data::Bitmap b{w, h, 3, std::vector<uint8_t>(size_t(w) * size_t(h) * 3, 90)};
    data::write_png(p.string(), b);
}

// Two datasets over the same 5 images (and 3 more in the second): 64x64 at batch 2, 96x64 at batch 3.
struct Group {
    gltest::TempDir dir;
    fs::path toml = dir.path / "multires.toml";
    Group() {
        for (int i = 0; i < 5; i++) png(dir.path / "a" / gl::cat("i", i, ".png"), 64, 64);
        for (int i = 0; i < 3; i++) png(dir.path / "b" / gl::cat("j", i, ".png"), 96, 64);
        std::ofstream(toml) << gl::cat("[general]\ncaption_extension = '.txt'\n"
                                       "[[datasets]]\nresolution = 64\nbatch_size = 2\n"
                                       "  [[datasets.subsets]]\n  image_dir = '", (dir.path / "a").string(),
                                       "'\n  num_repeats = 2\n"
                                       "[[datasets]]\nresolution = [96, 64]\nbatch_size = 3\n"
                                       "  [[datasets.subsets]]\n  image_dir = '", (dir.path / "a").string(),
                                       "'\n  [[datasets.subsets]]\n  image_dir = '", (dir.path / "b").string(), "'\n");
    }
    train::RunConfig config() const {
        train::RunConfig c;
        c.dataset_config = toml.string();
        c.max_train_epochs = 3;
        return c;
    }
};

}  // namespace

TEST_CASE("data dataset group: each dataset's buckets apart with its batch size, every batch drawn per epoch") {
    Group g;
    const train::RunData d = train::load_run_data(g.config(), 1);
    REQUIRE(d.parts.size() == 2);
    CHECK(d.dataset.config.subsets.size() == 3);
    CHECK(d.dataset.images.size() == 13);  // 5 + (5 + 3)
    CHECK(d.dataset.num_train_images == 18);  // 5 x 2 + 8
    REQUIRE(d.buckets.buckets.size() == 2);
    const data::Bucket &a = d.buckets.buckets[0], &b = d.buckets.buckets[1];
    CHECK(a.reso == data::Reso{64, 64});
    CHECK(a.batch_size == 2);
    CHECK(a.images.size() == 10);
    CHECK(b.reso == data::Reso{96, 64});
    CHECK(b.batch_size == 3);
    CHECK(b.dataset == 1);
    CHECK(b.images.size() == 8);
    for (int i : b.images) CHECK(d.dataset.images[size_t(i)].subset >= 1);  // the second dataset's images only

    // kohya's len(DatasetGroup): ceil(10 / 2) + ceil(8 / 3) = 5 + 3 batches an epoch.
    const train::StepCounts k = train::count_steps(g.config(), d, d.dataset.config.batch_size, 2);
    CHECK(k.batches_per_epoch == 8);
    CHECK(k.updates_per_epoch == 4);
    CHECK(k.max_train_steps == 12);
    CHECK(k.arithmetic.find("ceil(10/2) + ceil(8/3) = 5 + 3 = 8") != std::string::npos);
    CHECK(d.dataset.config.batch_size == 3);  // the graphs' largest batch

    data::EpochPlanner planner(d.buckets, d.dataset.config.batch_size, 7);
    for (int epoch = 1; epoch <= 3; epoch++) {
        std::map<int, std::vector<size_t>> sizes;  // bucket -> batch sizes
        std::map<int, int> seen;
        for (const data::BatchRef& r : planner.epoch(epoch)) {
            sizes[r.bucket].push_back(r.images.size());
            for (int i : r.images) seen[i]++;
        }
        std::sort(sizes[0].begin(), sizes[0].end());
        std::sort(sizes[1].begin(), sizes[1].end());
        CHECK(sizes[0] == std::vector<size_t>{2, 2, 2, 2, 2});
        CHECK(sizes[1] == std::vector<size_t>{2, 3, 3});
        CHECK(seen.size() == 13);
    }
    // Graph shapes: each bucket at its dataset's batch, the short last batch too; the memory plan
    // sees every one.
    const std::vector<train::GraphShape> shapes = train::graph_shapes(d, d.dataset.config.batch_size, 8, 1);
    const std::vector<train::GraphShape> want = {{8, 8, 2}, {8, 12, 3}, {8, 12, 2}};
    CHECK(shapes == want);
    // The plan names each dataset with its bucket table.
    const std::string plan = train::dataset_summary(d);
    CAPTURE(plan);
    CHECK(plan.find("  dataset #1: resolution 64x64, batch size 2, 10 train images with repeats\n    train a: 5 images "
                    "x 2 repeats = 10\n") != std::string::npos);
    CHECK(plan.find("  dataset #2: resolution 96x64, batch size 3, 8 train images with repeats\n    train a: 5 images "
                    "x 1 repeats = 5\n    train b: 3 images x 1 repeats = 3\n") != std::string::npos);
    CHECK(plan.find("dataset #2 bucket  resolution") != std::string::npos);
}

TEST_CASE("data dataset group: one dataset is returned as it is, and errors name the dataset") {
    Group g;
    data::BucketedDataset one;
    one.dataset.images.resize(2);
    one.buckets.buckets.push_back(data::Bucket{{64, 64}, {0, 1}, 2});
    const data::MergedDatasets m = data::merge_datasets({one});
    REQUIRE(m.buckets.buckets.size() == 1);
    CHECK(m.buckets.buckets[0].batch_size == 0);  // the loader's batch size applies
    CHECK(m.buckets.buckets[0].batch(4) == 4);
    CHECK(gltest::error_of([] { data::merge_datasets({}); }) == "no dataset to train");

    std::ofstream(g.toml, std::ios::app) << "[[datasets]]\nresolution = 64\n  [[datasets.subsets]]\n  image_dir = '"
                                         << (g.dir.path / "missing").string() << "'\n";
    CHECK(gltest::error_of([&] { train::load_run_data(g.config(), 1); })
              .find("multires.toml [[datasets]] #3: the dataset has no usable images") != std::string::npos);
}
