// The images of one dataset: every subset's folder listed (PNG / JPEG / BMP / WebP by extension,
// sorted by path), each file's header checked (size after EXIF orientation; corrupt, truncated,
// empty and mislabelled files reported by path and reason, then skipped or fatal), captions read,
// and regularisation images balanced against training images as kohya's DreamBoothDataset does.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/config.h"
#include "data/image.h"

namespace data {

enum class BadImagePolicy : uint8_t { skip, fail };

struct ImageEntry {
    std::filesystem::path path;
    int subset = 0;  // index into DatasetConfig::subsets
    int width = 0, height = 0;  // as displayed
    std::string caption;        // as read (file, else class tokens, else empty); drawn per step
    int num_repeats = 1;        // for reg images after balancing
    bool is_reg = false;
};

struct SkippedImage {
    std::string path, reason;
};

struct Dataset {
    DatasetConfig config;
    std::vector<ImageEntry> images;  // training images, then regularisation images
    // Regularisation images the balancing did not need (more of them than training images):
    // never trained on, yet kohya counts them in a subset's img_count and its tag frequency.
    std::vector<ImageEntry> unused_reg;
    std::vector<std::string> warnings;
    std::vector<SkippedImage> skipped;
    int64_t num_train_images = 0;  // with repeats
    int64_t num_reg_images = 0;    // with repeats, before balancing
};

// Throws gl::Error when no usable image is left ("an empty dataset is an error before any model is
// loaded"), and with BadImagePolicy::fail at the first bad image (an ImageError).
Dataset build_dataset(const DatasetConfig& config, BadImagePolicy policy = BadImagePolicy::skip);

// "N images skipped:" and one "  path: reason" line each, for the end of a run ("" when none).
std::string describe_skipped(const std::vector<SkippedImage>& skipped);

// True for the extensions kohya lists (.png .jpg .jpeg .webp .bmp), any case.
bool has_image_extension(const std::filesystem::path& p);

}  // namespace data
