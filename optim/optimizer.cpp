// Optimizer: generic over the descriptors (optim/optimizers/): adds grad_stats and one hyper input per
// group, lets the descriptor's append create its state leaves and update nodes, then initialises,
// writes the per-step hyper tensors, reads gstat after a step, and saves / restores whatever state
// was created. LossScaler: torch's GradScaler policy on the host.
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "ggml-lite/ops/optim_schedulefree.h"

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
    Group grp{name, {}, {}, lr, weight_decay < 0.0f ? cfg_.weight_decay : weight_decay, gl::kNoValue, {}};
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

ValueId UpdateBuilder::add(const std::string& name, DType t, const gl::Shape& s, StateInit init, bool saved) {
    for (const StateSlot& sl : slots_)
        GL_CHECK(sl.name != name, "Optimizer: two state tensors named '", name, "' (parameter names must differ)");
    GL_CHECK(init.values.empty() || int64_t(init.values.size()) == s.numel(), "Optimizer: state '", name, "' ",
             s.str(), " given ", init.values.size(), " initial values");
    GL_CHECK(init.copy_of == gl::kNoValue || g.shape(init.copy_of).numel() == s.numel(), "Optimizer: state '", name,
             "' ", s.str(), " cannot start as a copy of ", g.describe(init.copy_of));
    const ValueId id = g.state(name, t, s);
    slots_.push_back({id, name, t, s, std::move(init), saved});
    return id;
}

ValueId UpdateBuilder::state(const UpdateParam& p, const std::string& suffix, DType t, const gl::Shape& s,
                             StateInit init) {
    return add("optim." + g.v(p.param).name + "." + suffix, t, s, std::move(init), true);
}

ValueId UpdateBuilder::shared_state(const std::string& suffix, DType t, const gl::Shape& s, StateInit init) {
    return add("optim." + suffix, t, s, std::move(init), true);
}

ValueId UpdateBuilder::scratch(const std::string& suffix, DType t, const gl::Shape& s, StateInit init) {
    return add("optim." + suffix, t, s, std::move(init), false);
}

void Optimizer::finish(gl::Graph& g, ValueId loss_scale, float max_grad_norm) {
    GL_CHECK(!finished_, "Optimizer::finish: called twice");
    GL_CHECK(std::isfinite(max_grad_norm), "Optimizer::finish: max_grad_norm must be finite (0: no clipping)");
    std::vector<ValueId> all;
    for (const Group& grp : groups_) all.insert(all.end(), grp.grads.begin(), grp.grads.end());
    GL_CHECK(!all.empty(), "Optimizer::finish: no parameter has a gradient");
    gstat_ = gl::grad_stats(g, all, loss_scale, max_grad_norm);
    g.set_name(gstat_, "optim.gstat");
    g.mark_output(gstat_);
    std::vector<UpdateGroup> groups;
    std::vector<UpdateParam> params;
    for (Group& grp : groups_) {
        grp.hyper = g.input("optim." + grp.name + ".hyper", DType::f32, gl::Shape{gl::kHyperSize});
        for (size_t i = 0; i < grp.params.size(); i++)
            params.push_back({grp.params[i], grp.grads[i], grp.hyper, grp.torch_shapes[i], groups.size()});
        groups.push_back({grp.name, grp.lr, grp.hyper});
    }
    UpdateBuilder b(g, cfg_, gstat_, std::move(groups), std::move(params), slots_, eval_pairs_);
    cfg_.def->append(b);
    d_estimate_ = b.d_estimate;
    finished_ = true;
}

namespace {
void write_initial(gl::Runtime& rt, const StateSlot& sl) {
    if (sl.init.copy_of != gl::kNoValue)
        rt.write_f32(sl.id, rt.read_f32(sl.init.copy_of));
    else if (!sl.init.values.empty())
        rt.write_f32(sl.id, sl.init.values);
    else
        rt.write_f32(sl.id, std::vector<float>(size_t(sl.shape.numel()), sl.init.fill));
}
}  // namespace

void Optimizer::init_state(gl::Runtime& rt) {
    GL_CHECK(finished_, "Optimizer::init_state: call finish() first");
    for (const StateSlot& sl : slots_) write_initial(rt, sl);
    train_weights_.clear();
    steps_applied_ = 0;
    last_ = {};
}

void Optimizer::set_step(gl::Runtime& rt, int64_t step, double lr_multiplier) {
    GL_CHECK(finished_, "Optimizer::set_step: call finish() first");
    GL_CHECK(step >= 1, "Optimizer::set_step: steps count from 1 (got ", step, ")");
    GL_CHECK(std::isfinite(lr_multiplier) && lr_multiplier >= 0.0, "Optimizer::set_step: bad lr multiplier ",
             lr_multiplier);
    for (const Group& grp : groups_) {
        std::vector<float> h = {float(grp.lr * lr_multiplier), cfg_.beta1, cfg_.beta2, cfg_.eps, grp.weight_decay,
                                float(step), 1.0f, 0.0f};
        rt.write_f32(grp.hyper, h);
    }
}

void Optimizer::set_steps_applied(int64_t n) {
    GL_CHECK(n >= 0, "Optimizer::set_steps_applied: negative count ", n);
    steps_applied_ = n;
}

