// kohya sd-scripts' sample-prompt files (--sample_prompts, .txt): one prompt per line, options
// after " --" separators, as library/train_util.py line_to_prompt_dict reads them:
//
//   masterpiece, a cat on a sofa --n lowres, bad hands --w 512 --h 768 --d 42 --l 7.5 --s 28
//
//   --n TEXT   negative prompt (the rest of that piece, spaces included)
//   --w N      width, --h N height (pixels)
//   --d N      seed
//   --l X      CFG scale
//   --s N      steps
//   --ss NAME  sampler for this prompt (kohya's names; see sampler.h)
// Empty lines are skipped; a line whose first non-blank character is '#' is a comment. Flags are
// matched case-insensitively, as kohya does.
//
// Where kohya is lenient and we are not: a flag whose value does not parse (kohya logs it and
// goes on) or that we do not know is an error naming the file, the line and the flag; kohya's
// options for other model families (--g, --cn, --ctr, --rcfg, --fs) are refused by name; every
// value must lie within kSampleBounds, the bounds the tools' flags have too (kohya clamps the
// steps to [1, 1000], raises sides below 64 to 64 and rounds them down to multiples of 8, and
// takes any size and CFG scale); the prompt text itself is never read as a flag (kohya also
// matches its patterns against the prompt piece, so a prompt starting with "w 5" would set the
// width).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace diffusion {

// The bounds of one sampling request, for prompt files and the tools' flags alike (gl-txt2img's
// -W -H --steps --cfg --batch --seed): a value outside them is refused, never clamped.
struct SampleBounds {
    // Pixels, in multiples of 8 (the VAE's latents are 8x8 pixels). The largest side is 4x SD1.5's
    // training size, A1111's largest: past it SD1.5 makes no coherent image, and its top-level
    // attention over (side / 8)^2 tokens would run for hours.
    int side_min = 8, side_max = 2048, side_step = 8;
    int steps_min = 1, steps_max = 1000;  // kohya's range for --s
    double cfg_max = 1000;                // CFG scale in [0, cfg_max]
    int batch_min = 1, batch_max = 64;    // images per request (the tools' --batch)
    // Seeds: every value of a uint64 (kohya's --d goes to torch.manual_seed, which takes
    // [0, 2^64 - 1]); image b of a batch uses seed + b, wrapping.
};
inline constexpr SampleBounds kSampleBounds{};

struct SamplePrompt {
    std::string prompt, negative;
    int width = 512, height = 512;
    std::optional<uint64_t> seed;  // none: a random seed is drawn when the image is made
    double cfg_scale = 7.5;
    int steps = 30;
    std::string sampler;  // "" = the run's default sampler
    int line = 0;         // 1-based line of the prompt file (0 for prompts not from a file)
    std::string where;    // what errors about it name: "file:line", or "file: prompt N" (.toml / .json)
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

// Checks the values of a prompt against kSampleBounds and its sampler's name; throws gl::Error that
// starts with `where` and names the value.
void validate_prompt(const SamplePrompt& p, const std::string& where);

}  // namespace diffusion
