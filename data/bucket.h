// Aspect-ratio bucketing as kohya's sd-scripts does it (library/model_util.py
// make_bucket_resolutions, library/train_util.py BucketManager.select_bucket): the same bucket
// resolutions and, for every image size, the same bucket and resized size (tests compare with a
// table made by running kohya's own code). Then kohya's epoch order: each bucket's image list
// (one entry per repeat) shuffled every epoch, batches cut from one bucket (the last one of a
// bucket may be short), the batch list shuffled, all from a seeded generator.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "data/config.h"
#include "data/dataset.h"
#include "data/rng.h"

namespace data {

struct Reso {
    int w = 0, h = 0;
    bool operator==(const Reso& o) const { return w == o.w && h == o.h; }
    bool operator<(const Reso& o) const { return w != o.w ? w < o.w : h < o.h; }
};

// kohya's make_bucket_resolutions: sorted by (w, h).
std::vector<Reso> make_bucket_resolutions(Reso max_reso, int min_size, int max_size, int divisible);

// numpy's mean of a float64 array as np.mean computes it (kohya's mean_img_ar_error): the sum by
// numpy's pairwise summation (below 8 values one after another; up to 128 in 8 interleaved
// partial sums; above, the halves, cut at a multiple of 8, summed recursively), divided by n.
// 0 for no values (kohya's "avoid NaN").
double numpy_mean(const std::vector<double>& x);

struct BucketChoice {
    Reso bucket;
    Reso resized;  // the image is resized to this (covering the bucket), then cropped to it
    double ar_error = 0;
};

class BucketSelector {
public:
    // bucket_no_upscale: buckets follow the images (never enlarged); else the predefined set.
    BucketSelector(bool no_upscale, Reso max_reso, int min_size, int max_size, int steps);
    // The single fixed bucket used when bucketing is off (kohya's enable_bucket = false).
    static BucketSelector fixed(Reso reso);
    BucketChoice select(int width, int height) const;
    const std::vector<Reso>& predefined() const { return predefined_; }

private:
    BucketSelector() = default;
    int round_to_steps(double x) const;
    bool no_upscale_ = false;
    int64_t max_area_ = 0;
    int steps_ = 64;
    std::vector<Reso> predefined_;
    std::vector<double> ratios_;
};

struct Bucket {
    Reso reso;
    std::vector<int> images;  // indices into Dataset::images, one entry per repeat
    int distinct = 0;         // images without repeats
    // Several datasets (data/dataset_group.h): the bucket's dataset and its batch size; 0 when the
    // run trains one, whose batch size the loader is given.
    int dataset = 0;
    int batch_size = 0;
    // The bucket's batches hold this many images: its dataset's batch size, at most `cap` (the
    // run's micro-batch).
    int64_t batch(int64_t cap) const { return batch_size > 0 ? std::min<int64_t>(batch_size, cap) : cap; }
};

struct BucketAssignment {
    std::vector<Bucket> buckets;         // sorted by resolution; only non-empty ones
    std::vector<BucketChoice> choice;    // per image of the dataset
    std::vector<SkippedImage> skipped;   // images no bucket can take (empty bucket, extreme ratio)
    double mean_ar_error = 0;            // |ar error| over images without repeats, as kohya's np.mean
    std::vector<std::string> warnings;   // kohya's min/max adjustments
};

// Buckets for a dataset from its config (enable_bucket, min/max/steps, no_upscale, resolution).
BucketAssignment assign_buckets(const Dataset& ds);

// The table printed at the start: bucket, resolution, images, images with repeats.
std::string bucket_table(const BucketAssignment& a);

struct BatchRef {
    int bucket = 0;
    std::vector<int> images;  // indices into Dataset::images
};

// The batches of one epoch (1-based). `bucket_lists` carries each bucket's list across epochs,
// shuffled in place every epoch as kohya does; start it as the buckets' image lists. `world`
// ranks of a data-parallel run: each batch is a global one of world x the bucket's batch, which
// the ranks split (dist/shard.h), so the order is one process's at that batch size.
class EpochPlanner {
public:
    EpochPlanner(const BucketAssignment& a, int batch_size, uint64_t seed, int world = 1);
    std::vector<BatchRef> epoch(int epoch);

private:
    std::vector<std::vector<int>> lists_;
    std::vector<std::pair<int, int>> batches_;  // (bucket, batch index)
    std::vector<size_t> batch_sizes_;           // per bucket
    uint64_t seed_;
    int current_ = 0;
};

}  // namespace data