std::optional<double> Optimizer::d_estimate(const gl::Runtime& rt) const {
    if (d_estimate_.state == gl::kNoValue) return std::nullopt;
    const std::vector<float> s = rt.read_f32(d_estimate_.state);
    GL_CHECK(size_t(d_estimate_.at + (d_estimate_.pair ? 1 : 0)) < s.size(), "optimizer: d estimate outside its state");
    const double hi = s[size_t(d_estimate_.at)];
    return d_estimate_.pair ? hi + double(s[size_t(d_estimate_.at + 1)]) : hi;
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

void Optimizer::to_eval(gl::Runtime& rt) {
    if (eval_pairs_.empty() || in_eval()) return;
    for (const EvalPair& e : eval_pairs_) {
        std::vector<float> y = rt.read_f32(e.param), x(y.size());
        const std::vector<float> z = rt.read_f32(e.z);
        for (size_t i = 0; i < y.size(); i++) x[i] = gl::torch_lerp(y[i], z[i], e.weight);
        rt.write_f32(e.param, x);
        train_weights_.push_back(std::move(y));
    }
}

void Optimizer::to_train(gl::Runtime& rt) {
    if (!in_eval()) return;
    for (size_t k = 0; k < eval_pairs_.size(); k++) rt.write_f32(eval_pairs_[k].param, train_weights_[k]);
    train_weights_.clear();
}

std::vector<ValueId> Optimizer::state_values() const {
    std::vector<ValueId> r;
    for (const StateSlot& sl : slots_)
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
    GL_CHECK(!in_eval(), "Optimizer::save_state: the params hold the eval weights (call to_train first)");
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<gl::io::TensorToWrite> tensors;
    for (const StateSlot& sl : slots_) {
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
    meta["optim.kind"] = cfg_.name();
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
    GL_CHECK(!in_eval(), "Optimizer::load_state: the params hold the eval weights (call to_train first)");
    gl::io::SafetensorsFile f(path);
    const auto& meta = f.metadata();
    auto get = [&](const char* key) -> const std::string& {
        auto it = meta.find(key);
        GL_CHECK(it != meta.end(), path, ": not an optimizer state file (no ", key, " metadata)");
        return it->second;
    };
    GL_CHECK(get("optim.format") == kFormat, path, ": unknown optimizer state format '", get("optim.format"), "'");
    GL_CHECK(get("optim.kind") == cfg_.name(), path, ": optimizer state of ", get("optim.kind"), ", but this run uses ",
             cfg_.name());
    const std::string saved_args = get("optim.args");
    std::set<std::string> expected;
    for (const StateSlot& sl : slots_) {
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
    // Whole numbers are read exactly: a count beyond int64 is refused, never clamped.
    auto whole = [&](const char* key, int64_t lo, int64_t hi) {
        const std::string& v = get(key);
        int64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        GL_CHECK(ec == std::errc() && end == v.data() + v.size() && x >= lo && x <= hi, path, ": metadata ", key,
                 " is '", v, "', expected a whole number in [", lo, ", ", hi, "]");
        return x;
    };
    const int64_t n_steps = whole("optim.steps_applied", 0, INT64_MAX);
    char* end = nullptr;
    double scale = 0;
    long long tracker = 0;
    if (scaler) {
        const std::string& s = get("optim.loss_scale");
        scale = std::strtod(s.c_str(), &end);
        GL_CHECK(!s.empty() && *end == '\0', path, ": bad optim.loss_scale '", s, "'");
        tracker = whole("optim.growth_tracker", INT64_MIN, INT64_MAX);
        GL_CHECK(scaler->restorable(scale, tracker).empty(), path, ": ", scaler->restorable(scale, tracker));
    }
    // Every tensor is read and checked before any is written: a refused file restores nothing.
    std::vector<std::vector<uint8_t>> bufs;
    for (const StateSlot& sl : slots_) {
        if (!sl.saved) continue;
        bufs.emplace_back(size_t(sl.shape.numel()) * gl::dtype_size(sl.dtype));
        f.read(sl.name, bufs.back().data(), sl.dtype);
        if (!gl::dtype_is_float(sl.dtype)) continue;
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < sl.shape.numel(); i++)
            if (!std::isfinite(gl::load_as_f32(bufs.back().data(), sl.dtype, i))) bad++, first = first < 0 ? i : first;
        GL_CHECK(bad == 0, path, ": state tensor '", sl.name, "' holds ", bad, " NaN / inf value", bad == 1 ? "" : "s",
                 " (the first at element ", first, "): the run it was saved from had diverged");
    }
    if (scaler) scaler->restore(scale, tracker);
    size_t k = 0;
    for (const StateSlot& sl : slots_) {
        if (sl.saved)
            rt.write(sl.id, bufs[k++].data(), sl.dtype);
        else
            write_initial(rt, sl);  // scratch starts as it does after init_state
    }
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

std::string LossScaler::restorable(double scale, int64_t tracker) const {
    if (!(std::isfinite(scale) && scale > 0)) return gl::cat("bad loss scale ", scale, " (must be positive and finite)");
    if (tracker < 0 || tracker >= o_.growth_interval)
        return gl::cat("growth tracker ", tracker, " outside [0, ", o_.growth_interval, ")");
    return {};
}

void LossScaler::restore(double scale, int64_t tracker) {
    const std::string why = restorable(scale, tracker);
    GL_CHECK(why.empty(), "LossScaler::restore: ", why);
    scale_ = scale;
    tracker_ = tracker;
}

}  // namespace optim
