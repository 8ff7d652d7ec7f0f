// parse_optimizer: kohya's --optimizer_type / --optimizer_args into an OptimizerConfig. Defaults are
// those of the Python class kohya instantiates for each name; kohya passes only the args the user
// gives, so a missing arg keeps that class's default.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "ggml-lite/core/error.h"
#include "optim/optimizer.h"

namespace optim {

const char* optimizer_kind_name(OptimizerKind k) {
    switch (k) {
        case OptimizerKind::AdamW: return "AdamW";
        case OptimizerKind::AdamW8bit: return "AdamW8bit";
        case OptimizerKind::Lion: return "Lion";
        case OptimizerKind::Adafactor: return "Adafactor";
        case OptimizerKind::Prodigy: return "Prodigy";
    }
    return "?";
}

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

struct Arg {
    std::string key, value;
    [[noreturn]] void bad(const std::string& why) const {
        gl::fail("optimizer_args: ", key, "=", value, ": ", why);
    }
    double number() const {
        std::string v = lower(trim(value));
        if (v == "inf" || v == "float('inf')" || v == "float(\"inf\")") return INFINITY;
        char* end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        if (v.empty() || end != v.c_str() + v.size() || std::isnan(d)) bad("not a number");
        return d;
    }
    bool boolean() const {
        std::string v = lower(trim(value));
        if (v == "true") return true;
        if (v == "false") return false;
        bad("expected True or False");
    }
    bool is_none() const { return lower(trim(value)) == "none"; }
    // "a,b", "(a, b)" or "[a, b]".
    std::pair<double, double> pair() const {
        std::string v = trim(value);
        if (v.size() >= 2 && ((v.front() == '(' && v.back() == ')') || (v.front() == '[' && v.back() == ']')))
            v = v.substr(1, v.size() - 2);
        size_t comma = v.find(',');
        if (comma == std::string::npos || v.find(',', comma + 1) != std::string::npos) bad("expected two numbers: a,b");
        Arg a{key, v.substr(0, comma)}, b{key, v.substr(comma + 1)};
        return {a.number(), b.number()};
    }
};

void check_range(const Arg& a, double v, double lo, double hi, bool hi_open) {
    if (!(v >= lo && (hi_open ? v < hi : v <= hi)))
        a.bad(gl::cat("must lie in [", lo, ", ", hi, hi_open ? ")" : "]"));
}

}  // namespace

