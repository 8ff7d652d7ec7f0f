#include "train/update.h"

#include <cmath>
#include <limits>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"

namespace train {

using gl::ValueId;

Update::Update(gl::Graph& g, std::vector<ParamGroup> groups, const optim::OptimizerConfig& cfg, float max_grad_norm,
               int accum, ValueId loss_scale, ValueId loss, bool reduce)
    : groups_(std::move(groups)), opt_(cfg), accum_(accum) {
    GL_CHECK(accum_ >= 1, "update: gradient accumulation steps must be >= 1, got ", accum_);
    GL_CHECK(!groups_.empty(), "update: no parameter groups");
    if (accum_ > 1) ctl_ = g.input("train.accum_ctl", gl::DType::f32, {2});
    std::vector<std::vector<ValueId>> reads(groups_.size());  // what the optimizer reads as each gradient
    for (size_t gi = 0; gi < groups_.size(); gi++) {
        ParamGroup& grp = groups_[gi];
        GL_CHECK(grp.params.size() == grp.grads.size() && !grp.params.empty(), "update: group ", grp.name,
                 " needs one gradient per parameter and at least one parameter");
        for (size_t i = 0; i < grp.params.size(); i++) {
            const ValueId p = grp.params[i], gr = grp.grads[i];
            GL_CHECK(gr != gl::kNoValue, "update: ", g.describe(p), " has no gradient (is it reached from the loss?)");
            if (accum_ == 1) {
                reads[gi].push_back(gr);
                continue;
            }
            ValueId acc = g.state("train." + g.v(p).name + ".grad_accum", gl::DType::f32, g.shape(p));
            accum_values_.push_back(acc);
            gl::accumulate(g, acc, gr, ctl_);
            reads[gi].push_back(acc);
        }
    }
    skip_ = g.input("train.skip", gl::DType::f32, {1});
    probe_param_ = g.param("train.skip_probe", gl::DType::f32, {1});
    ValueId probe = gl::add(g, gl::reshape(g, gl::scale(g, gl::cast(g, loss, gl::DType::f32), 0.0f), {1}), skip_);
    if (reduce) {
        share_ = g.input("train.dist_share", gl::DType::f32, {1});
        std::vector<ValueId> all;
        for (const auto& r : reads) all.insert(all.end(), r.begin(), r.end());
        all.push_back(probe);
        const std::vector<ValueId> summed = gl::all_reduce(g, all, share_);
        size_t at = 0;
        for (auto& r : reads)
            for (ValueId& v : r) v = summed[at++];
        probe = summed[at];
    }
    for (size_t gi = 0; gi < groups_.size(); gi++) {
        const ParamGroup& grp = groups_[gi];
        opt_.add_group(g, grp.name, grp.params, reads[gi], grp.lr, -1.0f, grp.torch_shapes);
    }
    opt_.add_group(g, "train.skip_probe", {probe_param_}, {probe}, 0.0, 0.0f);
    opt_.finish(g, loss_scale, max_grad_norm);
}

void Update::set_share(gl::Runtime& rt, float share) {
    GL_CHECK(share_ != gl::kNoValue, "update: set_share on a step built without data parallelism");
    GL_CHECK(std::isfinite(share) && share >= 0.0f && share <= 1.0f, "update: share ", share, " outside [0, 1]");
    share_value_ = share;
    rt.write_f32(share_, {accum_ > 1 ? 1.0f : share});  // with accumulation prepare weights each addition
}

void Update::init_state(gl::Runtime& rt) {
    const gl::Graph& g = rt.plan().graph;
    rt.write_f32(probe_param_, {0.0f});
    if (share_ != gl::kNoValue) rt.write_f32(share_, {1.0f});
    share_value_ = 1.0f;
    for (ValueId a : accum_values_) rt.write_f32(a, std::vector<float>(size_t(g.v(a).numel()), 0.0f));
    opt_.init_state(rt);
}

void Update::prepare(gl::Runtime& rt, int micro, double lr_factor, bool skip, bool last) {
    GL_CHECK(micro >= 0 && micro < accum_, "update: micro-step ", micro, " outside [0, ", accum_, ")");
    opt_.set_step(rt, opt_.next_step(), lr_factor);
    if (ctl_ != gl::kNoValue)
        rt.write_f32(ctl_, {micro == 0 ? 1.0f : 0.0f, float(double(share_value_) / double(accum_))});
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
