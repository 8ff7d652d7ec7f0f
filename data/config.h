// Dataset configuration the way kohya's sd-scripts reads it (library/config_util.py): either a
// --dataset_config TOML file ([general], [[datasets]], [[datasets.subsets]]) or the folder layout
// train_data_dir/<repeats>_<class tokens>/ with an optional reg_data_dir in the same layout.
// A value is looked up subset -> dataset -> [general] -> command line -> kohya's default, the first
// that sets it winning. Keys kohya accepts but sdtrain does not implement are errors naming the key,
// as are unknown keys and values of the wrong type (named by what was given: "got a table").
// A subset with `metadata_file` is one of kohya's fine-tuning subsets (FineTuningSubset: images and
// captions from a JSON / JSONL file, data/fine_tuning.h); a dataset's subsets are all of one kind.
#pragma once
#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "data/caption.h"
#include "data/resize.h"

namespace data {

// One level of settings: key -> value (the command line's level is filled by the trainer).
using ConfigValue = std::variant<bool, int64_t, double, std::string, std::array<int64_t, 2>, std::array<double, 2>>;
using ConfigLevel = std::map<std::string, ConfigValue>;

struct SubsetConfig {
    std::filesystem::path image_dir;  // empty only in a fine-tuning subset without one
    // kohya's fine-tuning metadata (FineTuningSubset's metadata_file, --in_json): the subset's images
    // are the file's keys (data/fine_tuning.h), not the folder's listing.
    std::optional<std::filesystem::path> metadata_file;
    int num_repeats = 1;
    bool is_reg = false;
    std::optional<std::string> class_tokens;  // the caption of images without a caption file
    CaptionOptions caption;
    bool flip_aug = false;
    bool random_crop = false;
    bool color_aug = false;
    // kohya's face_crop_aug_range (low, high; data/face_crop.h): without bucketing, images whose
    // names carry a face box are cut around the face at a random scale.
    std::optional<std::array<double, 2>> face_crop_aug_range;
    // kohya's resize_interpolation (data/resize.h): the filter of every resize of its images.
    Interpolation resize_interpolation = Interpolation::automatic;
    bool alpha_mask = false;  // keep alpha as a loss mask instead of compositing over white
    // kohya's masked loss from mask images: for each image the file of the same name (any image
    // extension) in this folder, its red channel the loss weight (255: trained, 0: not).
    std::optional<std::filesystem::path> conditioning_data_dir;

    // How messages name the subset: its metadata file when it has one, else its folder.
    std::string label() const { return metadata_file ? metadata_file->string() : image_dir.string(); }
};

struct DatasetConfig {
    int batch_size = 1;
    int width = 512, height = 512;  // resolution ("W,H" or one number)
    bool enable_bucket = false;
    int min_bucket_reso = 256;
    int max_bucket_reso = 1024;
    int bucket_reso_steps = 64;
    bool bucket_no_upscale = false;
    // The dataset's own resize_interpolation (kohya keeps it beside the subsets'; a subset's, which
    // falls back to it, is the one used).
    Interpolation resize_interpolation = Interpolation::automatic;
    // kohya's validation split: this share of every training subset's images (by split_train_val's
    // rule, data/validation_split.h) is held out; validation_seed orders the draw (else the run's seed).
    double validation_split = 0.0;
    std::optional<int64_t> validation_seed;
    std::vector<SubsetConfig> subsets;
};

// Reads a --dataset_config TOML file. Throws gl::Error naming the file and the key.
std::vector<DatasetConfig> load_dataset_config(const std::filesystem::path& toml_file,
                                               const ConfigLevel& command_line = {});
// The same from TOML text (`name` appears in errors).
std::vector<DatasetConfig> parse_dataset_config(const std::string& toml_text, const std::string& name,
                                                const ConfigLevel& command_line = {});

// The folder layout: one subset per <repeats>_<class tokens> folder (sorted by name; folders whose
// name does not start with a number, and number 0, are skipped with a warning naming them).
// Settings other than image_dir / num_repeats / is_reg / class_tokens come from command_line.
// `warnings` receives the skipped folders.
DatasetConfig folder_dataset_config(const std::filesystem::path& train_data_dir,
                                    const std::optional<std::filesystem::path>& reg_data_dir,
                                    const ConfigLevel& command_line, std::vector<std::string>& warnings);

// kohya's --in_json (train_network.py's "Training with captions"): one dataset of one fine-tuning
// subset, metadata_file = in_json and image_dir = train_data_dir (optional: needed only when a key
// is a relative path). Other settings come from command_line (--dataset_repeats is num_repeats).
DatasetConfig metadata_dataset_config(const std::filesystem::path& in_json,
                                      const std::optional<std::filesystem::path>& train_data_dir,
                                      const ConfigLevel& command_line);

}  // namespace data
