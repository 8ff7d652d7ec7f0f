// The option table from train/run/options.def: each declaration becomes an Option by the rules of
// its field's type (how values read, show in the report and print as Python's str()), plus what
// its traits add.
#include "train/run/option_table.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <type_traits>
#include <utility>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/number_text.h"
#include "optim/descriptor.h"
#include "train/run/metadata.h"

namespace train {

namespace {

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr int kIntMin = std::numeric_limits<int>::min();
constexpr double kAnyReal = std::numeric_limits<double>::max();  // range(-kAnyReal, kAnyReal): any float

// The reasons many refused options share.
constexpr const char* kNotImplemented = "not implemented";
constexpr const char* kWandb = "W&B needs the network (sdtrain logs to TensorBoard: --logging_dir)";
constexpr const char* kUploads = "no uploads";

enum class Group : uint8_t { model, data, network, optimizer, training, memory, output, sampling, run };

struct GroupNames {
    const char* heading;  // --help's
    const char* section;  // the report's configuration ("": not shown)
};
GroupNames names_of(Group g) {
    switch (g) {
        case Group::model: return {"Model", "Model"};
        case Group::data: return {"Data (folders or --dataset_config, captions, buckets, caches)", "Data"};
        case Group::network: return {"Network (LoRA / LoCon)", "Network"};
        case Group::optimizer: return {"Optimizer and learning rate", "Optimizer"};
        case Group::training: return {"Training (steps, precision, loss, noise)", "Training"};
        case Group::memory: return {"Memory (the plan is made before any weight is loaded)", "Memory"};
        case Group::output: return {"Output (files, saves, states, resume)", "Output"};
        case Group::sampling: return {"Sampling", "Sampling"};
        case Group::run: return {"Run", ""};
    }
    return {"", ""};
}
constexpr const char* kNotNeeded = "Accepted for kohya compatibility, not needed";

// What a declaration adds to its type's rules (options.def's traits).
struct Traits {
    std::optional<std::pair<double, double>> bounds;
    std::string ss_key;
    bool ss_folders_only = false;
    std::optional<std::string> dataset_key;  // "": the option's own name
    std::string listed_reason;
    std::vector<std::string> (*choice_names)() = nullptr;
    std::string (*shown_text)(const RunConfig&) = nullptr;

