// sdtrain's options as one table, built from their declarations in train/run/options.def (which
// also declares RunConfig's fields): per option kohya's name, its --help group, type and help, how
// its values are read into RunConfig (from the command line or a kohya config file), how its value
// shows in the run's configuration, and where it goes in kohya's ss_* metadata and in the dataset's
// command-line settings. tools/sdtrain/options.cpp builds --help, the command line and the config
// file reader from it; config_view.cpp (the report's configuration), metadata.cpp (ss_*) and
// data_plan.cpp (the dataset's command-line level) read it too.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/config.h"
#include "train/run/config.h"

namespace train {

using OptionValues = std::vector<std::string>;

enum class OptionKind : uint8_t {
    flag,   // store_true: no value on the command line; true / false in a config file
    value,  // one value
    list,   // nargs="*": any number of values
};

struct Option {
    std::string name;   // kohya's, without the dashes
    std::string group;  // its --help group ("" hides it: refused kohya options)
    OptionKind kind = OptionKind::value;
    std::string type;   // what --help shows: INT, NUMBER, PATH, TEXT, ...
    std::string help;
    bool numeric = false;  // --output_config writes it as a TOML number
    // Applies the values; `where` names the option in errors ("--seed", "run.toml: seed"). Throws
    // gl::Error for a bad value.
    std::function<void(RunConfig&, const std::string& where, const OptionValues&)> set;

    // The report's configuration: the section it shows in ("" for none) and its value as text
    // ("None" when unset).
    std::string section;
    std::function<std::string(const RunConfig&)> show;
    // kohya's metadata: the ss_* key ("" for none), written only for the folder layout when
    // ss_folders_only (kohya writes those keys per dataset otherwise), and the value as Python's
    // str() writes it there.
    std::string ss_key;
    bool ss_folders_only = false;
    std::function<std::string(const RunConfig&)> python;
    // The dataset's command-line level (data/config.h): the key ("" for none) and the value, none
    // when unset.
    std::string dataset_key;
    std::function<std::optional<data::ConfigValue>(const RunConfig&)> dataset_value;
};

// Every option, in --help order (kohya's refused and not-needed options after sdtrain's own).
const std::vector<Option>& option_table();
const Option* find_option(const std::string& name);

}  // namespace train
