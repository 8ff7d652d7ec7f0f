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
#include <compare>
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

// One input shape of the encoder: images per call and their size.
struct EncoderShape {
    int batch = 0, height = 0, width = 0;
    auto operator<=>(const EncoderShape&) const = default;
};

// Encodes x [B, H, W, 3] (NHWC, [-1, 1]) into the VAE's moments [B, H/f, W/f, 2 * latent].
class LatentEncoder {
public:
    virtual ~LatentEncoder() = default;
    virtual std::string identity() const = 0;  // part of every cache key
    virtual const sd::VaeConfig& config() const = 0;
    // The element type (f32 or bf16) moments() takes x in without converting it: cache_latents
    // prepares its images in it on its worker threads.
    virtual gl::DType input_dtype() const { return gl::DType::f32; }
    // Every shape the next calls will use, before the first of them: an encoder may plan them all
    // at once and load its weights once for all. Calls with other shapes still work.
    virtual void prepare(const std::vector<EncoderShape>& shapes) { (void)shapes; }
    // x: shape.batch * height * width * 3 values of type t (f32 or bf16).
    virtual std::vector<float> moments(const void* x, gl::DType t, const EncoderShape& shape) = 0;
    // The same from floats (their count checked against the shape).
    std::vector<float> moments(const std::vector<float>& x, int batch, int height, int width);
    // Gives the encoder's memory back (before training starts).
    virtual void release() = 0;
};

// The VAE encoder graph on a ggml-lite backend: one graph and plan per input shape, all of them on
// one gl::SharedMemory (one copy of the weights, one activation arena sized for the largest), so
// the weights are loaded once when every shape comes through prepare(). A shape that was not
// prepared runs on that memory when it fits; otherwise the memory is laid out again for every
// shape so far and the weights reloaded. The input is declared in the weights' dtype: images come
// in it (bf16 on CUDA: half the upload of f32, and no cast node).
class VaeGraphEncoder : public LatentEncoder {
public:
    VaeGraphEncoder(sd::VaeConfig config, const gl::io::TensorSource& weights, std::string identity,
                    gl::DType dtype = gl::DType::f32, gl::Backend backend = gl::Backend::cpu);
    ~VaeGraphEncoder() override;
    std::string identity() const override { return identity_; }
    const sd::VaeConfig& config() const override { return config_; }
    gl::DType input_dtype() const override { return dtype_; }
    void prepare(const std::vector<EncoderShape>& shapes) override;
    using LatentEncoder::moments;
    std::vector<float> moments(const void* x, gl::DType t, const EncoderShape& shape) override;
    // Drops every runtime, plan and the shared memory.
    void release() override;

    int graphs_built() const { return graphs_built_; }  // one per shape planned
    int weight_loads() const { return weight_loads_; }  // 1 when every shape was prepared up front
    // Seconds spent planning and loading weights, writing inputs, running and reading back.
    struct Times {
        double setup = 0, upload = 0, run = 0;
        int calls = 0;
    };
    const Times& times() const { return times_; }
    // Per-node timing of the runs from now on (gl::Runtime::set_profiling: on CUDA each profiled
    // run is eager, an event pair around every node), and the report of one shape's runs.
    void set_profiling(bool on);
    std::string profile_report(const EncoderShape& shape, size_t top = 20) const;
    // The shared memory's layout (arenas, per-shape needs); empty when nothing is allocated.
    std::string memory_report() const;

private:
    struct Planned;
    Planned& planned(const EncoderShape& s);
    bool fits(const Planned& p) const;
    void lay_out();
    gl::Runtime& runtime(Planned& p);
    sd::VaeConfig config_;
    const gl::io::TensorSource& weights_;
    std::string identity_;
    gl::DType dtype_;
    gl::Backend backend_;
    std::map<EncoderShape, std::unique_ptr<Planned>> shapes_;
    std::shared_ptr<gl::SharedMemory> mem_;
    bool profiling_ = false;
    int graphs_built_ = 0, weight_loads_ = 0;
    Times times_;
};

struct Latent {
    int height = 0, width = 0, channels = 0;
    std::vector<float> data;  // [h][w][c], already times the scaling factor
};

std::string latent_key(const std::string& image_sha256, const BucketChoice& choice, std::array<int, 2> crop,
                       bool flip, const std::string& encoder_identity);

// Thread-safe: the caching workers look entries up and write them concurrently.
class LatentCache {
public:
    // With a directory: created when missing, and the temporary files of writers of this host
    // that were killed mid-write (gl::io::remove_stale_temps) are removed.
    explicit LatentCache(std::optional<std::filesystem::path> disk_dir = std::nullopt);
    // RAM first, then the disk (a file that is not a regular file, or of the wrong size or header,
    // is treated as missing).
    std::optional<Latent> get(const std::string& key);
    // Kept in RAM and, with a directory, written atomically (gl::io::write_file_atomic).
    void put(const std::string& key, Latent latent);
    std::optional<std::filesystem::path> file_of(const std::string& key) const;
    size_t ram_entries() const;
    // The stale temporary files the constructor removed.
    const std::vector<std::string>& stale_removed() const { return stale_removed_; }

private:
    std::optional<std::filesystem::path> dir_;
    std::vector<std::string> stale_removed_;
    mutable std::mutex mu_;
    std::map<std::string, Latent> ram_;
};

struct CacheOptions {
    int vae_batch_size = 4;
    uint64_t seed = 0;  // the sampling noise of each entry derives from (seed, key)
    const std::atomic<bool>* stop = nullptr;  // checked between images while scanning, between VAE calls
    // Called after each VAE call: entries done (hits included), total, images per second.
    std::function<void(size_t done, size_t total, double rate)> progress;
    // Threads reading, hashing, decoding and resizing images and writing entries (0: one per
    // hardware thread). The entries are the same for any count.
    int threads = 0;
};

// Where the wall time of a cache_latents call went, in seconds.
struct CacheTimes {
    double scan = 0;          // reading and hashing the images, looking their keys up
    double setup = 0;         // the encoder's prepare(): graphs planned, weights loaded
    double wait_prepare = 0;  // the encoder idle, waiting for images the workers had not prepared yet
    double encode = 0;        // inside the encoder's calls (upload, run, read back)
    double wait_write = 0;    // waiting for the last entries to be sampled and written
    double total = 0;
    double prepare_busy = 0;  // worker time reading, decoding, resizing, converting (all threads summed)
};

struct CacheReport {
    size_t total = 0, hits = 0, encoded = 0, vae_calls = 0;
    bool interrupted = false;
    std::vector<SkippedImage> skipped;  // images that failed to read or decode now
    std::vector<std::string> keys;      // per (image, flip) item: image * 2 + flip
    CacheTimes times;
};

// Caches every image of the assignment (and its mirror when the subset has flip_aug): the images
// are read and hashed on worker threads (keys, hits), then each bucket's misses go to the encoder
// in batches of vae_batch_size (the last may be smaller; every shape is given to prepare() first)
// while the workers decode and resize the next batches and write finished entries. An image that
// fails to decode leaves its place in its batch to a copy of another, so batches never depend on
// timing. Throws gl::Error when a subset uses random_crop or color_aug (their latents change every
// step).
CacheReport cache_latents(const Dataset& ds, const BucketAssignment& a, LatentCache& cache, LatentEncoder& enc,
                          const CacheOptions& opt = {});

}  // namespace data
