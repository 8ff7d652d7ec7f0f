// Captions the way kohya's sd-scripts treats them (library/train_util.py: read_caption and
// BaseDataset.process_caption): sidecar files, prefix / suffix, whole-caption dropout (by rate or
// every N epochs), tag shuffling with kept leading tokens (a count, or a separator that fixes a
// prefix and an optional suffix), tag dropout, wildcards ({a|b|c}, one line of a multi-line caption
// file drawn), token warm-up (the first tags only, more of them step by step). Tags are re-joined
// with ", " as kohya does, whatever the separator. Weighted captions are weighted after all this, as
// kohya weighs them (models/sd15/prompt_weights.h).
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
    bool enable_wildcard = false;  // {a|b|c} draws one; a caption file's lines are all read, one drawn
    int token_warmup_min = 1;      // tags (after the kept ones) at step 0 of the warm-up
    double token_warmup_step = 0;  // every tag from this step on (below 1: this share of the run); 0: off

    // Throws gl::Error naming the option when a value is out of range.
    void validate() const;
    // Whether a caption can change between draws (then text-encoder outputs cannot be cached).
    bool varies() const {
        return shuffle_caption || caption_dropout_rate > 0 || caption_tag_dropout_rate > 0 ||
               caption_dropout_every_n_epochs > 0 || enable_wildcard || token_warmup_step > 0;
    }
    // kohya's warm-up length in steps: token_warmup_step, or below 1 floor(it * max_train_steps).
    int64_t token_warmup_steps(int64_t max_train_steps) const;
};

// Where the run is, for token warm-up: the optimizer step the caption is drawn for (from 0, kohya's
// global_step) and the run's steps.
struct CaptionStep {
    int64_t step = 0;
    int64_t max_train_steps = 0;
};

// The caption file next to `image` (same stem, options' extension): its first line, trimmed, or
// with all_lines (kohya's enable_wildcard) every non-blank line trimmed, joined by '\n'.
// nullopt when there is none. Throws gl::Error naming the file when it is not valid UTF-8 or
// cannot be read. An empty file is an empty caption (kohya stops on it).
std::optional<std::string> read_caption_file(const std::filesystem::path& image, const std::string& extension,
                                             bool all_lines = false);

// One draw of the caption for training at `epoch` (1-based, as kohya counts) and step `at`; rng
// supplies every random choice, in kohya's order (dropout, wildcard line, wildcards, shuffle, tag
// dropout).
std::string process_caption(const CaptionOptions& opt, const std::string& caption, int epoch, Rng& rng,
                            CaptionStep at = {});

}  // namespace data
