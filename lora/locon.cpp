// LoRA (Hu et al. 2021) and LoCon, as kohya's networks.lora and LyCORIS's LoConModule hold them:
// per module lora_down [R, in] (a k x k conv's down is a conv [R, in, k, k] with the layer's stride
// and padding), lora_up [out, R] (1x1 convs: [.., 1, 1]); with LyCORIS's use_tucker on a k x k
// conv, lora_down is 1x1 [R, in, 1, 1], lora_mid [R, R, k, k] carries the kernel and lora_up
// stays [out, R, 1, 1]. dW = s up @ down (Tucker: dW[p, r, ..] = s sum_ij mid[i, j, ..] up[p, i]
// down[j, r]), s = alpha / R. down starts Kaiming-uniform (mid too), up at zero.
//
// Without DoRA the module joins as kohya and LyCORIS's bypass form do, y + s m up(down(x)): no
// weight-sized tensor per step. In the graph a conv's down (and mid) are [R, k, k, in] ([R, k, k, R]).
#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "lora/module.h"

namespace lora {

namespace {

using gl::Shape;
using gl::ValueId;

class Locon final : public Module {
public:
    using Module::Module;

    std::string alpha_tensor() const override { return "lora_up.weight"; }

    std::vector<std::string> file_order() const override {
        if (s_.kohya_dropouts) return {"lora_down.weight", "lora_up.weight", "alpha"};  // networks.lora's
        std::vector<std::string> o;
        if (s_.dora) o.push_back("dora_scale");
        o.insert(o.end(), {"alpha", "lora_up.weight", "lora_down.weight"});
        if (tucker()) o.push_back("lora_mid.weight");
        return o;
    }

protected:
    bool tucker() const { return s_.tucker && layer_.kind == ModuleKind::conv && layer_.k > 1; }

    void create(gl::Graph& g) override {
        const Layer& l = layer_;
        const int64_t r = rank(), k = l.k;
        if (tucker()) {
            add(g, "lora_down.weight", Shape{r, l.in}, {r, l.in, 1, 1}, 1, 0);
            add(g, "lora_mid.weight", Shape{r, k, k, r}, {r, r, k, k}, l.k, 0);
        } else if (l.kind == ModuleKind::conv) {
            add(g, "lora_down.weight", Shape{r, k, k, l.in}, {r, l.in, k, k}, l.k, 0);
        } else {
            const std::vector<int64_t> file = l.kind == ModuleKind::linear ? std::vector<int64_t>{r, l.in}
                                                                           : std::vector<int64_t>{r, l.in, 1, 1};
            add(g, "lora_down.weight", Shape{r, l.in}, file, 1, 0);
        }
        add(g, "lora_up.weight", Shape{l.out, r},
            l.kind == ModuleKind::linear ? std::vector<int64_t>{l.out, r} : std::vector<int64_t>{l.out, r, 1, 1}, 1, 1);
    }

    ValueId branch(gl::Graph& g, const nn::Weights::LayerCall& base, const BuildEnv& env) override {
        // The branch runs in the activations' dtype (bf16/fp16 training casts the f32 masters).
        const gl::DType dt = g.dtype(base.x);
        const ValueId down = gl::cast(g, param("lora_down.weight"), dt);
        ValueId h;
        if (tucker()) {
            h = gl::conv2d(g, gl::linear(g, base.x, down), gl::cast(g, param("lora_mid.weight"), dt), gl::kNoValue,
                           layer_.stride, layer_.pad);
        } else {
            h = layer_.kind == ModuleKind::conv ? gl::conv2d(g, base.x, down, gl::kNoValue, layer_.stride, layer_.pad)
                                                : gl::linear(g, base.x, down);
        }
        if (s_.kohya_dropouts) {
            // kohya's network_dropout: F.dropout on down's output, the module's place keeping the
            // masks of different modules apart.
            if (s_.dropout > 0.0f) h = gl::dropout(g, h, s_.dropout, env.index, env.dropout_seed());
            if (s_.rank_dropout > 0.0f || s_.module_dropout > 0.0f) {
                // [B, 1, .., rank]: one draw per sample and rank, broadcast over positions (kohya).
                Shape gs = g.shape(h);
                for (int i = 1; i + 1 < gs.nd; i++) gs.d[size_t(i)] = 1;
                gate = g.input(layer_.key + ".gate", dt, gs);
                g.set_name(gate, layer_.key + ".gate");
                h = gl::mul(g, h, gate);
            }
        }
        h = gl::linear(g, h, gl::cast(g, param("lora_up.weight"), dt));
        h = gl::scale(g, h, scale(env.multiplier));
        if (row_gate != gl::kNoValue) h = gl::mul(g, h, gl::cast(g, row_gate, dt));
        if (skip_gate != gl::kNoValue) h = gl::mul(g, h, skip_gate);
        return gl::add(g, base.y, h);
    }

