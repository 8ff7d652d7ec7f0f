// sdtrain's command line: kohya sd-scripts' train_network.py option names onto train::RunConfig,
// grouped in --help the way a user thinks (model, data, network, training, optimizer, memory,
// output, sampling), and --config_file, kohya's TOML of the same keys (read_config_from_file: the
// tables' names are ignored, every key is an option name without its dashes, the command line
// wins; ".toml" is appended to a name without it). --output_config writes the command line's
// options to that file instead, as kohya does. The options are train::option_table()'s (declared
// in train/run/options.def): this file adds CLI11, the TOML file and usage errors.
//
// Options kohya has and sdtrain does not implement are refused by name when they would change
// anything (a GUI's config full of defaults still loads: `multires_noise_iterations = 0`,
// `log_with = ""`); options that are not needed here (--xformers, --sdpa, --mem_eff_attn, --lowram,
// ...) are accepted with a note. Unknown options, and unknown keys in the config file, are errors
// naming them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "train/run/config.h"

namespace sdtrain {

// What the command line asked for.
struct CommandLine {
    train::RunConfig config;           // not yet validated (train::Session validates)
    std::string wrote_config;          // --output_config: the file written (then nothing else runs)
};

// Parses the arguments (without the program name). Throws gl::cli::UsageError naming the option,
// or the config file and key; gl::cli::HelpRequested for --help.
CommandLine parse_command_line(const std::vector<std::string>& args);

// A config file's keys as option values, in file order (exposed for tests): booleans as
// "true"/"false", numbers and strings as text, arrays as one value per element. Throws
// gl::cli::UsageError naming the file (and key) for unreadable or invalid TOML, tables nested
// twice, or values of other types.
std::vector<std::pair<std::string, std::vector<std::string>>> read_config_file(const std::string& path);

// kohya's option names sdtrain knows (accepted, noted or refused), for tests.
std::vector<std::string> known_option_names();

}  // namespace sdtrain
