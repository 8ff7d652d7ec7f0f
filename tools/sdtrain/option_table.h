// The table behind sdtrain's command line (tools/sdtrain/options.h): one entry per kohya option
// name, with its --help group, how many values it takes and how they land in train::RunConfig.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "train/run/config.h"

namespace sdtrain {

using Values = std::vector<std::string>;

enum class Kind : uint8_t {
    flag,   // store_true: no value on the command line; true / false in a config file
    value,  // one value
    list,   // nargs="*": any number of values
};

struct Option {
    std::string name;   // kohya's, without the dashes
    std::string group;  // its --help group ("" hides it: refused kohya options)
    Kind kind = Kind::value;
    std::string type;   // what --help shows: INT, NUMBER, PATH, TEXT, ...
    std::string help;
    bool numeric = false;  // --output_config writes it as a TOML number
    // Applies the values; `where` names the option in errors ("--seed", "run.toml: seed").
    std::function<void(train::RunConfig&, const std::string& where, const Values&)> set;
};

// Every option, in --help order.
const std::vector<Option>& option_table();
const Option* find_option(const std::string& name);

}  // namespace sdtrain
