// The optimizer update inside the step graph: optim::Optimizer (any of its kinds) over the LoRA
// parameter groups, plus what training adds around it:
// - gradient accumulation over micro-batches: with accum > 1 every gradient is added into a
//   persistent f32 accumulator (gl::accumulate: reset on the first micro-step, weight 1/accum, so
//   the update sees the mean gradient as kohya / accelerate do), and the optimizer reads the
//   accumulators. One graph serves every micro-step;
// - a skip probe: the gradient statistics (gl::grad_stats) also read a one-element "gradient"
//   probe = 0 * loss + skip, where skip f32 [1] is written per run: 0 on a final micro-step, NaN on
//   the others. A NaN/inf loss or a host skip makes the step's statistics non-finite, and every
//   update op then changes nothing (parameters and state bit-identical). The probe belongs to a
//   one-element parameter ("train.skip_probe") in a group of its own at lr 0, which no op moves;
// - data parallelism (reduce = true): the gradients the optimizer reads (the accumulators with
//   accum > 1) and the probe go through one gl::all_reduce, weighted by the f32 [1] input
//   "train.dist_share" (this rank's share of the global batch, set_share), before the gradient
//   statistics and the update: every rank reads the global batch's mean gradient and applies the
//   same update, and a NaN / skip on any rank skips the step on all.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "optim/optimizer.h"

namespace train {

// A parameter group: its own learning rate (kohya's unet_lr / text_encoder_lr).
struct ParamGroup {
    std::string name;
    std::vector<gl::ValueId> params, grads;  // f32, grads[i] of params[i]
    float lr = 1e-4f;
    std::vector<gl::Shape> torch_shapes;  // optional, parallel to params: see optim::Optimizer::add_group
};

// What one run reported through the step's gradient statistics.
struct UpdateReport {
    bool applied = false;    // the parameters were updated
    bool nonfinite = false;  // gradients (or the loss) held inf/NaN, or the run was told to skip
    double grad_norm = 0.0;  // global L2 norm of the unscaled (accumulated) gradients
};

class Update {
public:
    // Appends the update to g after gl::backward. loss_scale: the f32 [1] input the loss was
    // multiplied by; loss: the unscaled scalar loss (the probe watches it); max_grad_norm <= 0:
    // no clipping.
    Update(gl::Graph& g, std::vector<ParamGroup> groups, const optim::OptimizerConfig& cfg, float max_grad_norm,
           int accum, gl::ValueId loss_scale, gl::ValueId loss, bool reduce = false);

    // Zeroes the optimizer state and the accumulators (write the parameters first: Prodigy copies them).
    void init_state(gl::Runtime& rt);
    // Writes this run's inputs for micro-step `micro` of `accum`; lr_factor scales every group's
    // lr (LR schedules). skip: no update even on the final micro-step (evaluation runs). last: the
    // update applies after this micro-step although fewer than `accum` ran (the end of an epoch,
    // as accelerate does: the accumulated gradients keep their 1/accum weights).
    void prepare(gl::Runtime& rt, int micro, double lr_factor = 1.0, bool skip = false, bool last = false);
    // Data parallelism: this rank's weight for the next micro-batches (its images / the global
    // micro-batch's; 1 / world size for even slices), kept until changed; init_state writes 1.
    // Without accumulation it weights the reduction; with it, each micro-batch's addition into
    // the accumulators (share / accum, written by prepare), and the reduction sums them as they are,
    // so micro-batches of different shares (a short one at a bucket's end) weigh as they would in
    // one process.
    void set_share(gl::Runtime& rt, float share);
    bool reduces() const { return share_ != gl::kNoValue; }
    // After every run: reads the statistics; `apply` says whether the run was prepared to apply
    // (final micro-step, not skipped).
    UpdateReport finish_run(gl::Runtime& rt, bool apply);

    int accum() const { return accum_; }
    const std::vector<ParamGroup>& groups() const { return groups_; }
    optim::Optimizer& optimizer() { return opt_; }
    const optim::Optimizer& optimizer() const { return opt_; }
    const std::vector<gl::ValueId>& accumulators() const { return accum_values_; }  // parallel to the groups' params

private:
    std::vector<ParamGroup> groups_;
    optim::Optimizer opt_;
    int accum_ = 1;
    std::vector<gl::ValueId> accum_values_;
    gl::ValueId ctl_ = gl::kNoValue, skip_ = gl::kNoValue, probe_param_ = gl::kNoValue, share_ = gl::kNoValue;
    float share_value_ = 1.0f;
};

}  // namespace train