    ValueId delta(gl::Graph& g) const override {
        const int64_t r = rank(), k = layer_.k;
        const ValueId down = param("lora_down.weight"), up = param("lora_up.weight");
        ValueId dw;
        if (tucker()) {
            // [R(i) k k, R(j)] @ down [R(j), in] -> [R(i), k k in]; up [out, R(i)] @ that.
            const ValueId t = gl::matmul(g, gl::reshape(g, param("lora_mid.weight"), Shape{r * k * k, r}), down);
            dw = gl::matmul(g, up, gl::reshape(g, t, Shape{r, k * k * layer_.in}));
        } else {
            dw = gl::matmul(g, up, gl::reshape(g, down, Shape{r, layer_.fan_in()}));
        }
        return gl::scale(g, gl::reshape(g, dw, layer_.graph_shape()), scale(1.0f));
    }

    std::vector<float> host_delta(const ReadFn& read, float multiplier) const override {
        const int64_t r = rank(), inner = layer_.fan_in();
        const std::vector<float> up = read(param("lora_up.weight"));
        std::vector<float> down = read(param("lora_down.weight"));
        if (tucker()) {
            // down as [R, k k in]: mid [R, k k, R] contracted with down [R, in].
            const int64_t kk = int64_t(layer_.k) * layer_.k, in = layer_.in;
            const std::vector<float> mid = read(param("lora_mid.weight"));
            std::vector<float> t(size_t(r * inner));
            for (int64_t i = 0; i < r; i++)
                for (int64_t p = 0; p < kk; p++)
                    for (int64_t c = 0; c < in; c++) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < r; j++)
                            acc += double(mid[size_t((i * kk + p) * r + j)]) * down[size_t(j * in + c)];
                        t[size_t(i * inner + p * in + c)] = float(acc);
                    }
            down.swap(t);
        }
        // Linear [out, in]; conv [out, k, k, in], the element order of down [R, k, k, in].
        const float s = scale(multiplier);
        std::vector<float> d(size_t(layer_.out * inner));
        for (int64_t o = 0; o < layer_.out; o++)
            for (int64_t i = 0; i < inner; i++) {
                double acc = 0.0;
                for (int64_t q = 0; q < r; q++) acc += double(up[size_t(o * r + q)]) * down[size_t(q * inner + i)];
                d[size_t(o * inner + i)] = float(s * acc);
            }
        return d;
    }

    void init_params(const WriteFn& write, std::mt19937_64& rng) const override {
        const int64_t r = rank();
        if (tucker()) {
            write(param("lora_down.weight"), kaiming_uniform(size_t(r * layer_.in), layer_.in, rng));
            const int64_t mid_fan = r * layer_.k * layer_.k;
            write(param("lora_mid.weight"), kaiming_uniform(size_t(r * mid_fan), mid_fan, rng));
        } else {
            write(param("lora_down.weight"), kaiming_uniform(size_t(r * layer_.fan_in()), layer_.fan_in(), rng));
        }
        write(param("lora_up.weight"), std::vector<float>(size_t(layer_.out * r), 0.0f));
    }
};

class LoconType final : public ModuleType {
public:
    const char* algo() const override { return "lora"; }
    const char* title() const override { return "LoRA"; }
    std::vector<std::string> markers() const override { return {"lora_down.weight"}; }
    std::vector<std::string> aliases() const override { return {"locon"}; }

    std::unique_ptr<Module> make(const Layer& layer, const ModuleSettings& s) const override {
        return std::make_unique<Locon>(*this, layer, s);
    }

    std::unique_ptr<Module> read(const Layer& layer, const FileModule& f, ModuleSettings s) const override {
        if (!f.has("lora_down.weight")) return nullptr;
        s.rank = read_rank(f, "lora_down.weight", 0);
        // LyCORIS's create_network_from_weights keeps the file's alpha; for the rest (txt2img,
        // gl-merge, networks.lora) alpha = rank and the file's alpha folds into up when it is loaded.
        s.alpha = s.kohya_dropouts ? 0.0f : f.alpha;
        s.tucker = f.has("lora_mid.weight");
        s.dora = f.has("dora_scale");
        if (s.dora) s.dora_on_output = f.shape("dora_scale").at(0) == layer.out;
        return std::make_unique<Locon>(*this, layer, s);
    }
};

}  // namespace

const ModuleType& locon_type() {
    static const LoconType t;
    return t;
}

}  // namespace lora
