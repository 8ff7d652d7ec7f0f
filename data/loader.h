// The loader: worker threads prepare the next batches (latents from the cache, or images decoded,
// resized and cropped; captions drawn; flips drawn) while the trainer runs the current one. A
// bounded window of batches is in flight; next() hands them out in order. Every random choice
// comes from a stream derived from (seed, epoch, batch, position), so the batches are the same
// whatever the thread count and timing.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "data/bucket.h"
#include "data/dataset.h"
#include "data/latent_cache.h"
#include "data/workers.h"

namespace data {

struct Sample {
    int image = 0;
    bool flipped = false;
    std::string caption;        // this step's draw
    float loss_weight = 1.0f;   // prior_loss_weight for regularisation images
    std::vector<float> latent;  // [h][w][c] from the cache, when latents are cached
    std::vector<float> pixels;  // [H][W][3] in [-1, 1], when they are not
    std::vector<float> mask;    // [H][W] in [0, 1], when the subset keeps alpha as a mask
};

struct Batch {
    int epoch = 0;  // 1-based
    int step = 0;   // index of the batch in the whole run, from 0
    Reso bucket;
    std::vector<Sample> samples;
    // Data parallelism: the global batch's planned images, and this rank's slice of them
    // [first, first + planned) (dist::shard_of); samples holds the slice's images that loaded.
    // One rank: the whole batch (first 0, planned = global_images).
    int64_t global_images = 0, first = 0, planned = 0;
};

struct LoaderOptions {
    uint64_t seed = 0;
    int epochs = 1;
    int threads = 2;
    int queue_depth = 4;  // batches prepared ahead (at least one per thread)
    double prior_loss_weight = 1.0;
    // Cached latents (from cache_latents; keys per image * 2 + flip). Null: images are prepared.
    LatentCache* latents = nullptr;
    const CacheReport* latent_keys = nullptr;
    // Resume: the first batch to make and hand out (its index in the whole run). Every batch is a
    // function of (seed, its index), so the ones after it are those of an uninterrupted run.
    size_t first_batch = 0;
    // Data parallelism: this rank of `world`. The batches are the global ones (world x the batch
    // size, the order one process has at that size) and each rank makes only its slice; every
    // random choice is drawn by the image's position in the global batch, so an image is the
    // same (flip, crop, caption) whatever the world size. A slice may be empty (a short global
    // batch, or images that failed): with world > 1 next() hands it out anyway, so every rank
    // takes part in every step.
    int rank = 0, world = 1;
    // For token warm-up: the run's optimizer steps and the batches each takes (an epoch's last
    // update may take fewer), so that a batch's caption is drawn for kohya's global_step of it.
    int64_t max_train_steps = 0;
    int batches_per_update = 1;
};

class Loader {
public:
    Loader(const Dataset& ds, const BucketAssignment& a, LoaderOptions opt);
    ~Loader();
    Loader(const Loader&) = delete;
    Loader& operator=(const Loader&) = delete;

    // The next batch in order; nullopt after the last one. Rethrows a worker's error.
    std::optional<Batch> next();
    size_t batches() const { return plan_.size(); }
    // Seconds next() spent waiting for a batch that was not ready yet.
    double wait_seconds() const { return batches_->wait_seconds(); }
    // Images that failed to decode while loading (dropped from their batch).
    std::vector<SkippedImage> skipped() const;

private:
    struct Planned {
        int epoch;
        int64_t update;  // the optimizer step the batch is for, from 0
        BatchRef ref;
    };
    Batch make(size_t step) const;

    const Dataset& ds_;
    const BucketAssignment& a_;
    LoaderOptions opt_;
    std::vector<Planned> plan_;
    mutable std::mutex mu_;  // guards skipped_
    mutable std::vector<SkippedImage> skipped_;
    // Declared last: destroyed first, so no task outlives what it uses.
    std::unique_ptr<Workers> pool_;
    std::unique_ptr<Prefetch<Batch>> batches_;
};

}  // namespace data
