// What a TOML value is, in words, for the errors of the config readers (data/config.cpp,
// tools/sdtrain/options.cpp): "a table", "an array of 3 integers", "a date (2024-01-31)", so that a
// refused value is named by what was given, beside what the key wants.
#pragma once
#include <string>

#include <toml++/toml.h>

namespace data {

std::string describe_toml_value(const toml::node& n);

}  // namespace data
