// An optimizer as a table entry: one file in optim/optimizers/ defines its OptimizerDef (names, its
// arguments with defaults and validation, and the hook that creates its state tensors and appends its
// update ops), and nothing else needs editing: CMake generates the registry's list from that folder.
//
// optim/optimizers/<name>.cpp defines
//     const optim::OptimizerDef& optim::optimizer_<name>();   // a function-local static
// where <name> is the file's stem. Optimizer (optim/optimizer.h) is generic over these: it adds the
// gradient statistics and one hyper input per parameter group, calls append, and then initialises,
// saves and restores whatever state append created.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "optim/optimizer_config.h"

namespace optim {

// One optimizer argument: its name as the Python class takes it, the literal type, the class's default
// (spelled as in its signature, parsed like a user's value), a check, and the hyper slots it feeds.
struct ArgDef {
    const char* name;
    ArgType type;
    const char* fallback;
    // nullptr when the value is acceptable, else what it must be ("must lie in [0, 1)").
    const char* (*check)(const ArgValue&) = nullptr;
    // The hyper slots its numbers set (x[0], x[1]); None sets 0.
    float OptimizerConfig::* feeds[2] = {nullptr, nullptr};
    // An argument of the Python class that changes nothing here (check limits it to such values):
    // accepted, and this note shown when given.
    const char* inert = nullptr;
};

// Checks shared by several optimizers; each applies to every number of the value (None passes).
const char* check_positive(const ArgValue& v);      // > 0 and finite
const char* check_unit_open(const ArgValue& v);     // [0, 1)
const char* check_unit_closed(const ArgValue& v);   // [0, 1]
const char* check_weight_decay(const ArgValue& v);  // [0, 1e6]

// How names and values are compared: ASCII lower case, and without surrounding spaces and tabs.
std::string lower(std::string s);
std::string trim(const std::string& s);

// The arguments most optimizers share, with that class's default.
inline ArgDef betas_arg(const char* fallback, const char* (*check)(const ArgValue&) = check_unit_open) {
    return {"betas", ArgType::pair, fallback, check, {&OptimizerConfig::beta1, &OptimizerConfig::beta2}};
}
inline ArgDef eps_arg(const char* fallback) {
    return {"eps", ArgType::number, fallback, check_positive, {&OptimizerConfig::eps}};
}
inline ArgDef weight_decay_arg(const char* fallback) {
    return {"weight_decay", ArgType::number, fallback, check_weight_decay, {&OptimizerConfig::weight_decay}};
}

// The arguments of torch's optimizers (torch_inert_args: foreach, fused, capturable, differentiable,
// maximize=False; with_amsgrad adds amsgrad=False) and of bitsandbytes' (bnb_inert_args: amsgrad=False,
// percentile_clipping=100, block_wise=True, min_8bit_size=4096, optim_bits, args=None, is_paged) that
// change nothing here, appended to `args`.
std::vector<ArgDef> torch_inert_args(std::vector<ArgDef> args, bool with_amsgrad = true);
std::vector<ArgDef> bnb_inert_args(std::vector<ArgDef> args);

// How a state tensor starts (init_state) and restarts when it is scratch (after load_state too).
struct StateInit {
    float fill = 0.0f;                   // every element (8-bit codes: the code of zero)
    std::vector<float> values;           // or these, one per element
    gl::ValueId copy_of = gl::kNoValue;  // or a copy of this parameter (Prodigy's p0)