    Traits range(double lo, double hi) const { return with([&](Traits& t) { t.bounds = std::pair{lo, hi}; }); }
    Traits ss(const std::string& key) const { return with([&](Traits& t) { t.ss_key = key; }); }
    Traits ss_folders(const std::string& key) const {
        return with([&](Traits& t) { t.ss_key = key, t.ss_folders_only = true; });
    }
    Traits dataset(const std::string& key = "") const { return with([&](Traits& t) { t.dataset_key = key; }); }
    Traits listed(const std::string& why) const { return with([&](Traits& t) { t.listed_reason = why; }); }
    Traits choices(std::vector<std::string> (*names)()) const {
        return with([&](Traits& t) { t.choice_names = names; });
    }
    Traits shown(std::string (*text)(const RunConfig&)) const {
        return with([&](Traits& t) { t.shown_text = text; });
    }

private:
    template <class F>
    Traits with(F&& change) const {
        Traits t = *this;
        change(t);
        return t;
    }
};
Traits range(double lo, double hi) { return Traits{}.range(lo, hi); }
Traits ss(const std::string& key) { return Traits{}.ss(key); }
Traits ss_folders(const std::string& key) { return Traits{}.ss_folders(key); }
Traits dataset(const std::string& key = "") { return Traits{}.dataset(key); }
Traits listed(const std::string& why) { return Traits{}.listed(why); }
Traits choices(std::vector<std::string> (*names)()) { return Traits{}.choices(names); }

std::vector<std::string> optimizer_names() {
    std::vector<std::string> n;
    for (const optim::OptimizerDef* d : optim::optimizer_defs()) n.emplace_back(d->name);
    return n;
}
std::vector<std::string> scheduler_names() { return lr_scheduler_names(); }
std::string optimizer_shown(const RunConfig& c) { return c.optimizer().name(); }

// ---- the rules of the field types ----

template <class T>
struct Optional : std::false_type {
    using Inner = T;
};
template <class T>
struct Optional<std::optional<T>> : std::true_type {
    using Inner = T;
};
template <class T>
constexpr bool kNoRule = false;

template <class T>
constexpr bool kNumber = (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || std::is_same_v<T, WarmupSteps>;

template <class T>
std::pair<T, T> int_bounds(const Traits& t) {
    if (!t.bounds) return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
    return {T(t.bounds->first), T(t.bounds->second)};
}
// Every number option is kept as a double (what metadata and the plan show, as kohya's Python
// floats) and computed in float by the run: it must hold as one.
std::pair<double, double> real_bounds(const Traits& t) {
    return t.bounds.value_or(std::pair{0.0, std::numeric_limits<double>::max()});
}

const std::string& one(const std::string& where, const OptionValues& v) {
    if (v.size() != 1) gl::fail(where, " takes one value, got ", v.size());
    return v[0];
}

bool parse_bool(const std::string& where, const std::string& v) {
    std::string l = v;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (l == "true") return true;
    if (l == "false") return false;
    gl::fail(where, " wants true or false, got '", v, "'");
}

// kohya's tuple(int(r) for r in s.split(",")): Python's int() takes blanks around the digits, so
// "512, 768" is a resolution.
std::array<int, 2> read_resolution(const std::string& where, const std::string& s) {
    auto side = [&](std::string part) {
        const char* blanks = " \t\n\r\f\v";
        const size_t a = part.find_first_not_of(blanks), b = part.find_last_not_of(blanks);
        part = a == std::string::npos ? "" : part.substr(a, b - a + 1);
        return gl::parse_int<int>(where, part, 1, 1 << 16);
    };
    const size_t comma = s.find(',');
    const int a = side(s.substr(0, comma));
    const int b = comma == std::string::npos ? a : side(s.substr(comma + 1));
    return {a, b};
}

// kohya's tuple(float(r) for r in s.split(",")) with its assertion: two numbers, the first not above
// the second (blanks around each, as Python's float() takes them). Both must be above 0 here (kohya
// divides by them).
std::array<double, 2> read_pair(const std::string& where, const std::string& s) {
    const size_t comma = s.find(',');
    GL_CHECK(comma != std::string::npos && s.find(',', comma + 1) == std::string::npos, where,
             " wants two numbers 'low,high' (kohya's face_crop_aug_range must be two floats), got '", s, "'");
    auto number = [&](std::string part) {
        const char* blanks = " \t\n\r\f\v";
        const size_t a = part.find_first_not_of(blanks), b = part.find_last_not_of(blanks);
        part = a == std::string::npos ? "" : part.substr(a, b - a + 1);
        return gl::parse_real<double>(where, part, std::numeric_limits<double>::denorm_min(),
                                      std::numeric_limits<double>::max());
    };
    const std::array<double, 2> v{number(s.substr(0, comma)), number(s.substr(comma + 1))};
    GL_CHECK(v[0] <= v[1], where, " wants 'low,high' with low <= high (kohya's assertion), got '", s, "'");
    return v;
}

WarmupSteps read_warmup(const std::string& where, const std::string& s) {
    WarmupSteps ws;
    if (!s.empty() && s.back() == '%') {
        ws.ratio = true;
        ws.value = gl::parse_real<double>(where, s.substr(0, s.size() - 1), 0, 100) / 100.0;
    } else {
        const double x = gl::parse_real<double>(where, s, 0, 1e12);
        ws.ratio = x < 1;
        ws.value = ws.ratio ? x : double(gl::parse_int<int64_t>(where, s, 0, int64_t(1e12)));
    }
    return ws;
}

gl::Backend read_backend(const std::string& where, const std::string& s) {
    try {
        return gl::parse_backend(s);
    } catch (const gl::Error& e) {
        gl::fail(where, ": ", e.what());
    }
}

// A value of the field's type (an optional's inner type) from one text.
template <class T>
T read(const std::string& where, const std::string& s, const std::string& label, const Traits& t) {
    if constexpr (std::is_integral_v<T>) {
        const auto [lo, hi] = int_bounds<T>(t);
        return gl::parse_int<T>(where, s, lo, hi);
    } else if constexpr (std::is_floating_point_v<T>) {
        const auto [lo, hi] = real_bounds(t);
        return gl::parse_real<double, float>(where, s, lo, hi);
    } else if constexpr (std::is_same_v<T, std::string>) {
        // An empty path would name the working folder, or nothing.
        if (s.empty() && (label == "PATH" || label == "FILE" || label == "FOLDER" || label == "TOML"))
            gl::fail(where, " wants a path, got ''");
        return s;
    } else if constexpr (std::is_same_v<T, std::array<int, 2>>) {
        return read_resolution(where, s);
    } else if constexpr (std::is_same_v<T, std::array<double, 2>>) {
        return read_pair(where, s);
    } else if constexpr (std::is_same_v<T, WarmupSteps>) {
        return read_warmup(where, s);
    } else if constexpr (std::is_same_v<T, gl::Backend>) {
        return read_backend(where, s);
    } else {
        static_assert(kNoRule<T>, "options.def: a field type without a reading rule");
    }
}

// The value as the report's configuration shows it ("None" for kohya's None).
template <class T>
std::string show(const T& v) {
    if constexpr (Optional<T>::value) {
        return v ? show(*v) : "None";
    } else if constexpr (std::is_same_v<T, bool>) {
        return v ? "true" : "false";
    } else if constexpr (std::is_integral_v<T>) {
        return std::to_string(v);
    } else if constexpr (std::is_floating_point_v<T>) {
        return py_float(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
        return v;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
        std::string s;
        for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
        return s.empty() ? "None" : s;
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
        std::string s;
        for (double x : v) {
            if (!s.empty()) s += ' ';
            s += py_float(x);
        }
        return s.empty() ? "None" : s;
    } else if constexpr (std::is_same_v<T, std::array<int, 2>>) {
        return gl::cat(v[0], ",", v[1]);
    } else if constexpr (std::is_same_v<T, std::array<double, 2>>) {
        return py_float(v[0]) + "," + py_float(v[1]);
    } else if constexpr (std::is_same_v<T, WarmupSteps>) {
        return v.ratio ? py_float(v.value) : std::to_string(int64_t(v.value));
    } else if constexpr (std::is_same_v<T, gl::Backend>) {
        return gl::backend_name(v);
    } else {
        static_assert(kNoRule<T>, "options.def: a field type without a showing rule");
    }
}

// The value as Python's str() writes kohya's args into its metadata.
template <class T>
std::string python(const T& v) {
    if constexpr (Optional<T>::value) return v ? python(*v) : "None";
    else if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
    else if constexpr (std::is_same_v<T, std::array<double, 2>>) return "(" + py_float(v[0]) + ", " + py_float(v[1]) + ")";
    else return show(v);
}

// The value for the dataset's command-line level; none when unset.
template <class T>
std::optional<data::ConfigValue> dataset_value(const T& v) {
    if constexpr (Optional<T>::value) {
        return v ? dataset_value(*v) : std::nullopt;
    } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
        return data::ConfigValue(v);
    } else if constexpr (std::is_integral_v<T>) {
        return data::ConfigValue(int64_t(v));
    } else if constexpr (std::is_floating_point_v<T>) {
        return data::ConfigValue(double(v));
    } else if constexpr (std::is_same_v<T, std::array<int, 2>>) {
        return data::ConfigValue(std::array<int64_t, 2>{v[0], v[1]});
    } else if constexpr (std::is_same_v<T, std::array<double, 2>>) {
        return data::ConfigValue(v);
    } else {
        return std::nullopt;
    }
}
template <class T>
constexpr bool kDatasetType = !std::is_same_v<T, WarmupSteps> && !std::is_same_v<T, gl::Backend> &&
                              !std::is_same_v<T, std::vector<std::string>> && !std::is_same_v<T, std::vector<double>>;
template <class T>
constexpr bool kList = std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<double>>;

// An int literal as the default of a float option: kohya's argparse leaves the default as it is
// written (not converted by type=float), and str() of it is "1", where a given 1 is "1.0".
bool int_literal(const std::string& text) {
    return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

template <class T>
Option declared(std::string name, Group group, std::string label, std::string help, T RunConfig::*m, T def,
                const std::string& def_text, const Traits& t) {
    using V = typename Optional<T>::Inner;
    const bool listed = !t.listed_reason.empty();
    GL_CHECK(!listed || Optional<T>::value, "options.def: ", name, ": listed() needs an optional field");
    GL_CHECK(!t.dataset_key || kDatasetType<V>, "options.def: ", name, ": its type is not a dataset setting");
    Option o;
    o.name = name;
    o.group = names_of(group).heading;
    o.section = names_of(group).section;
    o.kind = std::is_same_v<T, bool> ? OptionKind::flag : kList<T> || listed ? OptionKind::list : OptionKind::value;
    o.type = label;
    o.numeric = kNumber<V> || std::is_same_v<T, std::vector<double>>;
    o.help = std::move(help);
    if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>) {
        const auto [lo, hi] = int_bounds<V>(t);
        o.help += " " + gl::range_text(+lo, +hi);
    }
    if (t.choice_names) {
        std::string names;
        for (const std::string& n : t.choice_names()) names += (names.empty() ? "" : ", ") + n;
        o.help += ": " + names;
    }
    o.set = [m, name, label, t](RunConfig& c, const std::string& where, const OptionValues& v) {
        if constexpr (std::is_same_v<T, bool>) {
            c.*m = v.empty() || parse_bool(where, one(where, v));
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            c.*m = v;
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            std::vector<double> x;
            for (const std::string& s : v) x.push_back(read<double>(where, s, label, t));
            c.*m = std::move(x);
        } else if constexpr (Optional<T>::value) {
            if (!t.listed_reason.empty()) {
                // kohya's nargs="*": every value is converted, a bare option is None.
                std::vector<V> x;
                for (const std::string& s : v) x.push_back(read<V>(where, s, label, t));
                if (x.empty()) (c.*m).reset();
                else c.*m = x.front();
                if (x.size() > 1) c.note(gl::cat(where, " was given ", x.size(), " values: ", t.listed_reason));
            } else {
                c.*m = read<V>(where, one(where, v), label, t);
            }
        } else {
            c.*m = read<V>(where, one(where, v), label, t);
        }
        c.given.insert(name);
    };
    if (t.shown_text) o.show = t.shown_text;
    else o.show = [m](const RunConfig& c) { return show(c.*m); };
    o.ss_key = t.ss_key;
    o.ss_folders_only = t.ss_folders_only;
    const std::string kohya_default = std::is_floating_point_v<T> && int_literal(def_text) ? def_text : "";
    o.python = [m, name, def, kohya_default](const RunConfig& c) {
        if constexpr (std::is_floating_point_v<T>)
            if (!kohya_default.empty() && !c.given.count(name) && c.*m == def) return kohya_default;
        return python(c.*m);
    };
    if (t.dataset_key) {
        o.dataset_key = t.dataset_key->empty() ? name : *t.dataset_key;
        if constexpr (kDatasetType<V>) o.dataset_value = [m](const RunConfig& c) { return dataset_value(c.*m); };
    }
    return o;
}

Option alias(const std::vector<Option>& t, const std::string& name, const std::string& of, const std::string& help) {
    const auto target = std::find_if(t.begin(), t.end(), [&](const Option& o) { return o.name == of; });
    GL_CHECK(target != t.end(), "options.def: ", name, " is an alias of ", of, ", declared after it");
    Option o = *target;
    o.name = name;
    o.help = help;
    o.section.clear();
    o.ss_key.clear();
    o.dataset_key.clear();
    return o;
}

// kohya's default of an option sdtrain does not act on, as metadata holds it.
Option kohya_only(std::string name, OptionKind kind, const std::string& kohya_default, const Traits& t) {
    Option o;
    o.name = std::move(name);
    o.kind = kind;
    o.ss_key = t.ss_key;
    o.python = [kohya_default](const RunConfig&) { return kohya_default; };
    return o;
}

// A kohya option that changes nothing here: accepted, with a note in the plan.
Option noted(std::string name, OptionKind kind, std::string why, const Traits& t) {
    const std::string n = name;
    Option o = kohya_only(std::move(name), kind, kind == OptionKind::flag ? "False" : "None", t);
    o.group = kNotNeeded;
    o.type = kind == OptionKind::flag ? "" : "VALUE";
    o.help = why;
    o.set = [n, why](RunConfig& c, const std::string&, const OptionValues&) { c.note("--" + n + ": " + why); };
    return o;
}

// A kohya option sdtrain does not implement: refused unless its value is one that changes nothing
// (false, 0, empty, None, or kohya's default).
Option refused(std::string name, OptionKind kind, std::string why, const std::string& kohya_default, const Traits& t) {
    Option o = kohya_only(std::move(name), kind, kohya_default, t);
    o.set = [kind, why, kohya_default](RunConfig&, const std::string& w, const OptionValues& v) {
        const bool inert = kind == OptionKind::flag ? (!v.empty() && !parse_bool(w, v[0]))
                                                    : std::all_of(v.begin(), v.end(), [&](const std::string& s) {
                                                          return s.empty() || s == "0" || s == "0.0" || s == "None" ||
                                                                 s == kohya_default;
                                                      });
        if (!inert) gl::fail(w, ": kohya's option is not supported by sdtrain (", why, ")");
    };
    return o;
}

std::vector<Option> build() {
    std::vector<Option> t;
#define GL_OPTION(group, name, Type, def, label, help, traits) \
    t.push_back(declared<Type>(#name, Group::group, label, help, &RunConfig::name, Type{def}, #def, traits));
#define GL_ALIAS(name, of, help) t.push_back(alias(t, #name, #of, help));
#define GL_NOTED(name, kind, why, traits) t.push_back(noted(#name, OptionKind::kind, why, traits));
#define GL_REFUSED(name, kind, why, kohya_default, traits) \
    t.push_back(refused(#name, OptionKind::kind, why, kohya_default, traits));
#include "train/run/options.def"
    for (const Option& a : t)
        GL_CHECK(std::count_if(t.begin(), t.end(), [&](const Option& b) { return a.name == b.name; }) == 1,
                 "options.def: ", a.name, " is declared twice");
    return t;
}

}  // namespace

const std::vector<Option>& option_table() {
    static const std::vector<Option> t = build();
    return t;
}

const Option* find_option(const std::string& name) {
    for (const Option& o : option_table())
        if (o.name == name) return &o;
    return nullptr;
}

}  // namespace train
