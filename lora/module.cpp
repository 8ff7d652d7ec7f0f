#include "lora/module.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "lora/dora.h"

namespace lora {

// The registry: each type's file defines its function.
const ModuleType& locon_type();
const ModuleType& loha_type();
const ModuleType& lokr_type();

const std::vector<const ModuleType*>& module_types() {
    static const std::vector<const ModuleType*> types = {&locon_type(), &loha_type(), &lokr_type()};
    return types;
}

const ModuleType* find_module_type(const std::string& algo) {
    for (const ModuleType* t : module_types()) {
        if (algo == t->algo()) return t;
        for (const std::string& a : t->aliases())
            if (algo == a) return t;
    }
    return nullptr;
}

std::string kohya_key(const models::Family& f, Part part, const std::string& path) {
    std::string s = f.lora_prefix(part) + "_" + path;
    for (char& c : s)
        if (c == '.') c = '_';
    return s;
}

std::vector<float> kaiming_uniform(size_t n, int64_t fan_in, std::mt19937_64& rng) {
    // kaiming_uniform_(a = sqrt 5): gain sqrt(2 / (1 + a^2)) = sqrt(1/3), bound gain *
    // sqrt(3 / fan_in) = 1 / sqrt(fan_in).
    const float bound = 1.0f / std::sqrt(float(fan_in));
    std::uniform_real_distribution<float> u(-bound, bound);
    std::vector<float> v(n);
    for (float& e : v) e = u(rng);
    return v;
}

std::vector<float> normal(size_t n, float stddev, std::mt19937_64& rng) {
    std::normal_distribution<float> d(0.0f, stddev);
    std::vector<float> v(n);
    for (float& e : v) e = d(rng);
    return v;
}

int read_rank(const FileModule& f, const std::string& suffix, int axis) {
    const std::vector<int64_t> s = f.shape(suffix);
    std::string shape = "[";
    for (size_t i = 0; i < s.size(); i++) shape += (i ? ", " : "") + std::to_string(s[i]);
    shape += "]";
    GL_CHECK(int(s.size()) > axis, "lora: ", f.origin, ": ", f.name(suffix), " ", shape, " has no axis ", axis);
    const int64_t r = s[size_t(axis)];
    GL_CHECK(r >= 1 && r <= INT32_MAX, "lora: ", f.origin, ": tensor '", f.name(suffix), "' ", shape, " has rank ", r,
             "; a LoRA's rank lies in [1, ", INT32_MAX, "]");
    return int(r);
}

std::vector<int64_t> Layer::torch_shape() const {
    switch (kind) {
        case ModuleKind::linear: return {out, in};
        case ModuleKind::conv1x1: return {out, in, 1, 1};
        case ModuleKind::conv: return {out, in, int64_t(k), int64_t(k)};
    }
    gl::fail("lora: unknown module kind");
}

gl::Shape Layer::graph_shape() const {
    return kind == ModuleKind::conv ? gl::Shape{out, int64_t(k), int64_t(k), in} : gl::Shape{out, in};
}

Module::Module(const ModuleType& type, Layer layer, ModuleSettings s)
    : type_(&type), layer_(std::move(layer)), s_(std::move(s)) {
    GL_CHECK(s_.rank >= 1, "lora: ", layer_.key, ": rank must be positive, got ", s_.rank);
    GL_CHECK(std::isfinite(s_.alpha) && s_.alpha >= 0.0f, "lora: ", layer_.key, ": alpha must be finite and >= 0, got ",
             s_.alpha);
}

std::vector<std::string> Module::file_order() const {
    std::vector<std::string> o{"alpha"};
    for (const Tensor& t : tensors_)
        if (t.suffix != "dora_scale") o.push_back(t.suffix);
    if (s_.dora) o.insert(o.begin() + 1, "dora_scale");  // LoHa and LoKr: alpha, dora_scale, the factors
    return o;
}

const Tensor* Module::tensor(const std::string& suffix) const {
    for (const Tensor& t : tensors_)
        if (t.suffix == suffix) return &t;
    return nullptr;
}

gl::ValueId Module::param(const std::string& suffix) const {
    const Tensor* t = tensor(suffix);
    return t ? t->id : gl::kNoValue;
}

gl::ValueId Module::add(gl::Graph& g, const std::string& suffix, const gl::Shape& graph, std::vector<int64_t> file,
                        int conv_k, int rank_axis) {
    const std::string name = layer_.key + "." + suffix;
    const gl::ValueId id = g.param(name, gl::DType::f32, graph);
    g.set_name(id, name);  // exactly the key, whatever scope is open
    tensors_.push_back({suffix, id, std::move(file), conv_k, rank_axis});
    return id;
}

namespace {

// The gate input of a module: an f32 input named "<key>.<what>".
gl::ValueId gate_input(gl::Graph& g, const std::string& key, const char* what, gl::DType t, const gl::Shape& s) {
    const gl::ValueId id = g.input(key + "." + what, t, s);
    g.set_name(id, key + "." + what);
    return id;
}

}  // namespace

gl::ValueId Module::build(gl::Graph& g, const nn::Weights::LayerCall& base, const BuildEnv& env) {
    base_ = base.weight;
    create(g);
    if (s_.dora) {
        const std::vector<int64_t> ds = dora::scale_shape(layer_, s_.dora_on_output);
        add(g, "dora_scale", gl::Shape::of(ds), ds);
    }
    const gl::DType dt = g.dtype(base.x);
    if (!s_.kohya_dropouts) {
        if (s_.rank_dropout > 0.0f) row_gate = gate_input(g, layer_.key, "row_gate", gl::DType::f32, gl::Shape{layer_.out});
        if (s_.module_dropout > 0.0f) skip_gate = gate_input(g, layer_.key, "skip_gate", dt, gl::Shape{1});
    }
    if (!s_.dora) {
        const gl::ValueId y = branch(g, base, env);
        if (y != gl::kNoValue) return y;
    }
    // The weight-rebuild forward: y + op(x, W' - W0).
    const gl::Shape ws = layer_.graph_shape();
    gl::ValueId d = delta(g);
    if (row_gate != gl::kNoValue) {
        gl::Shape rs{layer_.out, 1};
        if (ws.nd == 4) rs = gl::Shape{layer_.out, 1, 1, 1};
        d = gl::mul(g, d, gl::reshape(g, row_gate, rs));
    }
    if (s_.dora) {
        gl::ValueId w0 = gl::cast(g, base.weight.q, gl::DType::f32);
        if (base.weight.scale != gl::kNoValue) {
            gl::Shape ss{layer_.out, 1};
            if (g.shape(w0).nd == 4) ss = gl::Shape{layer_.out, 1, 1, 1};
            w0 = gl::mul(g, w0, gl::reshape(g, base.weight.scale, ss));
        }
        w0 = gl::reshape(g, w0, ws);  // a 1x1 conv's [out, 1, 1, in] as [out, in]
        d = gl::sub(g, dora::weight(g, gl::add(g, w0, d), param("dora_scale"), layer_, s_.dora_on_output,
                                    env.multiplier),
                    w0);
    } else if (env.multiplier != 1.0f) {
        d = gl::scale(g, d, env.multiplier);
    }
    d = gl::cast(g, d, dt);
    gl::ValueId h = layer_.kind == ModuleKind::conv ? gl::conv2d(g, base.x, d, gl::kNoValue, layer_.stride, layer_.pad)
                                                    : gl::linear(g, base.x, d);
    if (skip_gate != gl::kNoValue) h = gl::mul(g, h, skip_gate);
    return gl::add(g, base.y, h);
}

std::vector<float> Module::base_weight(const ReadFn& read) const {
    std::vector<float> w = read(base_.q);
    if (base_.scale != gl::kNoValue) {
        const std::vector<float> s = read(base_.scale);
        const size_t row = w.size() / s.size();
        for (size_t i = 0; i < w.size(); i++) w[i] *= s[i / row];
    }
    return w;
}

void Module::init(const WriteFn& write, const ReadFn& read, std::mt19937_64& rng) const {
    init_params(write, rng);
    if (s_.dora) write(param("dora_scale"), dora::norms(base_weight(read), layer_, s_.dora_on_output));
}

void Module::sample_gates(const WriteFn& write, const gl::Graph& g, std::mt19937_64& rng, bool training) const {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    if (gate != gl::kNoValue) {
        // kohya: one draw per module for module_dropout, then one per sample and rank.
        const int64_t n = g.shape(gate).numel();
        std::vector<float> v(size_t(n), 1.0f);
        if (training) {
            const bool skip = s_.module_dropout > 0.0f && u(rng) < s_.module_dropout;
            const float keep_scale = 1.0f / (1.0f - s_.rank_dropout);
            for (int64_t i = 0; i < n; i++) {
                if (skip) v[size_t(i)] = 0.0f;
                else if (s_.rank_dropout > 0.0f) v[size_t(i)] = u(rng) >= s_.rank_dropout ? keep_scale : 0.0f;
            }
        }
        GL_CHECK(n % s_.rank == 0, "lora: gate of ", layer_.key, " is not a multiple of its rank");
        write(gate, v);
    }
    if (skip_gate != gl::kNoValue) write(skip_gate, {training && u(rng) < s_.module_dropout ? 0.0f : 1.0f});
    if (row_gate != gl::kNoValue) {
        // LyCORIS: keep = rand(out) > p, optionally divided by the mean kept.
        std::vector<float> v(size_t(layer_.out), 1.0f);
        if (training) {
            double kept = 0.0;
            for (float& e : v) kept += (e = u(rng) > s_.rank_dropout ? 1.0f : 0.0f);
            if (s_.rank_dropout_scale && kept > 0.0)
                for (float& e : v) e = float(e * double(v.size()) / kept);
        }
        write(row_gate, v);
    }
}

void Module::merge(std::vector<float>& w, const ReadFn& read, float multiplier) const {
    GL_CHECK(w.size() == size_t(layer_.out * layer_.fan_in()), "lora merge: ", layer_.key, ": the weight holds ",
             w.size(), " values, the module ", layer_.out * layer_.fan_in());
    if (!s_.dora) {
        const std::vector<float> d = host_delta(read, multiplier);
        for (size_t i = 0; i < w.size(); i++) w[i] += d[i];
        return;
    }
    const std::vector<float> d = host_delta(read, 1.0f);
    for (size_t i = 0; i < w.size(); i++) w[i] += d[i];
    dora::apply(w, read(param("dora_scale")), layer_, s_.dora_on_output, multiplier);
}

}  // namespace lora
