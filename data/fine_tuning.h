// kohya's fine-tuning metadata (train_util.py FineTuningDataset; the JSON that its
// finetune/merge_captions_to_metadata.py, merge_dd_tags_to_metadata.py and prepare_buckets_latents.py
// write, or its JSONL form): image key -> {"caption", "tags", "image_size", ...}.
//
// The rules, as kohya's code has them:
// - A file whose name ends in ".jsonl" is JSONL: one object per line with "image_path" (the key),
//   "caption" (default ""), optional "tags", "image_size" [w, h] (or "width" and "height"). Any
//   other name is one JSON object. A key given twice keeps its first place and its last value
//   (a Python dict's rule).
// - The image: a relative key is joined to the subset's image_dir (required then: kohya's
//   assertion), an absolute key is the path. A key without an extension, or whose path does not
//   exist, is looked for as <dir>/<name><ext> for kohya's IMAGE_EXTENSIONS (.png .jpg .jpeg .webp
//   .bmp and their upper-case forms), the first by sorted path (the extension search of kohya's
//   current code; sd-scripts 48d368fa has none and fails on such keys). None found: an error naming
//   the key (kohya trains from a latent .npz alone there; sdtrain needs the image).
// - The caption: "caption" (null or absent: ""), then "tags" appended with the subset's
//   caption_separator (when both are non-empty; tags alone are the caption). With enable_wildcard
//   the tags' newlines become separators and every non-blank caption line gets the separator and
//   the tags appended (blank lines dropped). Those tags are what ss_tag_frequency counts, under the metadata file's
//   name. "train_resolution" and other keys are not read (kohya's current dataset does not).
// - The order: keys longest first (in characters), ties in file order (kohya's sort).
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/config.h"

namespace data {

struct MetadataImage {
    std::string key;              // as the file writes it
    std::filesystem::path path;   // the image file it names
    std::string caption;          // kohya's caption (caption and tags joined)
    std::optional<std::string> tags;  // the tags kohya counts in ss_tag_frequency (none: not counted)
    std::optional<std::array<int64_t, 2>> image_size;  // the metadata's [width, height]
};

// The images of a fine-tuning subset in kohya's order. Throws gl::Error naming the file (and the
// key or line) for a file that is missing, a folder, a FIFO, not UTF-8 / JSON / an object, a value
// of the wrong type, a relative key without image_dir, or a key whose image is not found.
// An empty metadata object gives no images (kohya ignores the subset with a warning).
std::vector<MetadataImage> read_fine_tuning_metadata(const SubsetConfig& subset);

}  // namespace data
