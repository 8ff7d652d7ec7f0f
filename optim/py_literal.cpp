#include "optim/py_literal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "ggml-lite/core/error.h"
#include "optim/descriptor.h"

namespace optim {

PyLiteral parse_py_literal(const std::string& where, const std::string& value) {
    const std::string v = trim(value);
    PyLiteral r;
    r.text = v;
    if (v == "None") return r;
    if (v == "True" || v == "False") {
        r.kind = PyLiteral::boolean;
        r.x = v == "True" ? 1.0 : 0.0;
        return r;
    }
    if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
        r.kind = PyLiteral::string;
        r.text = v.substr(1, v.size() - 2);
        GL_CHECK(r.text.find(v.front()) == std::string::npos, where, ": bad string ", v);
        return r;
    }
    r.kind = PyLiteral::number;
    if (v == "float('inf')" || v == "float(\"inf\")") {
        r.x = INFINITY;
        return r;
    }
    char* end = nullptr;
    r.x = std::strtod(v.c_str(), &end);
    const bool digits = !v.empty() && std::none_of(v.begin(), v.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) && c != 'e' && c != 'E'; });
    GL_CHECK(digits && end == v.c_str() + v.size() && std::isfinite(r.x), where, ": '", value,
             "' is not a Python literal (a number, True, False, None or a quoted string: kohya reads it with "
             "ast.literal_eval)");
    r.integer = v.find_first_of(".eE") == std::string::npos;
    return r;
}

std::map<std::string, PyLiteral> parse_py_kwargs(const std::string& where, const std::vector<std::string>& items) {
    std::map<std::string, PyLiteral> out;
    for (const std::string& item : items) {
        if (trim(item).empty()) continue;  // a bare option: kohya's empty list
        const size_t eq = item.find('=');
        GL_CHECK(eq != std::string::npos && item.find('=', eq + 1) == std::string::npos, where, ": '", item,
                 "' is not key=value (one '=', as kohya splits it)");
        const std::string key = trim(item.substr(0, eq));
        GL_CHECK(!key.empty(), where, ": '", item, "' has no key");
        out[key] = parse_py_literal(where + " " + key, item.substr(eq + 1));
    }
    return out;
}

}  // namespace optim
