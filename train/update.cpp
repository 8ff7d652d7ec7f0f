#include "train/update.h"

#include <cmath>
#include <limits>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"

namespace train {

using gl::ValueId;

Update::Update(gl::Graph& g, std::vector<ParamGroup> groups, const optim::OptimizerConfig& cfg, float max_grad_norm,
               int accum, ValueId loss_scale, ValueId loss)
    : groups_(std::move(groups)), opt_(cfg), accum_(accum) {
    GL_CHECK(accum_ >= 1, "update: gradient accumulation steps must be >= 1, got ", accum_);
    GL_CHECK(!groups_.empty(), "update: no parameter groups");
    if (accum_ > 1) ctl_ = g.input("train.accum_ctl", gl::DType::f32, {2});
    for (ParamGroup& grp : groups_) {
        GL_CHECK(grp.params.size() == grp.grads.size() && !grp.params.empty(), "update: group ", grp.name,
                 " needs one gradient per parameter and at least one parameter");
        std::vector<ValueId> read;  // what the optimizer reads as each parameter's gradient
        for (size_t i = 0; i < grp.params.size(); i++) {
            const ValueId p = grp.params[i], gr = grp.grads[i];
            GL_CHECK(gr != gl::kNoValue, "update: ", g.describe(p), " has no gradient (is it reached from the loss?)");
            if (accum_ == 1) {
                read.push_back(gr);
                continue;
            }
            ValueId acc = g.state("train." + g.v(p).name + ".grad_accum", gl::DType::f32, g.shape(p));
            accum_values_.push_back(acc);
            gl::accumulate(g, acc, gr, ctl_);
            read.push_back(acc);
        }
        opt_.add_group(g, grp.name, grp.params, read, grp.lr, -1.0f, grp.torch_shapes);
    }
    skip_ = g.input("train.skip", gl::DType::f32, {1});
    probe_param_ = g.param("train.skip_probe", gl::DType::f32, {1});
    ValueId probe = gl::add(g, gl::reshape(g, gl::scale(g, gl::cast(g, loss, gl::DType::f32), 0.0f), {1}), skip_);
    opt_.add_group(g, "train.skip_probe", {probe_param_}, {probe}, 0.0, 0.0f);
    opt_.finish(g, loss_scale, max_grad_norm);
}

void Update::init_state(gl::Runtime& rt) {
    const gl::Graph& g = rt.plan().graph;
    rt.write_f32(probe_param_, {0.0f});
    for (ValueId a : accum_values_) rt.write_f32(a, std::vector<float>(size_t(g.v(a).numel()), 0.0f));
    opt_.init_state(rt);
}

void Update::prepare(gl::Runtime& rt, int micro, double lr_factor, bool skip, bool last) {
    GL_CHECK(micro >= 0 && micro < accum_, "update: micro-step ", micro, " outside [0, ", accum_, ")");
    opt_.set_step(rt, opt_.next_step(), lr_factor);
    if (ctl_ != gl::kNoValue) rt.write_f32(ctl_, {micro == 0 ? 1.0f : 0.0f, float(1.0 / double(accum_))});
    const bool apply = (micro == accum_ - 1 || last) && !skip;
    rt.write_f32(skip_, {apply ? 0.0f : std::numeric_limits<float>::quiet_NaN()});
}

UpdateReport Update::finish_run(gl::Runtime& rt, bool apply) {
    const optim::StepResult s = opt_.after_step(rt);
    UpdateReport r;
    r.nonfinite = s.nonfinite;
    r.applied = !s.skipped;
    r.grad_norm = s.grad_norm;
    GL_CHECK(apply || !r.applied, "update: a run prepared to skip applied its update (the skip probe failed)");
    return r;
}

}  // namespace train
