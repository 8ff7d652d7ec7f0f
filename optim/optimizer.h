// The optimizer of a training step, host side: takes kohya-style settings (optim/optimizer_config.h),
// appends the update ops of the selected optimizer (its descriptor in optim/optimizers/) to the
// step's graph after gl::backward, owns their state leaves, writes the per-step hyper tensors, and
// saves / restores the state for resume. Nothing here knows one optimizer from another.
//
// Use (after gl::backward, before planning):
//     optim::OptimizerConfig cfg = optim::parse_optimizer("AdamW8bit", {"weight_decay=0.01", "betas=0.9,0.99"});
//     optim::Optimizer opt(cfg);
//     opt.add_group(g, "unet", unet_params, unet_grads, 1e-4);      // grads parallel to params
//     opt.add_group(g, "text_encoder", te_params, te_grads, 5e-5);  // its own lr (and weight decay)
//     opt.finish(g, loss_scale_input, /*max_grad_norm*/ 1.0f);      // grad_stats + update nodes
//     ... plan, make the runtime, write the params ...
//     opt.init_state(rt);                                            // zeros (Prodigy: p0 = params)
//     each step:  scaler.write(rt, loss_scale_input);                // fp16 only
//                 opt.set_step(rt, opt.next_step(), schedule.multiplier(global_step));
//                 rt.run();
//                 optim::StepResult r = opt.after_step(rt);           // one 16-byte read
//                 scaler.update(r.nonfinite);
//     opt.save_state(path, rt, &scaler, {{"ss_steps", "..."}}); opt.load_state(path, rt, &scaler);
//
// Every update op takes the step's gstat (ops/optim_types.h): gradients are unscaled by the loss scale
// and clipped by global norm inside the graph, and a step whose gradients hold inf/NaN changes no
// parameter and no state (after_step reports it skipped; the optimizer's own step count, used for
// bias corrections, then does not advance, as torch's GradScaler skipping optimizer.step()).
#pragma once
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/runtime.h"
#include "optim/descriptor.h"
#include "optim/optimizer_config.h"

namespace optim {

struct StepResult {
    bool skipped = false;    // the update ops changed nothing (non-finite gradients)
    bool nonfinite = false;  // gradients (as scaled by the loss scale) held inf/NaN
    float grad_norm = 0;     // global L2 norm of the unscaled gradients, before clipping
};

class LossScaler;

class Optimizer {
public:
    explicit Optimizer(OptimizerConfig cfg);

    // A parameter group: params (f32 leaves made with g.param) and their gradients (same order;
    // kNoValue: the param gets no update, as a None .grad in PyTorch). weight_decay < 0: the
    // config's. torch_shapes (empty, or one per param; nd = 0: the graph's shape): the shape
    // PyTorch holds a param in where it differs from the graph's with the same element order —
    // Adafactor factors by it, as kohya's does (a 1x1-conv LoRA weight [r, in] is [r, in, 1, 1]
    // there). Before finish().
    void add_group(gl::Graph& g, const std::string& name, const std::vector<gl::ValueId>& params,
                   const std::vector<gl::ValueId>& grads, double lr, float weight_decay = -1.0f,
                   const std::vector<gl::Shape>& torch_shapes = {});
    // Appends grad_stats over every group's gradients (loss_scale: an f32 [1] input the loss was
    // multiplied by, or kNoValue; max_grad_norm <= 0: no clipping) and the update nodes, creating the
    // state leaves ("optim.<param>.<slot>") and one hyper input per group. Throws what the
    // optimizer refuses (Prodigy: groups with different non-zero learning rates, as prodigyopt).
    void finish(gl::Graph& g, gl::ValueId loss_scale = gl::kNoValue, float max_grad_norm = 0.0f);

    // Writes every state tensor's initial value (zeros; 8-bit: the code of zero; Prodigy copies each
    // param into its p0, so write the params first). Resets the step count.
    void init_state(gl::Runtime& rt);
    // Writes every group's hyper for optimizer step `step` (1-based; bias corrections and Adafactor's
    // schedule use it) with lr = group lr * lr_multiplier. Call before each run.
    void set_step(gl::Runtime& rt, int64_t step, double lr_multiplier = 1.0);
    // After each run: reads gstat once; counts the step when it was applied.
    StepResult after_step(gl::Runtime& rt);
    bool last_step_skipped() const { return last_.skipped; }
    int64_t steps_applied() const { return steps_applied_; }
    int64_t next_step() const { return steps_applied_ + 1; }
    // Several optimizers over one copy of state (a run's step graphs, one per bucket shape, on one
    // shared memory) follow one count: the run sets it before each graph's step.
    void set_steps_applied(int64_t n);

