// The images of one dataset: every subset's folder listed (PNG / JPEG / BMP / WebP by extension,
// sorted by path), each file read whole and checked by its decoder (data/image.h verify_image: the
// displayed size; unreadable, corrupt, truncated, empty and mislabelled files reported by path and
// reason, then skipped or fatal), captions read, and regularisation images balanced against
// training images as kohya's DreamBoothDataset does.
#pragma once
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "data/config.h"
#include "data/image.h"
#include "data/validation_split.h"

namespace data {

enum class BadImagePolicy : uint8_t { skip, fail };

// A face box from the file name (data/face_crop.h): centre and size in the image's pixels.
struct FaceBox {
    int cx = 0, cy = 0, w = 0, h = 0;
    bool operator==(const FaceBox&) const = default;
};

struct ImageEntry {
    std::filesystem::path path;
    int subset = 0;  // index into DatasetConfig::subsets
    int width = 0, height = 0;  // as displayed
    std::string caption;        // as read (file, else class tokens, else empty); drawn per step
    int num_repeats = 1;        // for reg images after balancing
    bool is_reg = false;
    Interpolation resize = Interpolation::automatic;  // its subset's resize_interpolation
    std::filesystem::path mask;  // its mask image (the subset's conditioning_data_dir), else empty
    // The face box of its name, read when its subset has face_crop_aug_range and the name has one.
    std::optional<FaceBox> face;
    // A fine-tuning subset's image: the metadata's tags that kohya counts in ss_tag_frequency
    // (data/fine_tuning.h; none: not counted). Its caption is the metadata's.
    std::optional<std::string> tags;
};

struct SkippedImage {
    std::string path, reason;
    bool operator==(const SkippedImage&) const = default;
};

struct Dataset {
    DatasetConfig config;
    std::vector<ImageEntry> images;  // training images, then regularisation images
    // Regularisation images the balancing did not need (more of them than training images):
    // never trained on, yet kohya counts them in a subset's img_count and its tag frequency.
    std::vector<ImageEntry> unused_reg;
    std::vector<std::string> warnings;
    std::vector<SkippedImage> skipped;         // files refused while reading, in listing order
    std::vector<std::string> failed_formats;  // "every JPEG (34 files) failed: <reason>" (see build_dataset)
    int64_t num_train_images = 0;  // with repeats
    int64_t num_reg_images = 0;    // with repeats, before balancing
};

// Every file is checked on a pool of worker threads (one per hardware thread; at most two files
// per thread in memory), so that damaged pixel data is found here, before any model is loaded,
// and not when the latents are encoded. failed_formats gets a line for each format (by extension)
// of which the dataset has two or more files and could read none, naming the reason most of them
// got: a decoder that fails on this machine shows as one line, not as a long list.
// Throws gl::Error when no usable image is left, when a regularisation folder holds images but
// none can be read (training would go on without the regularisation the user asked for; kohya
// stops the run at the first image it cannot load, in any folder), and with BadImagePolicy::fail
// at the first bad image (an ImageError).
// A subset with a conditioning_data_dir pairs each image with the mask image of its name (the
// first by kohya's extension order when several); as kohya, an image without a mask, or a mask
// without an image, is an error naming them, and so (where kohya's would fail at the batch) is a
// mask whose size is not its image's or that cannot be read.
// A fine-tuning subset (metadata_file) takes its images, in kohya's order, and their captions from
// its metadata (data/fine_tuning.h); a second subset of the same metadata file is ignored with a
// warning, as kohya does, and so is an empty one. An image_size in the metadata that is not the
// file's is warned about (the file's size is used).
// split: the whole dataset, or kohya's training or validation part of it (data/validation_split.h);
// a validation part without images is an empty Dataset, not an error.
Dataset build_dataset(const DatasetConfig& config, BadImagePolicy policy = BadImagePolicy::skip,
                      const DatasetSplit& split = {});

// The skipped images for a person to read, grouped by reason, the largest group first, each line
// starting with `indent`: "<reason>: N files" and the files below it, or "<path>: <reason>" for
// a reason only one file has. At most max_listed files are named, then "... and N more".
// "" when none.
std::string describe_skipped(const std::vector<SkippedImage>& skipped,
                             size_t max_listed = std::numeric_limits<size_t>::max(), const std::string& indent = "  ");

// Appends those of `more` that `list` does not name yet: a file is listed once, with the reason of
// the first stage that dropped it.
void add_skipped(std::vector<SkippedImage>& list, const std::vector<SkippedImage>& more);

// True for the extensions kohya lists (.png .jpg .jpeg .webp .bmp), any case.
bool has_image_extension(const std::filesystem::path& p);

}  // namespace data
