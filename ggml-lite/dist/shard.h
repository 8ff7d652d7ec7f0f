// The arithmetic of sharding a run's batches over ranks, as kohya's train_network.py does it
// through accelerate:
// - every rank takes a contiguous slice of each global batch (per-device batch x world size,
//   computed with the data order exactly as one process computes it): rank r takes images
//   [r * B, (r + 1) * B); a short global batch of k images is split as evenly as possible (the
//   first k % world ranks one more), and each rank's gradient is weighted by its share, count / k,
//   so the reduced gradient is the k-image mean (a rank with no image joins with weight 0);
// - the effective batch is per-device batch x ranks x accumulation (kohya's total_batch_size,
//   ss_total_batch_size); an epoch of N per-device batches is ceil(N / ranks / accumulation)
//   updates (kohya's steps per epoch).
#pragma once
#include <algorithm>
#include <cstdint>

#include "ggml-lite/core/error.h"

namespace gl::dist {

struct Shard {
    int64_t begin = 0, count = 0;  // within the global batch
    float share = 0.0f;            // count / the global batch's images
};

inline Shard shard_of(int64_t global_images, int world, int rank) {
    GL_CHECK(world >= 1 && rank >= 0 && rank < world, "shard: rank ", rank, " outside a world of ", world);
    GL_CHECK(global_images >= 1, "shard: a global batch of ", global_images, " images");
    const int64_t base = global_images / world, extra = global_images % world;
    Shard s;
    s.count = base + (rank < extra ? 1 : 0);
    s.begin = rank * base + std::min<int64_t>(rank, extra);
    s.share = float(double(s.count) / double(global_images));
    return s;
}

inline int64_t effective_batch(int64_t per_device, int world, int accum) { return per_device * world * accum; }

inline int64_t updates_per_epoch(int64_t per_device_batches, int world, int accum) {
    GL_CHECK(world >= 1 && accum >= 1, "updates_per_epoch: world ", world, ", accumulation ", accum);
    const int64_t d = int64_t(world) * accum;
    return (per_device_batches + d - 1) / d;
}

}  // namespace gl::dist
