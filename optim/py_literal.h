// The Python literals kohya's "key=value" arguments hold: kohya splits each at '=' and passes the
// value through ast.literal_eval (--lr_scheduler_args; --optimizer_args has its own typed parser,
// optim/optimizer_config.h).
#pragma once
#include <map>
#include <string>
#include <vector>

namespace optim {

struct PyLiteral {
    enum Kind { number, boolean, none, string } kind = none;
    double x = 0;         // number; boolean: 1 or 0
    bool integer = false;  // number written as an int (25, not 25.0)
    std::string text;      // string: its contents; every kind: the value as given
};

// One literal: ints, floats (inf as float('inf')), True / False, None, a string in '' or "".
// Throws gl::Error naming `where` and the value otherwise.
PyLiteral parse_py_literal(const std::string& where, const std::string& value);

// "key=value" items as kohya's loop reads them (split at the only '='; a key given twice keeps the
// last value, as a dict does; an empty item, what a bare option gives, is skipped). where names the
// option in errors.
std::map<std::string, PyLiteral> parse_py_kwargs(const std::string& where, const std::vector<std::string>& items);

}  // namespace optim
