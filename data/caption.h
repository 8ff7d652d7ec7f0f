// Captions the way kohya's sd-scripts treats them (library/train_util.py: read_caption and
// BaseDataset.process_caption): sidecar files, prefix / suffix, whole-caption dropout (by rate or
// every N epochs), tag shuffling with kept leading tokens (a count, or a separator that fixes a
// prefix and an optional suffix), tag dropout. Tags are re-joined with ", " as kohya does,
// whatever the separator. Wildcards, token warm-up and weighted captions are not supported.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "data/rng.h"

namespace data {

struct CaptionOptions {
    std::string caption_extension = ".caption";  // kohya's default; ".txt" is the common choice
    std::string caption_prefix, caption_suffix;  // joined with a space
    bool shuffle_caption = false;
    std::string caption_separator = ",";
    int keep_tokens = 0;
    std::string keep_tokens_separator;  // empty: off
    std::string secondary_separator;    // replaced by caption_separator at the end; empty: off
    double caption_dropout_rate = 0;
    double caption_tag_dropout_rate = 0;
    int caption_dropout_every_n_epochs = 0;

    // Throws gl::Error naming the option when a value is out of range.
    void validate() const;
    // Whether a caption can change between draws (then text-encoder outputs cannot be cached).
    bool varies() const {
        return shuffle_caption || caption_dropout_rate > 0 || caption_tag_dropout_rate > 0 ||
               caption_dropout_every_n_epochs > 0;
    }
};

// The caption file next to `image` (same stem, options' extension): its first line, trimmed.
// nullopt when there is none. Throws gl::Error naming the file when it is not valid UTF-8 or
// cannot be read. An empty file is an empty caption (kohya stops on it).
std::optional<std::string> read_caption_file(const std::filesystem::path& image, const std::string& extension);

// One draw of the caption for training at `epoch` (1-based, as kohya counts); rng supplies
// every random choice, in kohya's order (dropout, shuffle, tag dropout).
std::string process_caption(const CaptionOptions& opt, const std::string& caption, int epoch, Rng& rng);

}  // namespace data
