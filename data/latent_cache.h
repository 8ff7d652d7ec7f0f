// Latent caching: every (image, bucket, crop, flip) is encoded by the VAE once, as kohya's
// cache_latents does: the image prepared exactly as for training (decoded, resized like kohya,
// cropped to its bucket, flipped), scaled to [-1, 1], encoded, and ONE sample of the latent
// distribution kept, times the scaling factor. The encoder is an interface (ImageEncoder: the
// SD1.5 VAE's lives in pipelines/), given the unit noise of each entry, which derives from the
// run's seed and the entry's key. Entries live in RAM and, with a cache directory
// (--cache_latents_to_disk), one file each, named by a SHA-256 of what determines them: the image
// bytes, bucket, resized size, crop, flip and the encoder's identity. A later run reuses them; a
// changed image gets a new key and is re-encoded. Files are written to a temporary name and
// renamed, so an interrupted run leaves complete entries only and resumes without redoing them.
// With CacheOptions::kohya_npz, an entry missing from the cache is read from kohya's own latent
// file beside the image (`*_sd.npz`, see kohya_npz_path) when that file matches by kohya's rule
// and by our checks (read_kohya_npz); such a file is only read, never written.
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
#include <span>
#include <string>
#include <vector>

#include "data/bucket.h"
#include "data/dataset.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/tensor_source.h"

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

// What an image encoder's latents are: `channels` per latent pixel, one latent pixel per
// downscale x downscale image pixels, and (z - shift) * scale of the encoder's own latent z (what
// the diffusion model takes; the cache keeps them as given).
struct LatentSpec {
    int channels = 0;
    int downscale = 0;
    float scale = 1.0f, shift = 0.0f;
};

// A model's image encoder (a VAE's encoder, in pipelines/): images to the latents the cache keeps.
class ImageEncoder {
public:
    virtual ~ImageEncoder() = default;
    virtual std::string identity() const = 0;  // part of every cache key
    virtual LatentSpec latent_spec() const = 0;
    // The element type (f32, bf16 or f16) encode() takes x in without converting it: cache_latents
    // prepares its images in it on its worker threads.
    virtual gl::DType input_dtype() const { return gl::DType::f32; }
    // Every shape the next calls will use, before the first of them: an encoder may plan them all
    // at once and load its weights once for all. Calls with other shapes still work.
    virtual void prepare(const std::vector<EncoderShape>& shapes) { (void)shapes; }
    // x: shape.batch images [H, W, 3] (NHWC, [-1, 1]) of type t; noise: N(0, 1) values
    // [B, H / downscale, W / downscale, channels], for an encoder whose latents are a sample (a
    // VAE's); returns the latents in that shape.
    virtual std::vector<float> encode(const void* x, gl::DType t, const EncoderShape& shape,
                                      std::span<const float> noise) = 0;
    // Gives the encoder's memory back (before training starts).
    virtual void release() = 0;
};

struct Latent {
    int height = 0, width = 0, channels = 0;
    std::vector<float> data;  // [h][w][c], as the encoder gave them
};

// The resize filter is part of the key only when it is not kohya's default, so that the keys of
// earlier caches stay valid.
std::string latent_key(const std::string& image_sha256, const BucketChoice& choice, std::array<int, 2> crop,
                       bool flip, const std::string& encoder_identity,
                       Interpolation resize = Interpolation::automatic);

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
    // Kept in RAM only (entries read from kohya's npz files, which stay the copy on disk).
    void put_ram(const std::string& key, Latent latent);
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

// kohya's latent cache file of an image (sd-scripts' SdSdxlLatentsCachingStrategy for SD1 / SD2):
// "<stem>.npz" when that exists (its older name), else "<stem>_<WWWW>x<HHHH>_sd.npz" with the
// image's stored width and height (before EXIF orientation: kohya reads sizes from the header).
std::filesystem::path kohya_npz_path(const std::filesystem::path& image, int stored_width, int stored_height);

// What an entry needs from a kohya npz: its bucket (latents of bucket / 8, kohya's stride), the
// image's size (kohya's original_size), and which arrays kohya requires.
struct KohyaNpzExpect {
    Reso bucket;
    int image_width = 0, image_height = 0;
    bool flip = false;        // "latents_flipped" needed (the subset has flip_aug)
    bool alpha_mask = false;  // "alpha_mask" needed (the subset has alpha_mask)
};
struct KohyaLatents {
    Latent latents;
    std::optional<Latent> flipped;  // when expect.flip
};
// The latents of a kohya npz: kohya's is_disk_cached_latents_expected (the arrays "latents",
// "latents_flipped" when flipping, "alpha_mask" when masking) and what its loader reads
// ("original_size", "crop_ltrb"), then our checks: the zip and .npy headers (npz.h), float
// latents [C, bucket.h / 8, bucket.w / 8] with C = spec.channels, finite, original_size equal to
// the image's size, an alpha mask [bucket.h, bucket.w]. kohya keeps the VAE's raw sample z: the
// entries are (z - spec.shift) * spec.scale in our [h][w][c] order, as the encoder would give
// them. nullopt with the reason in *why when the file does not match or cannot be read.
std::optional<KohyaLatents> read_kohya_npz(const std::filesystem::path& npz, const KohyaNpzExpect& expect,
                                           const LatentSpec& spec, std::string* why);

struct CacheOptions {
    int vae_batch_size = 4;
    uint64_t seed = 0;  // the sampling noise of each entry derives from (seed, key)
    const std::atomic<bool>* stop = nullptr;  // checked between images while scanning, between VAE calls
    // Called after each VAE call: entries done (hits included), total, images per second.
    std::function<void(size_t done, size_t total, double rate)> progress;
    // Threads reading, hashing, decoding and resizing images and writing entries (0: one per
    // hardware thread). The entries are the same for any count.
    int threads = 0;
    // Entries not in the cache are read from kohya's `*_sd.npz` beside each image when it matches
    // (read_kohya_npz; an encoder whose latents are not at 1/8 of the image never looks): what
    // --cache_latents_to_disk does, as kohya reuses them. Kept in RAM only; the npz is not written.
    bool kohya_npz = false;
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
    size_t kohya_reused = 0;                 // of the hits: entries read from kohya's npz files
    std::vector<std::string> kohya_ignored;  // "<npz>: <why>" for each npz found but not used
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
CacheReport cache_latents(const Dataset& ds, const BucketAssignment& a, LatentCache& cache, ImageEncoder& enc,
                          const CacheOptions& opt = {});

}  // namespace data
