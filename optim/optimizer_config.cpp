// parse_optimizer: kohya's --optimizer_type / --optimizer_args into an OptimizerConfig, driven by the
// selected descriptor's argument table. Every argument starts at the Python class's default (parsed
// from the table like a user's value); kohya passes only the args the user gives, so a missing arg
// keeps that default.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "ggml-lite/core/error.h"
#include "optim/descriptor.h"

namespace optim {

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

namespace {

[[noreturn]] void bad(const std::string& key, const std::string& value, const std::string& why) {
    gl::fail("optimizer_args: ", key, "=", value, ": ", why);
}

double parse_number(const std::string& key, const std::string& value, const std::string& text) {
    const std::string v = lower(trim(text));
    if (v == "inf" || v == "float('inf')" || v == "float(\"inf\")") return INFINITY;
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || std::isnan(d)) bad(key, value, "not a number");
    return d;
}

ArgValue parse_value(const std::string& key, const std::string& value, ArgType type) {
    const std::string v = trim(value);
    ArgValue r;
    switch (type) {
        case ArgType::flag_or_none:
            if (lower(v) == "none") {
                r.none = true;
                return r;
            }
            [[fallthrough]];
        case ArgType::flag:
            if (lower(v) != "true" && lower(v) != "false") bad(key, value, "expected True or False");
            r.n = 1;
            r.x[0] = lower(v) == "true" ? 1.0 : 0.0;
            return r;
        case ArgType::number_or_none:
            if (lower(v) == "none") {
                r.none = true;
                return r;
            }
            [[fallthrough]];
        case ArgType::number:
            r.n = 1;
            r.x[0] = parse_number(key, value, v);
            return r;
        case ArgType::pair:
        case ArgType::triple: {
            std::string inner = v;
            if (inner.size() >= 2 &&
                ((inner.front() == '(' && inner.back() == ')') || (inner.front() == '[' && inner.back() == ']')))
                inner = inner.substr(1, inner.size() - 2);
            const int want = type == ArgType::triple ? 3 : 2;
            size_t start = 0;
            for (int k = 0; k < want; k++) {
                const size_t comma = inner.find(',', start);
                if ((comma == std::string::npos) != (k == want - 1))
                    bad(key, value, want == 3 ? "expected three numbers: a,b,c" : "expected two numbers: a,b");
                r.x[k] = parse_number(key, value, inner.substr(start, comma == std::string::npos ? comma : comma - start));
                start = comma + 1;
            }
            r.n = want;
            return r;
        }
    }
    bad(key, value, "unknown argument type");
}

// Parses, checks and stores one argument (the user's or the table's default).
void apply(OptimizerConfig& c, const ArgDef& a, const std::string& value) {
    const ArgValue v = parse_value(a.name, value, a.type);
    if (a.check)
        if (const char* why = a.check(v)) bad(a.name, value, why);
    for (int i = 0; i < v.n && !v.none; i++) {
        // The optimizers compute in float: a finite value float cannot hold would become inf (1e39)
        // or 0 (1e-50); infinity itself is a value some arguments take (Prodigy's growth_rate).
        const double x = v.x[i], size = std::fabs(x);
        if (std::isfinite(x) && (size > std::numeric_limits<float>::max() ||
                                 (x != 0 && size < std::numeric_limits<float>::denorm_min())))
            bad(a.name, value, "does not fit a 32-bit float (the optimizer computes in one)");
    }
    for (int i = 0; i < 2; i++)
        if (a.feeds[i]) c.*a.feeds[i] = v.none ? 0.0f : float(v.x[i]);
    c.values[a.name] = v;
}

template <class Ok>
const char* each_number(const ArgValue& v, Ok ok, const char* requirement) {
    for (int i = 0; i < v.n; i++)
        if (!ok(v.x[i])) return requirement;
    return nullptr;
}

}  // namespace

