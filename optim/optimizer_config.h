// The settings of one optimizer as kohya's sd-scripts takes them (--optimizer_type, --optimizer_args),
// parsed against that optimizer's descriptor (optim/descriptor.h).
//
//     optim::OptimizerConfig cfg = optim::parse_optimizer("Prodigy", {"d_coef=2", "betas=0.9,0.99"});
//     cfg.name();                 // "Prodigy"
//     cfg.beta2;                  // 0.99f: betas feed the hyper tensor's beta1 / beta2
//     cfg.number("d_coef");       // 2: every argument of the descriptor, given or defaulted
//     cfg.is_none("beta3");       // true: prodigyopt's default
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace optim {

struct OptimizerDef;

// What a Python literal in an optimizer argument may be (kohya passes each through ast.literal_eval).
enum class ArgType {
    number,          // 1e-8, 0.01, inf or float('inf')
    flag,            // True / False (any case)
    number_or_none,  // a number or None
    pair,            // two numbers: 0.9,0.99  (0.9, 0.99)  [0.9, 0.99]
    triple,          // three numbers, as pair: 0.98,0.92,0.99 (DAdaptAdan's betas)
    flag_or_none,    // True / False or None (torch's foreach)
};

// One parsed argument: n numbers in x (a flag is one number, 1 or 0; None is none with n = 0).
struct ArgValue {
    bool none = false;
    int n = 0;
    double x[3] = {0.0, 0.0, 0.0};
};

// One optimizer's settings: its descriptor, the constant slots of the per-step hyper tensor that every
// update op reads (fed by the arguments that name them: betas, eps, weight_decay, ...), and the value
// of every argument the descriptor lists, as given or as the Python class kohya instantiates for that
// name defaults it.
struct OptimizerConfig {
    OptimizerConfig();                                  // AdamW with torch.optim.AdamW's defaults
    explicit OptimizerConfig(const OptimizerDef& def);  // def's defaults

    const OptimizerDef* def = nullptr;
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // hyper slots (an optimizer may leave one unused)
    float weight_decay = 0.01f;                       // the default for groups that do not give their own
    std::map<std::string, ArgValue> values;           // every argument of def, by name
    std::vector<std::string> args;                    // the optimizer_args as given (recorded in state files)
    // What the run should show: the descriptor's note, and each argument given that changes nothing
    // here ("foreach: ...").
    std::vector<std::string> notes;

    const char* name() const;  // the descriptor's name, as state files record it: "AdamW8bit"
    // Typed reads of an argument of def (gl::Error when def has no such argument of that type).
    double number(const std::string& arg) const;  // number, or number_or_none that is not None
    bool flag(const std::string& arg) const;
    bool is_none(const std::string& arg) const;
    std::pair<double, double> pair(const std::string& arg) const;
    double triple(const std::string& arg, int i) const;  // number i (0, 1, 2) of a triple

private:
    const ArgValue& value(const std::string& arg, ArgType a, ArgType b) const;
};

// optimizer_type: a registered optimizer's name in any case ("AdamW", "AdamW8bit", "Lion", "Adafactor",
// "Prodigy") or the Python class path kohya would import for it ("torch.optim.AdamW",
// "bitsandbytes.optim.AdamW8bit", ...). optimizer_args: "name=value" as kohya's --optimizer_args, the
// names and defaults those of the Python class. Throws gl::Error naming an unsupported type (with the
// supported ones), an unknown (with the known ones) or repeated argument, or a bad value.
OptimizerConfig parse_optimizer(const std::string& type, const std::vector<std::string>& args);

}  // namespace optim
