// kohya sd-scripts' sample-prompt files (--sample_prompts, .txt): one prompt per line, options
// after " --" separators, as library/train_util.py line_to_prompt_dict reads them:
//
//   masterpiece, a cat on a sofa --n lowres, bad hands --w 512 --h 768 --d 42 --l 7.5 --s 28
//
//   --n TEXT   negative prompt (the rest of that piece, spaces included)
//   --w N      width, --h N height (pixels)
//   --d N      seed
//   --l X      CFG scale
//   --s N      steps (clamped to 1..1000, as kohya does)
//   --ss NAME  sampler for this prompt (kohya's names; see sampler.h)
// Empty lines are skipped; a line whose first non-blank character is '#' is a comment. Flags are
// matched case-insensitively, as kohya does.
//
// Where kohya is lenient and we are not: a flag whose value does not parse (kohya logs it and
// goes on) or that we do not know is an error naming the file, the line and the flag; kohya's
// options for other model families (--g, --cn, --ctr, --rcfg, --fs) are refused by name; sizes
// must be positive multiples of 8 (kohya rounds them down); the prompt text itself is never read
// as a flag (kohya also matches its patterns against the prompt piece, so a prompt starting with
// "w 5" would set the width).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sd {

struct SamplePrompt {
    std::string prompt, negative;
    int width = 512, height = 512;
    std::optional<uint64_t> seed;  // none: a random seed is drawn when the image is made
    double cfg_scale = 7.5;
    int steps = 30;
    std::string sampler;  // "" = the run's default sampler
    int line = 0;         // 1-based line of the prompt file (0 for prompts not from a file)
};

// kohya's defaults for a line's missing options (sample_image_inference): 512x512, 30 steps,
// CFG 7.5, no seed, the run's sampler. Tools pass their own command-line values instead.
SamplePrompt kohya_prompt_defaults();

// One line (without its newline); origin and line number name it in errors. Returns nullopt for
// an empty or comment line.
std::optional<SamplePrompt> parse_prompt_line(std::string_view line, const SamplePrompt& defaults,
                                              const std::string& origin = "prompt", int line_no = 0);
// A whole file's text (LF or CRLF line ends, UTF-8; a leading byte-order mark is skipped).
std::vector<SamplePrompt> parse_prompt_text(std::string_view text, const SamplePrompt& defaults,
                                            const std::string& origin);
// Reads and parses a prompt file; throws gl::Error naming it when it cannot be read, holds no
// prompt or a malformed line, or is one of kohya's .toml / .json prompt files (not read here).
std::vector<SamplePrompt> read_prompt_file(const std::string& path, const SamplePrompt& defaults);

// Checks the values of a prompt (positive multiples of 8 up to 8192 for the sides, finite CFG
// scale, steps 1..1000, a known sampler); throws gl::Error that starts with `where`.
void validate_prompt(const SamplePrompt& p, const std::string& where);

}  // namespace sd
