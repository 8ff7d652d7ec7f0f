#include "lora/network_args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "ggml-lite/core/error.h"
#include "lora/block_args.h"

namespace lora {

namespace {

bool one_of(const std::string& v, std::initializer_list<const char*> set) {
    return std::any_of(set.begin(), set.end(), [&](const char* s) { return v == s; });
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

double arg_number(const std::string& key, const std::string& v) {
    try {
        size_t used = 0;
        const double x = std::stod(v, &used);
        if (used == v.size() && std::isfinite(x)) return x;
    } catch (const std::exception&) {
    }
    gl::fail("--network_args ", key, "=", v, ": not a number");
}

void check_rate(const std::string& name, double v) {
    GL_CHECK(std::isfinite(v) && v >= 0.0 && v < 1.0, "--", name, " must be in [0, 1), got ", v);
}

// A number the run computes in float: finite there, and not a nonzero value float rounds to 0.
void check_float(const std::string& name, double v, double lo) {
    const double size = std::fabs(v);
    GL_CHECK(std::isfinite(v) && v >= lo && size <= std::numeric_limits<float>::max() &&
                 (v == 0 || size >= std::numeric_limits<float>::denorm_min()),
             "--", name, " ", v, " must be a finite number >= ", lo, " that a 32-bit float holds (the run computes "
             "it in one)");
}

int arg_int(const std::string& key, const std::string& v) {  // Python's int() of the text
    const double x = arg_number(key, v);
    GL_CHECK(x == std::floor(x) && v.find_first_of(".eE") == std::string::npos && x >= 0 && x < 1e6,
             "--network_args ", key, "=", v, ": an integer in [0, 10^6) (LyCORIS reads it with int())");
    return int(x);
}

bool str_bool(const std::string& v) { return lower(v) != "false"; }  // LyCORIS's utils.str_bool

// ---- networks.lora ----

// kohya and LyCORIS read the keys they know and ignore the others: one note per key.
std::string ignored(const std::string& module, const std::string& key, const std::string& value) {
    return gl::cat("--network_args ", key, "=", value, ": ", module, " does not read this key, so it has no effect",
                   " (as ", module == "networks.lora" ? "kohya" : "LyCORIS", " ignores it; check its spelling)");
}

void kohya_lora(LoraConfig& c, const NetworkOptions& o) {
    bool conv_alpha_given = false;
    for (const auto& [key, value] : o.args) {
        if (is_block_arg(key)) continue;  // read below
        if (key == "conv_dim") {
            const double x = arg_number(key, value);
            GL_CHECK(x >= 1 && x == std::floor(x) && x < 1e6, "--network_args conv_dim must be an integer >= 1");
            c.conv_dim = int(x);
        } else if (key == "conv_alpha") {
            const double x = arg_number(key, value);
            check_float("network_args conv_alpha", x, 0);
            c.conv_alpha = float(x);
            conv_alpha_given = true;
        } else if (key == "rank_dropout" || key == "module_dropout" || key == "dropout") {
            const double x = arg_number(key, value);
            check_rate("network_args " + key, x);
            (key == "rank_dropout" ? c.rank_dropout : key == "module_dropout" ? c.module_dropout : c.dropout) = float(x);
        } else {
            c.notes.push_back(ignored("networks.lora", key, value));
        }
    }
    GL_CHECK(!conv_alpha_given || c.conv_dim > 0, "--network_args conv_alpha needs conv_dim");
    if (c.conv_dim > 0 && !conv_alpha_given) c.conv_alpha = 1.0f;  // networks.lora's default
    read_block_args(c, o.args, o.dim_from_weights);
}

// ---- lycoris.kohya ----

// Read by create_network but used by no type sdtrain trains (nor by any SD1.5 part): noted.
constexpr std::initializer_list<const char*> kInertLycorisArgs = {"block_size", "constraint", "constrain", "rescaled",
                                                                  "train_t5xxl"};
// Read by create_network and changing the network; sdtrain does not implement them.
constexpr std::initializer_list<const char*> kUnsupportedLycorisArgs = {"use_scalar", "train_norm", "bypass_mode",
                                                                        "rs_lora"};

void lycoris(LoraConfig& c, const NetworkOptions& o) {
    std::vector<std::pair<std::string, std::string>> rest;
    std::string algo = "lora";
    bool conv_dim_given = false, conv_alpha_given = false;
    std::vector<std::string> tucker_keys;
    for (const auto& [key, value] : o.args) {
        // Python's `x or default`: an empty value means the default.
        if (key == "algo") {
            algo = value.empty() ? "lora" : lower(value);
        } else if (key == "preset") {
            c.preset = value;
        } else if (key == "conv_dim") {
            if (!value.empty()) c.conv_dim = arg_int(key, value), conv_dim_given = true;
        } else if (key == "conv_alpha") {
            if (!value.empty()) {
                const double x = arg_number(key, value);
                check_float("network_args conv_alpha", x, 0);
                c.conv_alpha = float(x), conv_alpha_given = true;
            }
        } else if (key == "dropout" || key == "rank_dropout" || key == "module_dropout") {
            const double x = value.empty() ? 0.0 : arg_number(key, value);
            check_rate("network_args " + key, x);
            (key == "rank_dropout" ? c.rank_dropout : key == "module_dropout" ? c.module_dropout : c.dropout) = float(x);
        } else if (one_of(key, {"use_tucker", "use_cp", "use_conv_cp", "disable_conv_cp"})) {
            // The deprecation map renames each to use_tucker (disable_conv_cp=True turns Tucker on).
            c.tucker = c.tucker || str_bool(value);
        } else if (key == "dora_wd") {
            c.dora = str_bool(value);
        } else if (key == "wd_on_output") {
            c.dora_on_output = str_bool(value);
        } else if (one_of(key, kUnsupportedLycorisArgs)) {
            GL_CHECK(!str_bool(value), "--network_args ", key, "=", value, ": LyCORIS's ", key,
                     " is not supported by sdtrain");
        } else if (key.rfind("loraplus_", 0) == 0) {
            gl::fail("--network_args ", key, ": LoRA+ is not supported by sdtrain (LyCORIS applies it to lora_up only)");
        } else {
            rest.emplace_back(key, value);
        }
    }
    c.type = find_module_type(algo);
    std::string known;
    for (const ModuleType* t : module_types()) known += std::string(known.empty() ? "" : ", ") + t->algo();
    GL_CHECK(c.type != nullptr, "--network_args algo=", algo, ": sdtrain trains LyCORIS's ", known,
             " (locon = lora); not ", algo);
    GL_CHECK(lycoris_preset(*c.family, c.preset).has_value(), "--network_args preset=", c.preset, ": sdtrain knows LyCORIS's "
             "presets ", [] {
                 std::string s;
                 for (const std::string& n : lycoris_preset_names()) s += (s.empty() ? "" : ", ") + n;
                 return s;
             }(), " (preset files and ia3 are not supported)");
    // Each type's own args: the chosen type's are used, the others' checked and left unused, as
    // LyCORIS passes every arg to every module.
    c.type_args = c.type->parse_args(rest);
    for (const ModuleType* t : module_types())
        if (t != c.type) t->parse_args(rest);
    std::erase_if(rest, [&](const std::pair<std::string, std::string>& kv) {
        if (!one_of(kv.first, kInertLycorisArgs)) return false;
        c.notes.push_back("--network_args " + kv.first + ": LyCORIS's algos " + known + " do not use it; no effect");
        return true;
    });
    for (const auto& [key, value] : rest) c.notes.push_back(ignored("lycoris.kohya", key, value));
    // create_network: conv_dim = int(conv_dim or network_dim), conv_alpha = float(conv_alpha or network_alpha).
    if (!conv_dim_given) c.conv_dim = c.rank;
    if (!conv_alpha_given) c.conv_alpha = c.alpha;
    if (!lycoris_preset(*c.family, c.preset)->conv) c.conv_dim = 0;  // enable_conv False
    if (c.dropout > 0.0f)
        c.notes.push_back("network dropout (--network_dropout / dropout) has no effect in LyCORIS's weight-rebuild "
                          "forward (LyCORIS's kohya default), as in LyCORIS");
    if (c.tucker && c.conv_dim == 0)
        c.notes.push_back("use_tucker applies to k x k convs only, and this network has none (as in LyCORIS)");
}

}  // namespace

const std::vector<std::string>& network_modules() {
    static const std::vector<std::string> m = {"networks.lora", "lycoris.kohya"};
    return m;
}

LoraConfig network_config(const NetworkOptions& o) {
    LoraConfig c;
    c.family = o.family;
    c.network_module = o.module;
    c.rank = o.dim.value_or(4);
    c.alpha = float(o.alpha);
    c.dropout = float(o.dropout.value_or(0.0));
    c.args = o.args;
    if (o.module == "networks.lora") kohya_lora(c, o);
    else if (o.module == "lycoris.kohya") lycoris(c, o);
    else gl::fail("--network_module ", o.module, " is not supported: sdtrain trains networks.lora (LoRA; LoCon through "
                  "--network_args conv_dim=N conv_alpha=A) and lycoris.kohya (--network_args algo=<type>, dora_wd=True)");
    return c;
}

}  // namespace lora
