// sdtrain's command line in tests: the required options, a parse with extra options, the
// UsageError a command line gives, and a note the parse made (tests of tools/sdtrain/options.h).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "tools/common/cli.h"
#include "tools/sdtrain/options.h"

namespace sdtrain_cli_test {

inline const std::vector<std::string> kRequired = {"--pretrained_model_name_or_path", "m.safetensors",
                                                   "--train_data_dir", "data", "--output_dir", "out",
                                                   "--network_module", "networks.lora", "--resolution", "512"};

inline train::RunConfig parse(std::vector<std::string> extra) {
    std::vector<std::string> a = kRequired;
    a.insert(a.end(), extra.begin(), extra.end());
    return sdtrain::parse_command_line(a).config;
}

// The UsageError message of a command line (kRequired plus extra), or "(no error)".
inline std::string usage_error(std::vector<std::string> extra, bool with_required = true) {
    std::vector<std::string> a = with_required ? kRequired : std::vector<std::string>{};
    a.insert(a.end(), extra.begin(), extra.end());
    try {
        sdtrain::parse_command_line(a);
    } catch (const gl::cli::UsageError& e) {
        return e.what();
    }
    return "(no error)";
}

inline bool has_note(const train::RunConfig& c, const std::string& part) {
    return std::any_of(c.notes.begin(), c.notes.end(), [&](const std::string& n) { return n.find(part) != n.npos; });
}

}  // namespace sdtrain_cli_test