    // Every state tensor by name, the step count, the loss scaler's state (when given), the optimizer's
    // name and args, plus `extra` metadata; written atomically (temporary file + rename).
    void save_state(const std::string& path, const gl::Runtime& rt, const LossScaler* scaler = nullptr,
                    const std::map<std::string, std::string>& extra = {}) const;
    // Validates the file against this optimizer (name, tensor names, shapes, dtypes: every mismatch is
    // a gl::Error naming the file and what differs; so is a NaN / inf in a state tensor, a bad loss
    // scale or growth tracker), then restores the state bytes exactly, the step count and the scaler.
    // Nothing is restored when anything is refused.
    // Optimizer args may change on resume (betas, weight decay, ...: the state still fits), so a
    // difference is not an error; the return value names it ("" when the args are the same, in
    // any order) for the caller to show.
    std::string load_state(const std::string& path, gl::Runtime& rt, LossScaler* scaler = nullptr);

    // Schedule-free optimizers (AdamWScheduleFree, SGDScheduleFree) train at y, the params the step
    // graph holds, while the weights to save, sample and validate are x = lerp(y, z, 1 - 1 / beta1), as
    // schedulefree's optimizer.eval() sets them (in f32, torch.lerp's formula). to_eval writes x into the params and keeps y on the
    // host; to_train writes y back bit for bit (schedulefree lerps back, which rounds). Both are no-ops
    // for other optimizers and when already in that mode. Call between steps; a run in eval mode
    // may evaluate (a validation pass skips its update) but must not apply a step.
    bool has_eval_weights() const { return !eval_pairs_.empty(); }
    void to_eval(gl::Runtime& rt);
    void to_train(gl::Runtime& rt);
    bool in_eval() const { return !train_weights_.empty(); }

    // Prodigy's and the D-Adaptation optimizers' step-size estimate d (shared by every group) as the
    // last step left it; nullopt for the others. kohya logs d * lr of each group (lr/d*lr/...).
    std::optional<double> d_estimate(const gl::Runtime& rt) const;

    const OptimizerConfig& config() const { return cfg_; }
    gl::ValueId gstat() const { return gstat_; }
    // The state leaves that save_state writes (scratch excluded).
    std::vector<gl::ValueId> state_values() const;

private:
    struct Group {
        std::string name;
        std::vector<gl::ValueId> params, grads;
        double lr;
        float weight_decay;
        gl::ValueId hyper = gl::kNoValue;
        std::vector<gl::Shape> torch_shapes;  // parallel to params (nd = 0: the graph's)
    };

    OptimizerConfig cfg_;
    std::vector<Group> groups_;
    std::vector<StateSlot> slots_;  // what the descriptor's append created, in creation order
    std::vector<EvalPair> eval_pairs_;
    DEstimate d_estimate_;
    std::vector<std::vector<float>> train_weights_;  // y of every eval pair while in eval mode
    gl::ValueId gstat_ = gl::kNoValue;
    bool finished_ = false;
    int64_t steps_applied_ = 0;
    StepResult last_;
};

// While alive, the params hold the optimizer's eval weights (Optimizer::to_eval; nothing changes for
// an optimizer without them or one already in eval mode, which the outer holder restores). Leaving
// the scope normally restores y; unwinding from an exception leaves them (the run is ending).
class EvalWeights {
public:
    EvalWeights(Optimizer& o, gl::Runtime& rt) : o_(o), rt_(rt), switched_(o.has_eval_weights() && !o.in_eval()) {
        o_.to_eval(rt_);
    }
    EvalWeights(const EvalWeights&) = delete;
    EvalWeights& operator=(const EvalWeights&) = delete;
    ~EvalWeights() noexcept(false) {
        if (switched_ && std::uncaught_exceptions() == unwinding_) o_.to_train(rt_);
    }

private:
    Optimizer& o_;
    gl::Runtime& rt_;
    bool switched_;
    int unwinding_ = std::uncaught_exceptions();
};

// fp16 dynamic loss scaling as torch.cuda.amp.GradScaler: the loss is multiplied by scale() (the
// graph reads it from an f32 [1] input written each step); a step whose gradients overflow is
// skipped (the optimizer ops see gstat's flag) and the scale multiplied by backoff_factor; after
// growth_interval consecutive good steps it is multiplied by growth_factor.
class LossScaler {
public:
    struct Options {
        double init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5;
        int64_t growth_interval = 2000;
    };
    LossScaler() : LossScaler(Options{}) {}
    explicit LossScaler(Options o);
    double scale() const { return scale_; }
    int64_t growth_tracker() const { return tracker_; }
    // Writes the scale into the graph's loss-scale input (before each run).
    void write(gl::Runtime& rt, gl::ValueId loss_scale_input) const;
    // After each run, with StepResult::nonfinite.
    void update(bool found_nonfinite);
    // Resume: throws gl::Error unless restorable(scale, tracker) is empty.
    void restore(double scale, int64_t tracker);
    // "" when scale is positive and finite and tracker in [0, growth_interval), else what is wrong.
    std::string restorable(double scale, int64_t tracker) const;

private:
    Options o_;
    double scale_;
    int64_t tracker_ = 0;
};

}  // namespace optim