OptimizerConfig parse_optimizer(const std::string& type, const std::vector<std::string>& args) {
    OptimizerConfig c;
    const std::string t = lower(trim(type));
    if (t == "adamw") c.kind = OptimizerKind::AdamW;
    else if (t == "adamw8bit") c.kind = OptimizerKind::AdamW8bit;
    else if (t == "lion") c.kind = OptimizerKind::Lion;
    else if (t == "adafactor") c.kind = OptimizerKind::Adafactor;
    else if (t == "prodigy") c.kind = OptimizerKind::Prodigy;
    else gl::fail("optimizer_type '", type, "' is not supported (AdamW, AdamW8bit, Lion, Adafactor, Prodigy)");

    std::set<std::string> known;
    switch (c.kind) {
        case OptimizerKind::AdamW:
        case OptimizerKind::AdamW8bit: known = {"weight_decay", "betas", "eps"}; break;
        case OptimizerKind::Lion:
            known = {"weight_decay", "betas"};
            c.beta2 = 0.99f;
            c.weight_decay = 0.0f;
            break;
        case OptimizerKind::Adafactor:
            known = {"weight_decay", "relative_step", "scale_parameter", "warmup_init", "beta1", "eps", "clip_threshold",
                     "decay_rate"};
            c.weight_decay = 0.0f;
            c.eps = 1e-30f;
            c.beta1 = 0.0f;
            break;
        case OptimizerKind::Prodigy:
            known = {"weight_decay", "betas", "beta3", "eps", "d0", "d_coef", "growth_rate", "decouple",
                     "use_bias_correction", "safeguard_warmup", "slice_p"};
            c.weight_decay = 0.0f;
            break;
    }
    std::set<std::string> seen;
    for (const std::string& raw : args) {
        size_t eq = raw.find('=');
        if (eq == std::string::npos) gl::fail("optimizer_args: '", raw, "' is not name=value");
        const Arg a{trim(raw.substr(0, eq)), trim(raw.substr(eq + 1))};
        if (!known.count(a.key)) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            gl::fail("optimizer_args: unknown argument '", a.key, "' for ", optimizer_kind_name(c.kind), " (known: ", list,
                     ")");
        }
        if (!seen.insert(a.key).second) gl::fail("optimizer_args: '", a.key, "' given twice");
        const std::string& k = a.key;
        if (k == "weight_decay") {
            double v = a.number();
            check_range(a, v, 0.0, 1e6, false);
            c.weight_decay = float(v);
        } else if (k == "betas") {
            auto [b1, b2] = a.pair();
            check_range(a, b1, 0.0, 1.0, c.kind != OptimizerKind::Lion);
            check_range(a, b2, 0.0, 1.0, c.kind != OptimizerKind::Lion);
            c.beta1 = float(b1);
            c.beta2 = float(b2);
        } else if (k == "eps" && c.kind == OptimizerKind::Adafactor) {
            auto [e1, e2] = a.pair();
            if (!(e1 >= 0 && e2 > 0 && std::isfinite(e1) && std::isfinite(e2))) a.bad("eps1 must be >= 0 and eps2 > 0");
            c.eps = float(e1);
            c.adafactor.eps2 = float(e2);
        } else if (k == "eps") {
            double v = a.number();
            if (!(v > 0 && std::isfinite(v))) a.bad("must be positive");
            c.eps = float(v);
        } else if (k == "relative_step") {
            c.adafactor.relative_step = a.boolean();
        } else if (k == "scale_parameter") {
            c.adafactor.scale_parameter = a.boolean();
        } else if (k == "warmup_init") {
            c.adafactor.warmup_init = a.boolean();
        } else if (k == "beta1") {
            c.adafactor_first_moment = !a.is_none();
            if (c.adafactor_first_moment) {
                double v = a.number();
                check_range(a, v, 0.0, 1.0, true);
                c.beta1 = float(v);
            }
        } else if (k == "clip_threshold") {
            double v = a.number();
            if (!(v > 0 && std::isfinite(v))) a.bad("must be positive");
            c.adafactor.clip_threshold = float(v);
        } else if (k == "decay_rate") {
            double v = a.number();
            if (!(v < 0 && std::isfinite(v))) a.bad("must be negative (beta2_t = 1 - t^decay_rate)");
            c.adafactor.decay_rate = float(v);
        } else if (k == "beta3") {
            if (!a.is_none()) {
                double v = a.number();
                check_range(a, v, 0.0, 1.0, true);
                c.prodigy.beta3 = float(v);
            }
        } else if (k == "d0" || k == "d_coef") {
            double v = a.number();
            if (!(v > 0 && std::isfinite(v))) a.bad("must be positive");
            (k == "d0" ? c.prodigy.d0 : c.prodigy.d_coef) = float(v);
        } else if (k == "growth_rate") {
            double v = a.number();
            if (!(v >= 1)) a.bad("must be >= 1 (inf: unbounded)");
            c.prodigy.growth_rate = float(v);
        } else if (k == "decouple") {
            c.prodigy.decouple = a.boolean();
        } else if (k == "use_bias_correction") {
            c.prodigy.use_bias_correction = a.boolean();
        } else if (k == "safeguard_warmup") {
            c.prodigy.safeguard_warmup = a.boolean();
        } else if (k == "slice_p") {
            if (a.number() != 1.0) a.bad("only slice_p=1 (every element) is supported");
        }
        c.args.push_back(a.key + "=" + a.value);
    }
    if (c.kind == OptimizerKind::Adafactor && c.adafactor.warmup_init && !c.adafactor.relative_step)
        gl::fail("optimizer_args: warmup_init=True requires relative_step=True (as transformers' Adafactor)");
    return c;
}

}  // namespace optim
