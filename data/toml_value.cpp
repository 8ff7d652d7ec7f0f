#include "data/toml_value.h"

#include <sstream>

namespace data {
namespace {

// A scalar's name, singular or plural ("" for tables and arrays).
std::string type_name(toml::node_type t, bool plural) {
    switch (t) {
        case toml::node_type::boolean: return plural ? "booleans" : "a boolean";
        case toml::node_type::integer: return plural ? "integers" : "an integer";
        case toml::node_type::floating_point: return plural ? "numbers" : "a number";
        case toml::node_type::string: return plural ? "strings" : "a string";
        case toml::node_type::date: return plural ? "dates" : "a date";
        case toml::node_type::time: return plural ? "times" : "a time";
        case toml::node_type::date_time: return plural ? "date-times" : "a date-time";
        case toml::node_type::table: return plural ? "tables" : "a table";
        case toml::node_type::array: return plural ? "arrays" : "an array";
        default: return plural ? "values" : "a value";
    }
}

// The value as TOML writes it, for the scalars a person may have mistyped (a date for a string).
std::string shown(const toml::node& n) {
    std::ostringstream os;
    n.visit([&os](const auto& v) {
        if constexpr (toml::is_date<decltype(v)> || toml::is_time<decltype(v)> || toml::is_date_time<decltype(v)>)
            os << v;
    });
    return os.str();
}

}  // namespace

std::string describe_toml_value(const toml::node& n) {
    if (const toml::array* a = n.as_array()) {
        if (a->empty()) return "an empty array";
        toml::node_type first = a->get(0)->type();
        for (const toml::node& e : *a)
            if (e.type() != first) first = toml::node_type::none;
        const std::string count = std::to_string(a->size());
        if (first == toml::node_type::none) return "an array of " + count + " mixed values";
        return a->size() == 1 ? "an array of " + type_name(first, false) : "an array of " + count + " " + type_name(first, true);
    }
    const std::string text = shown(n);
    return type_name(n.type(), false) + (text.empty() ? "" : " (" + text + ")");
}

}  // namespace data
