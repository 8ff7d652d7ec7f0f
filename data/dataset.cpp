#include "data/dataset.h"

#include <algorithm>

#include "ggml-lite/core/error.h"

namespace data {
namespace fs = std::filesystem;

bool has_image_extension(const fs::path& p) { return format_of_extension(p) != ImageFormat::unknown; }

std::string describe_skipped(const std::vector<SkippedImage>& skipped) {
    if (skipped.empty()) return "";
    std::string s = gl::cat(skipped.size(), skipped.size() == 1 ? " image" : " images", " skipped:");
    for (const SkippedImage& k : skipped) s += "\n  " + k.path + ": " + k.reason;
    return s;
}

namespace {

std::vector<fs::path> list_images(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && has_image_extension(e.path())) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

Dataset build_dataset(const DatasetConfig& config, BadImagePolicy policy) {
    Dataset ds;
    ds.config = config;
    std::vector<ImageEntry> reg;
    std::vector<std::string> missing_captions;
    for (size_t si = 0; si < config.subsets.size(); si++) {
        const SubsetConfig& s = config.subsets[si];
        const std::string dir = s.image_dir.string();
        if (s.num_repeats < 1) {
            ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": num_repeats is less than 1"));
            continue;
        }
        std::error_code ec;
        if (!fs::is_directory(s.image_dir, ec)) {
            ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": not a directory"));
            continue;
        }
        const std::vector<fs::path> files = list_images(s.image_dir);
        if (files.empty()) {
            ds.warnings.push_back(gl::cat("ignoring subset ", dir, ": no images found"));
            continue;
        }
        for (const fs::path& f : files) {
            ImageEntry e;
            e.path = f;
            e.subset = int(si);
            e.num_repeats = s.num_repeats;
            e.is_reg = s.is_reg;
            try {
                const std::vector<uint8_t> bytes = read_file_bytes(f);
                const ImageHeader h = read_image_header(bytes.data(), bytes.size(), f.string());
                e.width = h.width;
                e.height = h.height;
            } catch (const ImageError& err) {
                if (policy == BadImagePolicy::fail) throw;
                ds.skipped.push_back({err.path(), err.reason()});
                continue;
            }
            if (std::optional<std::string> c = read_caption_file(f, s.caption.caption_extension)) {
                e.caption = *c;
            } else {
                e.caption = s.class_tokens.value_or("");
                missing_captions.push_back(f.string());
            }
            (s.is_reg ? ds.num_reg_images : ds.num_train_images) += s.num_repeats;
            (s.is_reg ? reg : ds.images).push_back(std::move(e));
        }
    }
    if (!missing_captions.empty()) {
        std::string w = gl::cat("no caption file for ", missing_captions.size(),
                                " images (their folder's class tokens or an empty caption are used):");
        for (size_t i = 0; i < missing_captions.size() && i < 5; i++) w += "\n  " + missing_captions[i];
        if (missing_captions.size() > 5) w += gl::cat("\n  ... and ", missing_captions.size() - 5, " more");
        ds.warnings.push_back(w);
    }
    if (ds.num_reg_images > 0 && ds.num_train_images < ds.num_reg_images)
        ds.warnings.push_back("more regularisation images than training images: some are not used");
    // kohya's balancing: reg images are added in order (first with their own repeats, then one
    // more repeat each, round after round) until they match the training images with repeats.
    if (!reg.empty()) {
        const size_t first_reg = ds.images.size();
        int64_t n = 0;
        bool first_round = true;
        while (n < ds.num_train_images) {
            for (ImageEntry& r : reg) {
                if (first_round) {
                    ds.images.push_back(r);
                    n += r.num_repeats;
                } else {
                    ds.images[first_reg + size_t(&r - reg.data())].num_repeats++;
                    n += 1;
                }
                if (n >= ds.num_train_images) break;
            }
            first_round = false;
        }
        ds.unused_reg.assign(reg.begin() + long(ds.images.size() - first_reg), reg.end());
    }
    if (ds.images.empty()) {
        std::string msg = "the dataset has no usable images";
        if (!ds.skipped.empty()) msg += gl::cat(" (", ds.skipped.size(), " unreadable, first: ", ds.skipped[0].path,
                                                ": ", ds.skipped[0].reason, ")");
        for (const SubsetConfig& s : config.subsets) msg += "\n  " + s.image_dir.string();
        throw gl::Error(msg);
    }
    return ds;
}

}  // namespace data
