// The whole run configuration as text, by option group, under kohya's option names (what the
// report shows as "the full config": every option's effective value, defaults included), in the
// option table's order (train/run/option_table.h); the run group (--dry_run) is not shown.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "train/run/config.h"

namespace train {

struct ConfigSection {
    std::string title;  // "Model", "Data", ...
    std::vector<std::pair<std::string, std::string>> entries;  // option name (no dashes), value ("None" when unset)
};

std::vector<ConfigSection> config_sections(const RunConfig& c);

}  // namespace train