    static StateInit filled(float v) {
        StateInit i;
        i.fill = v;
        return i;
    }
    static StateInit exactly(std::vector<float> v) {
        StateInit i;
        i.values = std::move(v);
        return i;
    }
    static StateInit copy(gl::ValueId param) {
        StateInit i;
        i.copy_of = param;
        return i;
    }
};

// A state leaf the optimizer owns; saved ones go to state files by name.
struct StateSlot {
    gl::ValueId id;
    std::string name;
    gl::DType dtype;
    gl::Shape shape;
    StateInit init;
    bool saved = true;  // false: per-step scratch
};

// A schedule-free param (eval weights x = lerp(y, z, weight), y the param the step graph holds):
// what Optimizer::to_eval and to_train swap.
struct EvalPair {
    gl::ValueId param, z;
    float weight;
};

// Where an optimizer that estimates a step size d (Prodigy, the D-Adaptation family) keeps it: one
// float of a shared state tensor, or a pair hi + lo (the D-Adaptation sum rules' running doubles).
// kohya logs d * lr per group (lr/d*lr/<group>): Optimizer::d_estimate reads it.
struct DEstimate {
    gl::ValueId state = gl::kNoValue;
    int at = 0;
    bool pair = false;
};

struct UpdateGroup {
    std::string name;
    double lr;
    gl::ValueId hyper;  // f32 [kHyperSize] input, written by Optimizer::set_step
};

struct UpdateParam {
    gl::ValueId param, grad;  // f32 leaf (g.param) and its f32 dense gradient
    gl::ValueId hyper;        // its group's
    gl::Shape torch_shape;    // the shape PyTorch holds it in (nd = 0: the graph's; Optimizer::add_group)
    size_t group;             // index into UpdateBuilder::groups
};

// What an optimizer's append hook builds with: every parameter that has a gradient, in group order,
// and the way to create state leaves, which the Optimizer then initialises, saves and restores.
class UpdateBuilder {
public:
    UpdateBuilder(gl::Graph& graph, const OptimizerConfig& config, gl::ValueId gstat_value,
                  std::vector<UpdateGroup> update_groups, std::vector<UpdateParam> update_params,
                  std::vector<StateSlot>& slots, std::vector<EvalPair>& eval_pairs)
        : g(graph), cfg(config), gstat(gstat_value), groups(std::move(update_groups)),
          params(std::move(update_params)), slots_(slots), eval_pairs_(eval_pairs) {}

    gl::Graph& g;
    const OptimizerConfig& cfg;
    const gl::ValueId gstat;  // every update op's trailing input (grad_stats)
    const std::vector<UpdateGroup> groups;
    const std::vector<UpdateParam> params;
    // Set by an optimizer with a d estimate (every group shares it, as in dadaptation and prodigyopt).
    DEstimate d_estimate;

    // The params of group `group`, in order (the tensors a multi-tensor step takes at once).
    std::vector<UpdateParam> of_group(size_t group) const {
        std::vector<UpdateParam> r;
        for (const UpdateParam& p : params)
            if (p.group == group) r.push_back(p);
        return r;
    }

    // State of one parameter, named "optim.<param>.<suffix>".
    gl::ValueId state(const UpdateParam& p, const std::string& suffix, gl::DType t, const gl::Shape& s,
                      StateInit init = {});
    // State shared by all parameters, named "optim.<suffix>".
    gl::ValueId shared_state(const std::string& suffix, gl::DType t, const gl::Shape& s, StateInit init = {});
    // Per-step scratch, named "optim.<suffix>": not saved; re-initialised after load_state.
    gl::ValueId scratch(const std::string& suffix, gl::DType t, const gl::Shape& s, StateInit init = {});
    // Schedule-free: the weights to save, sample and validate are not p but lerp(p, z, weight)
    // (schedulefree: 1 - 1 / beta1, from the argument's double as Python computes it).
    void eval_average(const UpdateParam& p, gl::ValueId z, float weight) { eval_pairs_.push_back({p.param, z, weight}); }

private:
    gl::ValueId add(const std::string& name, gl::DType t, const gl::Shape& s, StateInit init, bool saved);
    std::vector<StateSlot>& slots_;
    std::vector<EvalPair>& eval_pairs_;
};

struct OptimizerDef {
    const char* name;                      // kohya's --optimizer_type (any case); state files record it
    std::vector<const char*> class_paths;  // the Python classes kohya would import for it, also accepted
    std::vector<ArgDef> args;
    void (*check)(const OptimizerConfig&);  // across arguments, after parsing (nullptr: none)
    // State leaves and update nodes for every parameter; the node order is the update order.
    void (*append)(UpdateBuilder&);
    // What the run shows when this optimizer is selected (PagedAdamW8bit: it runs as AdamW8bit).
    const char* note = nullptr;
    // ss_optimizer's class (module.name, as kohya's metadata writes it) when no class path gives it:
    // SGDNesterov is torch.optim.sgd.SGD with nesterov=True.
    const char* kohya_class = nullptr;
    // "name=value" that kohya adds to the class's arguments when not given, as its metadata then
    // shows it (SGDNesterov: momentum=0.9).
    const char* kohya_added_arg = nullptr;
};

// Every registered optimizer, ordered by file name; the one that a name or class path selects (in any
// case; gl::Error naming the type and the supported ones otherwise).
const std::vector<const OptimizerDef*>& optimizer_defs();
const OptimizerDef& find_optimizer(const std::string& type);

}  // namespace optim
