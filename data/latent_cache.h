// Latent caching: every (image, bucket, crop, flip) is encoded by the VAE once, as kohya's
// cache_latents does: the image prepared exactly as for training (decoded, resized like kohya,
// cropped to its bucket, flipped), scaled to [-1, 1], encoded, and ONE sample of the latent
// distribution kept, times the scaling factor. Entries live in RAM and, with a cache directory
// (--cache_latents_to_disk), one file each, named by a SHA-256 of what determines them: the image
// bytes, bucket, resized size, crop, flip and the encoder's identity. A later run reuses them; a
// changed image gets a new key and is re-encoded. Files are written to a temporary name and
// renamed, so an interrupted run leaves complete entries only and resumes without redoing them.
#pragma once
#include <array>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/bucket.h"
#include "data/dataset.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/tensor_source.h"
#include "models/sd15/vae.h"

namespace data {

// One training image ready for the VAE or the loss: RGB [h][w][3] at its bucket size, and its
// alpha mask [h][w] when the subset keeps one.
struct PreparedImage {
    int width = 0, height = 0;
    std::vector<uint8_t> rgb;
    std::vector<uint8_t> alpha;
};
// kohya's trim_and_resize_if_required: resize to choice.resized, crop to the bucket (centred, or
// at crop_x / crop_y when given), then flip. Throws ImageError for a file that fails to decode.
PreparedImage prepare_image(const ImageEntry& e, const BucketChoice& choice, bool flip, bool keep_alpha,
                            std::optional<std::array<int, 2>> crop = std::nullopt);
// [h][w][3] bytes -> floats in [-1, 1] as torchvision's ToTensor + Normalize(0.5, 0.5) compute them.
void to_unit_range(const std::vector<uint8_t>& rgb, float* out);

// Encodes x [B, H, W, 3] (NHWC, [-1, 1]) into the VAE's moments [B, H/f, W/f, 2 * latent].
class LatentEncoder {
public:
    virtual ~LatentEncoder() = default;
    virtual std::string identity() const = 0;  // part of every cache key
    virtual const sd::VaeConfig& config() const = 0;
    virtual std::vector<float> moments(const std::vector<float>& x, int batch, int height, int width) = 0;
    // Gives the encoder's memory back (before training starts).
    virtual void release() = 0;
};

// The VAE encoder graph on a ggml-lite backend: one graph and plan per input shape, built when a
// shape first comes and dropped when the next shape comes (caching goes bucket by bucket, so
// each is built once and only one copy of the weights is resident at a time).
class VaeGraphEncoder : public LatentEncoder {
public:
    VaeGraphEncoder(sd::VaeConfig config, const gl::io::TensorSource& weights, std::string identity,
                    gl::DType dtype = gl::DType::f32, gl::Backend backend = gl::Backend::cpu);
    ~VaeGraphEncoder() override;
    std::string identity() const override { return identity_; }
    const sd::VaeConfig& config() const override { return config_; }
    std::vector<float> moments(const std::vector<float>& x, int batch, int height, int width) override;
    void release() override;
    int graphs_built() const { return graphs_built_; }

private:
    struct Shape;
    sd::VaeConfig config_;
    const gl::io::TensorSource& weights_;
    std::string identity_;
    gl::DType dtype_;
    gl::Backend backend_;
    std::unique_ptr<Shape> current_;
    int graphs_built_ = 0;
};

struct Latent {
    int height = 0, width = 0, channels = 0;
    std::vector<float> data;  // [h][w][c], already times the scaling factor
};

std::string latent_key(const std::string& image_sha256, const BucketChoice& choice, std::array<int, 2> crop,
                       bool flip, const std::string& encoder_identity);

class LatentCache {
public:
    explicit LatentCache(std::optional<std::filesystem::path> disk_dir = std::nullopt);
    // RAM first, then the disk (a file of the wrong size or header is treated as missing).
    std::optional<Latent> get(const std::string& key);
    void put(const std::string& key, Latent latent);
    std::optional<std::filesystem::path> file_of(const std::string& key) const;
    size_t ram_entries() const;

private:
    std::optional<std::filesystem::path> dir_;
    mutable std::mutex mu_;
    std::map<std::string, Latent> ram_;
};

struct CacheOptions {
    int vae_batch_size = 4;
    uint64_t seed = 0;  // the sampling noise of each entry derives from (seed, key)
    const std::atomic<bool>* stop = nullptr;  // checked between VAE calls
    // Called after each VAE call: entries done (hits included), total, images per second.
    std::function<void(size_t done, size_t total, double rate)> progress;
};

struct CacheReport {
    size_t total = 0, hits = 0, encoded = 0, vae_calls = 0;
    bool interrupted = false;
    std::vector<SkippedImage> skipped;  // images that failed to decode now
    std::vector<std::string> keys;      // per (image, flip) item: image * 2 + flip
};

// Caches every image of the assignment (and its mirror when the subset has flip_aug). Throws
// gl::Error when a subset uses random_crop or color_aug (their latents change every step).
CacheReport cache_latents(const Dataset& ds, const BucketAssignment& a, LatentCache& cache, LatentEncoder& enc,
                          const CacheOptions& opt = {});

}  // namespace data