const char* check_positive(const ArgValue& v) {
    return each_number(v, [](double x) { return x > 0 && std::isfinite(x); }, "must be positive");
}
const char* check_unit_open(const ArgValue& v) {
    return each_number(v, [](double x) { return x >= 0 && x < 1; }, "must lie in [0, 1)");
}
const char* check_unit_closed(const ArgValue& v) {
    return each_number(v, [](double x) { return x >= 0 && x <= 1; }, "must lie in [0, 1]");
}
const char* check_weight_decay(const ArgValue& v) {
    return each_number(v, [](double x) { return x >= 0 && x <= 1e6; }, "must lie in [0, 1e6]");
}

OptimizerConfig::OptimizerConfig() : OptimizerConfig(find_optimizer("AdamW")) {}

OptimizerConfig::OptimizerConfig(const OptimizerDef& d) : def(&d) {
    for (const ArgDef& a : d.args) {
        GL_CHECK(!values.count(a.name), "optimizer ", d.name, ": argument '", a.name, "' listed twice");
        apply(*this, a, a.fallback);
    }
    if (d.check) d.check(*this);
}

const char* OptimizerConfig::name() const { return def->name; }

const ArgValue& OptimizerConfig::value(const std::string& arg, ArgType a, ArgType b) const {
    for (const ArgDef& d : def->args)
        if (d.name == arg) {
            GL_CHECK(d.type == a || d.type == b, "optimizer ", def->name, ": argument '", arg, "' read as another type");
            return values.at(arg);
        }
    gl::fail("optimizer ", def->name, " has no argument '", arg, "'");
}

double OptimizerConfig::number(const std::string& arg) const {
    const ArgValue& v = value(arg, ArgType::number, ArgType::number_or_none);
    GL_CHECK(!v.none, "optimizer ", def->name, ": argument '", arg, "' is None");
    return v.x[0];
}
bool OptimizerConfig::flag(const std::string& arg) const {
    const ArgValue& v = value(arg, ArgType::flag, ArgType::flag_or_none);
    GL_CHECK(!v.none, "optimizer ", def->name, ": argument '", arg, "' is None");
    return v.x[0] != 0.0;
}
bool OptimizerConfig::is_none(const std::string& arg) const {
    return value(arg, ArgType::number_or_none, ArgType::number_or_none).none;
}
std::pair<double, double> OptimizerConfig::pair(const std::string& arg) const {
    const ArgValue& v = value(arg, ArgType::pair, ArgType::pair);
    return {v.x[0], v.x[1]};
}
double OptimizerConfig::triple(const std::string& arg, int i) const {
    GL_CHECK(i >= 0 && i < 3, "optimizer ", def->name, ": argument '", arg, "' has no number ", i);
    return value(arg, ArgType::triple, ArgType::triple).x[i];
}

OptimizerConfig parse_optimizer(const std::string& type, const std::vector<std::string>& args) {
    OptimizerConfig c(find_optimizer(type));
    std::set<std::string> seen;
    for (const std::string& raw : args) {
        const size_t eq = raw.find('=');
        if (eq == std::string::npos) gl::fail("optimizer_args: '", raw, "' is not name=value");
        const std::string key = trim(raw.substr(0, eq)), value = trim(raw.substr(eq + 1));
        const auto it =
            std::find_if(c.def->args.begin(), c.def->args.end(), [&](const ArgDef& a) { return a.name == key; });
        if (it == c.def->args.end()) {
            std::set<std::string> known;
            for (const ArgDef& a : c.def->args) known.insert(a.name);
            std::string list;
            for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
            gl::fail("optimizer_args: unknown argument '", key, "' for ", c.name(), " (known: ", list, ")");
        }
        if (!seen.insert(key).second) gl::fail("optimizer_args: '", key, "' given twice");
        apply(c, *it, value);
        c.args.push_back(key + "=" + value);
        if (it->inert) c.notes.push_back(gl::cat("optimizer_args ", key, "=", value, ": ", it->inert));
    }
    if (c.def->note) c.notes.insert(c.notes.begin(), gl::cat("--optimizer_type ", c.name(), ": ", c.def->note));
    if (c.def->check) c.def->check(c);
    return c;
}

}  // namespace optim
