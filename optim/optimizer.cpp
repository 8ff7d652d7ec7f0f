// Optimizer: builds the update nodes and state leaves of a training step, writes its per-step
// hyper tensors, reads gstat after a step, and saves / restores its state; LossScaler: torch's
// GradScaler policy on the host.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"

namespace optim {

using gl::DType;
using gl::ValueId;

namespace {
constexpr const char* kFormat = "ggml-lite optimizer state 1";

// Gradients the update ops can take: f32, a dense storage owner.
ValueId as_update_grad(gl::Graph& g, ValueId grad) {
    if (g.dtype(grad) != DType::f32) grad = gl::cast(g, grad, DType::f32);
    if (g.v(grad).base != grad || !g.v(grad).layout.is_contiguous() || g.v(grad).layout.offset != 0)
        grad = gl::contiguous(g, grad, true);
    return grad;
}
}  // namespace

Optimizer::Optimizer(OptimizerConfig cfg) : cfg_(std::move(cfg)) {}

void Optimizer::add_group(gl::Graph& g, const std::string& name, const std::vector<ValueId>& params,
                          const std::vector<ValueId>& grads, double lr, float weight_decay,
                          const std::vector<gl::Shape>& torch_shapes) {
    GL_CHECK(!finished_, "Optimizer::add_group('", name, "'): the optimizer is already finished");
    GL_CHECK(params.size() == grads.size(), "Optimizer::add_group('", name, "'): ", params.size(), " params but ",
             grads.size(), " gradients");
    GL_CHECK(std::isfinite(lr) && lr >= 0.0, "Optimizer::add_group('", name, "'): lr ", lr, " must be finite and >= 0");
    GL_CHECK(weight_decay < 0.0f || std::isfinite(weight_decay), "Optimizer::add_group('", name, "'): bad weight decay");
    for (const Group& o : groups_) GL_CHECK(o.name != name, "Optimizer::add_group: group '", name, "' added twice");
    GL_CHECK(torch_shapes.empty() || torch_shapes.size() == params.size(), "Optimizer::add_group('", name, "'): ",
             torch_shapes.size(), " torch shapes for ", params.size(), " params");
    Group grp{name, {}, {}, lr, weight_decay < 0.0f ? cfg_.weight_decay : weight_decay};
    for (size_t i = 0; i < params.size(); i++) {
        const gl::Value& p = g.v(params[i]);
        GL_CHECK(p.role == gl::Role::param && p.dtype == DType::f32, "Optimizer::add_group('", name, "'): ",
                 g.describe(params[i]), " is not an f32 trainable parameter (g.param)");
        const gl::Shape ts = torch_shapes.empty() ? gl::Shape{} : torch_shapes[i];
        GL_CHECK(ts.nd == 0 || ts.numel() == p.numel(), "Optimizer::add_group('", name, "'): torch shape ",
                 ts.str(), " of ", g.describe(params[i]), " holds another element count");
        if (grads[i] == gl::kNoValue) continue;
        grp.params.push_back(params[i]);
        grp.grads.push_back(as_update_grad(g, grads[i]));
        grp.torch_shapes.push_back(ts);
    }
    groups_.push_back(std::move(grp));
}

ValueId Optimizer::add_state(gl::Graph& g, const std::string& name, DType t, const gl::Shape& s, Slot::Init init,
                             ValueId param, bool saved) {
    for (const Slot& sl : slots_)
        GL_CHECK(g.v(sl.id).name != name, "Optimizer: two state tensors named '", name, "' (parameter names must differ)");
    ValueId id = g.state(name, t, s);
    slots_.push_back({id, init, param, saved, name, t, s});
    return id;
}

void Optimizer::finish(gl::Graph& g, ValueId loss_scale, float max_grad_norm) {
    GL_CHECK(!finished_, "Optimizer::finish: called twice");
    GL_CHECK(std::isfinite(max_grad_norm), "Optimizer::finish: max_grad_norm must be finite (0: no clipping)");
    std::vector<ValueId> all;
    for (const Group& grp : groups_) all.insert(all.end(), grp.grads.begin(), grp.grads.end());
    GL_CHECK(!all.empty(), "Optimizer::finish: no parameter has a gradient");
    if (cfg_.kind == OptimizerKind::Prodigy) {
        double lr = 0;
        for (const Group& grp : groups_) {
            GL_CHECK(grp.lr == 0.0 || lr == 0.0 || grp.lr == lr, "Prodigy: groups '", groups_[0].name, "' and '", grp.name,
                     "' have different learning rates; Prodigy shares one d estimate, so (as prodigyopt) every group ",
                     "must use the same lr or 0");
            if (grp.lr != 0.0) lr = grp.lr;
        }
        pstate_ = add_state(g, "optim.prodigy.state", DType::f32, gl::Shape{gl::kProdigyStateSize}, Slot::prodigy_state);
        acc_ = add_state(g, "optim.prodigy.acc", DType::f32, gl::Shape{2 * int64_t(all.size())}, Slot::zero,
                         gl::kNoValue, false);
    }
    gstat_ = gl::grad_stats(g, all, loss_scale, max_grad_norm);
    g.set_name(gstat_, "optim.gstat");
    g.mark_output(gstat_);
    for (Group& grp : groups_) grp.hyper = g.input("optim." + grp.name + ".hyper", DType::f32, gl::Shape{gl::kHyperSize});

    int slot = 0;
    std::vector<ValueId> pd;  // Prodigy: param, grad, m, v, hyper per param, for the second loop
    for (const Group& grp : groups_)
        for (size_t i = 0; i < grp.params.size(); i++) append_updates(g, grp, i, slot, pd);
    if (cfg_.kind == OptimizerKind::Prodigy) {
        gl::prodigy_d(g, pstate_, acc_, groups_[0].hyper, cfg_.prodigy, gstat_);
        for (size_t k = 0; k < pd.size(); k += 5)
            gl::prodigy_step(g, pd[k], pd[k + 1], pd[k + 2], pd[k + 3], pd[k + 4], pstate_, cfg_.prodigy, gstat_);
    }
    finished_ = true;
}

void Optimizer::append_updates(gl::Graph& g, const Group& grp, size_t index, int& slot, std::vector<ValueId>& pd) {
    const ValueId p = grp.params[index], grad = grp.grads[index];
    const gl::Shape s = g.shape(p);
    const std::string base = "optim." + g.v(p).name + ".";
    const ValueId h = grp.hyper;
    switch (cfg_.kind) {
        case OptimizerKind::AdamW: {
            ValueId m = add_state(g, base + "exp_avg", DType::f32, s, Slot::zero);
            ValueId v = add_state(g, base + "exp_avg_sq", DType::f32, s, Slot::zero);
            gl::adamw_step(g, p, grad, m, v, h, false, gstat_);
            break;
        }
        case OptimizerKind::AdamW8bit: {
            const int64_t n = s.numel();
            if (n < gl::kAdam8bitMinElements) {  // bitsandbytes keeps small tensors in fp32 (and its decay order)
                ValueId m = add_state(g, base + "exp_avg", DType::f32, s, Slot::zero);
                ValueId v = add_state(g, base + "exp_avg_sq", DType::f32, s, Slot::zero);
                gl::adamw_step(g, p, grad, m, v, h, true, gstat_);
                break;
            }
            const int64_t blocks = (n + gl::kAdam8bitBlock - 1) / gl::kAdam8bitBlock;
            ValueId m = add_state(g, base + "exp_avg.q8", DType::u8, s, Slot::zero_code_signed);
            ValueId v = add_state(g, base + "exp_avg_sq.q8", DType::u8, s, Slot::zero_code_unsigned);
            ValueId am = add_state(g, base + "exp_avg.absmax", DType::f32, gl::Shape{blocks}, Slot::zero);
            ValueId av = add_state(g, base + "exp_avg_sq.absmax", DType::f32, gl::Shape{blocks}, Slot::zero);
            gl::adamw8bit_step(g, p, grad, m, v, am, av, h, gstat_);
            break;
        }
        case OptimizerKind::Lion: {
            ValueId m = add_state(g, base + "exp_avg", DType::f32, s, Slot::zero);
            gl::lion_step(g, p, grad, m, h, gstat_);
            break;
        }
        case OptimizerKind::Adafactor: {
            ValueId m = cfg_.adafactor_first_moment ? add_state(g, base + "exp_avg", DType::f32, s, Slot::zero)
                                                    : gl::kNoValue;
            // factored as PyTorch holds the param (kohya's LoRA: 1x1-conv weights are 4-D there)
            const gl::Shape torch_shape = grp.torch_shapes[index].nd >= 2 && s.nd >= 2 ? grp.torch_shapes[index] : gl::Shape{};
            auto [rows, cols] = gl::adafactor_state_sizes(s, torch_shape);
            ValueId vr, vc = gl::kNoValue;
            if (cols == 0) {
                vr = add_state(g, base + "exp_avg_sq", DType::f32, s, Slot::zero);
            } else {
                vr = add_state(g, base + "exp_avg_sq_row", DType::f32, gl::Shape{rows}, Slot::zero);
                vc = add_state(g, base + "exp_avg_sq_col", DType::f32, gl::Shape{cols}, Slot::zero);
            }
            gl::adafactor_step(g, p, grad, m, vr, vc, h, cfg_.adafactor, gstat_, torch_shape);
            break;
        }
        case OptimizerKind::Prodigy: {
            ValueId m = cfg_.beta1 > 0.0f ? add_state(g, base + "exp_avg", DType::f32, s, Slot::zero) : gl::kNoValue;
            ValueId v = add_state(g, base + "exp_avg_sq", DType::f32, s, Slot::zero);
            ValueId sv = add_state(g, base + "s", DType::f32, s, Slot::zero);
            ValueId p0 = add_state(g, base + "p0", DType::f32, s, Slot::copy_param, p);
            gl::prodigy_accum(g, p, grad, m, v, sv, p0, h, pstate_, acc_, slot++, cfg_.prodigy, gstat_);
            pd.insert(pd.end(), {p, grad, m, v, h});
            break;
        }
    }
}

void Optimizer::init_state(gl::Runtime& rt) {
    GL_CHECK(finished_, "Optimizer::init_state: call finish() first");
    for (const Slot& sl : slots_) {
        const size_t n = size_t(sl.shape.numel());
        std::vector<float> x(n, 0.0f);
        if (sl.init == Slot::zero_code_signed || sl.init == Slot::zero_code_unsigned) {
            const float* q = gl::adam8bit_qmap(sl.init == Slot::zero_code_signed);
            std::fill(x.begin(), x.end(), float(gl::adam8bit_quantize(q, 0.0f)));
        } else if (sl.init == Slot::copy_param) {
            x = rt.read_f32(sl.param);
        } else if (sl.init == Slot::prodigy_state) {
            x[gl::kPdD] = x[gl::kPdDMax] = cfg_.prodigy.d0;
        }
        rt.write_f32(sl.id, x);
    }
    steps_applied_ = 0;
    last_ = {};
}

void Optimizer::set_step(gl::Runtime& rt, int64_t step, double lr_multiplier) {
    GL_CHECK(finished_, "Optimizer::set_step: call finish() first");
    GL_CHECK(step >= 1, "Optimizer::set_step: steps count from 1 (got ", step, ")");
    GL_CHECK(std::isfinite(lr_multiplier) && lr_multiplier >= 0.0, "Optimizer::set_step: bad lr multiplier ",
             lr_multiplier);
    const bool af = cfg_.kind == OptimizerKind::Adafactor;
    const float b1 = af && !cfg_.adafactor_first_moment ? 0.0f : cfg_.beta1;
    for (const Group& grp : groups_) {
        std::vector<float> h = {float(grp.lr * lr_multiplier), b1, cfg_.beta2, cfg_.eps, grp.weight_decay, float(step),
                                1.0f, 0.0f};
        rt.write_f32(grp.hyper, h);
    }
}

StepResult Optimizer::after_step(gl::Runtime& rt) {
    GL_CHECK(finished_, "Optimizer::after_step: call finish() first");
    std::vector<float> s = rt.read_f32(gstat_);
    last_.nonfinite = s[gl::kGsNonfinite] != 0.0f;
    last_.skipped = last_.nonfinite;
    last_.grad_norm = s[gl::kGsNorm];
    if (!last_.skipped) steps_applied_++;
    return last_;
}

std::vector<ValueId> Optimizer::state_values() const {
    std::vector<ValueId> r;
    for (const Slot& sl : slots_)
        if (sl.saved) r.push_back(sl.id);
    return r;
}

// The optimizer args as saved in state files: ';'-joined, in the order given.
static std::string join_args(const std::vector<std::string>& args) {
    std::string s;
    for (const std::string& a : args) s += (s.empty() ? "" : ";") + a;
    return s;
}
static std::multiset<std::string> split_args(const std::string& s) {
    std::multiset<std::string> out;
    size_t start = 0;
    while (start <= s.size() && !s.empty()) {
        const size_t end = std::min(s.find(';', start), s.size());
        out.insert(s.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

void Optimizer::save_state(const std::string& path, const gl::Runtime& rt, const LossScaler* scaler,
                           const std::map<std::string, std::string>& extra) const {
    GL_CHECK(finished_, "Optimizer::save_state: call finish() first");
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<gl::io::TensorToWrite> tensors;
    for (const Slot& sl : slots_) {
        if (!sl.saved) continue;
        bufs.emplace_back(size_t(sl.shape.numel()) * gl::dtype_size(sl.dtype));
        rt.read(sl.id, bufs.back().data(), sl.dtype);
        std::vector<int64_t> shape(sl.shape.d.begin(), sl.shape.d.begin() + sl.shape.nd);
        tensors.push_back({sl.name, sl.dtype, shape, bufs.back().data()});
    }
    std::map<std::string, std::string> meta;
    for (const auto& [k, v] : extra) {
        GL_CHECK(k.rfind("optim.", 0) != 0, "Optimizer::save_state: metadata key '", k, "' is reserved");
        meta[k] = v;
    }
    meta["optim.format"] = kFormat;
    meta["optim.kind"] = optimizer_kind_name(cfg_.kind);
    meta["optim.args"] = join_args(cfg_.args);
    meta["optim.steps_applied"] = std::to_string(steps_applied_);
    if (scaler) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", scaler->scale());
        meta["optim.loss_scale"] = buf;
        meta["optim.growth_tracker"] = std::to_string(scaler->growth_tracker());
    }
    gl::io::write_safetensors(path, tensors, meta);
}

std::string Optimizer::load_state(const std::string& path, gl::Runtime& rt, LossScaler* scaler) {
    GL_CHECK(finished_, "Optimizer::load_state: call finish() first");
    gl::io::SafetensorsFile f(path);
    const auto& meta = f.metadata();
    auto get = [&](const char* key) -> const std::string& {
        auto it = meta.find(key);
        GL_CHECK(it != meta.end(), path, ": not an optimizer state file (no ", key, " metadata)");
        return it->second;
    };
    GL_CHECK(get("optim.format") == kFormat, path, ": unknown optimizer state format '", get("optim.format"), "'");
    GL_CHECK(get("optim.kind") == optimizer_kind_name(cfg_.kind), path, ": optimizer state of ", get("optim.kind"),
             ", but this run uses ", optimizer_kind_name(cfg_.kind));
    const std::string saved_args = get("optim.args");
    std::set<std::string> expected;
    for (const Slot& sl : slots_) {
        if (!sl.saved) continue;
        expected.insert(sl.name);
        GL_CHECK(f.has(sl.name), path, ": missing state tensor '", sl.name, "' (a different network or optimizer setting?)");
        gl::io::TensorInfo info = f.info(sl.name);
        std::vector<int64_t> shape(sl.shape.d.begin(), sl.shape.d.begin() + sl.shape.nd);
        GL_CHECK(info.shape == shape && info.dtype == sl.dtype, path, ": state tensor '", sl.name, "' is ",
                 gl::dtype_name(info.dtype), " of ", info.numel(), " elements, expected ", gl::dtype_name(sl.dtype), " ",
                 sl.shape.str());
    }
    for (const auto& info : f.list())
        GL_CHECK(expected.count(info.name), path, ": unexpected state tensor '", info.name, "'");
    char* end = nullptr;
    const std::string& steps = get("optim.steps_applied");
    const long long n_steps = std::strtoll(steps.c_str(), &end, 10);
    GL_CHECK(!steps.empty() && *end == '\0' && n_steps >= 0, path, ": bad optim.steps_applied '", steps, "'");
    double scale = 0;
    long long tracker = 0;
    if (scaler) {
        const std::string& s = get("optim.loss_scale");
        const std::string& t = get("optim.growth_tracker");
        scale = std::strtod(s.c_str(), &end);
        GL_CHECK(!s.empty() && *end == '\0', path, ": bad optim.loss_scale '", s, "'");
        tracker = std::strtoll(t.c_str(), &end, 10);
        GL_CHECK(!t.empty() && *end == '\0', path, ": bad optim.growth_tracker '", t, "'");
        scaler->restore(scale, tracker);  // validates before any state is written
    }
    for (const Slot& sl : slots_) {
        if (!sl.saved) continue;
        std::vector<uint8_t> buf(size_t(sl.shape.numel()) * gl::dtype_size(sl.dtype));
        f.read(sl.name, buf.data(), sl.dtype);
        rt.write(sl.id, buf.data(), sl.dtype);
    }
    if (acc_ != gl::kNoValue) rt.write_f32(acc_, std::vector<float>(size_t(rt.plan().graph.v(acc_).numel()), 0.0f));
    steps_applied_ = n_steps;
    last_ = {};
    const std::string now = join_args(cfg_.args);
    if (split_args(saved_args) == split_args(now)) return {};
    return gl::cat(path, ": the optimizer state was saved with optimizer_args '", saved_args, "'; this run uses '", now,
                   "' (the state is restored as saved)");
}

// ---------------- LossScaler ----------------

LossScaler::LossScaler(Options o) : o_(o), scale_(o.init_scale) {
    GL_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "LossScaler: init_scale must be positive");
    GL_CHECK(o.growth_factor > 1 && std::isfinite(o.growth_factor), "LossScaler: growth_factor must be > 1");
    GL_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "LossScaler: backoff_factor must lie in (0, 1)");
    GL_CHECK(o.growth_interval >= 1, "LossScaler: growth_interval must be >= 1");
}

void LossScaler::write(gl::Runtime& rt, ValueId loss_scale_input) const {
    rt.write_f32(loss_scale_input, {float(scale_)});
}

void LossScaler::update(bool found_nonfinite) {
    if (found_nonfinite) {
        scale_ *= o_.backoff_factor;
        tracker_ = 0;
        return;
    }
    if (++tracker_ == o_.growth_interval) {
        scale_ *= o_.growth_factor;
        tracker_ = 0;
    }
}

void LossScaler::restore(double scale, int64_t tracker) {
    GL_CHECK(std::isfinite(scale) && scale > 0, "LossScaler::restore: bad scale ", scale);
    GL_CHECK(tracker >= 0 && tracker < o_.growth_interval, "LossScaler::restore: growth tracker ", tracker,
             " outside [0, ", o_.growth_interval, ")");
    scale_ = scale;
    tracker_ = tracker;
}

}  // namespace optim
