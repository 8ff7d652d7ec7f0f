// LoHa (Hyeon-Woo et al. 2022, FedPara), as LyCORIS's LohaModule holds it: a Hadamard product of
// two rank-R products, dW = s (w1_a @ w1_b) * (w2_a @ w2_b), s = alpha / R, with
// hada_w{1,2}_a [out, R] and hada_w{1,2}_b [R, in k k] (2-D even for a conv: its columns in
// PyTorch's (in, kh, kw) order). With use_tucker on a k x k conv: hada_w{1,2}_a [R, out],
// hada_w{1,2}_b [R, in] and cores hada_t{1,2} [R, R, k, k], each factor
// R1[p, r, ..] = sum_ij t1[i, j, ..] w1_a[i, p] w1_b[j, r]. Init: w1_a N(0, 0.1), w1_b and w2_b
// N(0, 1), w2_a zero (so dW starts at 0), cores N(0, 0.1). The graph holds every tensor in the
// file's shape; dW is rebuilt every step.
#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "lora/module.h"

namespace lora {

namespace {

using gl::Shape;
using gl::ValueId;

class Loha final : public Module {
public:
    using Module::Module;

    std::string alpha_tensor() const override { return "hada_w1_a"; }

protected:
    bool tucker() const { return s_.tucker && layer_.kind == ModuleKind::conv && layer_.k > 1; }
    int64_t kk() const { return int64_t(layer_.k) * layer_.k; }

    void create(gl::Graph& g) override {
        const int64_t r = rank(), o = layer_.out, i = layer_.in, k = layer_.k;
        for (const char* n : {"1", "2"}) {
            const std::string w = std::string("hada_w") + n;
            if (tucker()) {
                add(g, w + "_a", Shape{r, o}, {r, o}, 1, 0);
                add(g, w + "_b", Shape{r, i}, {r, i}, 1, 0);
            } else {
                add(g, w + "_a", Shape{o, r}, {o, r}, 1, 1);
                add(g, w + "_b", Shape{r, i * kk()}, {r, i * kk()}, 1, 0);
            }
        }
        if (tucker())
            for (const char* t : {"hada_t1", "hada_t2"}) add(g, t, Shape{r, r, k, k}, {r, r, k, k}, 1, 0);
    }

    // One factor in the graph's weight layout.
    ValueId factor(gl::Graph& g, const char* n) const {
        const std::string w = std::string("hada_w") + n;
        const ValueId a = param(w + "_a"), b = param(w + "_b");
        if (!tucker()) return gl::matmul(g, a, b);  // [out, in k k] in (in, kh, kw) order
        // t [i, j, kh, kw] -> [i, kh, kw, j]; @ b [j, in] -> [i, kh kw in]; a^T [out, i] @ that.
        const int64_t r = rank();
        const ValueId t = gl::contiguous(g, gl::permute(g, param(std::string("hada_t") + n), {0, 2, 3, 1}));
        const ValueId tb = gl::matmul(g, gl::reshape(g, t, Shape{r * kk(), r}), b);
        return gl::matmul(g, a, gl::reshape(g, tb, Shape{r, kk() * layer_.in}), true, false);
    }

    ValueId delta(gl::Graph& g) const override {
        ValueId d = gl::scale(g, gl::mul(g, factor(g, "1"), factor(g, "2")), scale(1.0f));
        if (layer_.kind == ModuleKind::conv && !tucker()) {
            const int64_t k = layer_.k;
            d = gl::reshape(g, d, Shape{layer_.out, layer_.in, k, k});
            d = gl::contiguous(g, gl::permute(g, d, {0, 2, 3, 1}));
        }
        return gl::reshape(g, d, layer_.graph_shape());
    }

    // One factor on the host, [out, k k in] in the graph's order.
    std::vector<double> host_factor(const ReadFn& read, const char* n) const {
        const std::string w = std::string("hada_w") + n;
        const std::vector<float> a = read(param(w + "_a")), b = read(param(w + "_b"));
        const int64_t r = rank(), o = layer_.out, in = layer_.in, kk_ = kk();
        std::vector<double> f(size_t(o * in * kk_), 0.0);
        if (!tucker()) {
            for (int64_t p = 0; p < o; p++)
                for (int64_t c = 0; c < in; c++)
                    for (int64_t s = 0; s < kk_; s++) {
                        double acc = 0.0;  // b's column (c, s) in PyTorch's order
                        for (int64_t q = 0; q < r; q++) acc += double(a[size_t(p * r + q)]) * b[size_t(q * in * kk_ + c * kk_ + s)];
                        f[size_t((p * kk_ + s) * in + c)] = acc;
                    }
            return f;
        }
        const std::vector<float> t = read(param(std::string("hada_t") + n));  // [i, j, kk]
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < r; j++)
                for (int64_t s = 0; s < kk_; s++) {
                    const double tij = t[size_t((i * r + j) * kk_ + s)];
                    for (int64_t p = 0; p < o; p++) {
                        const double ta = tij * a[size_t(i * o + p)];
                        for (int64_t c = 0; c < in; c++) f[size_t((p * kk_ + s) * in + c)] += ta * b[size_t(j * in + c)];
                    }
                }
        return f;
    }

    std::vector<float> host_delta(const ReadFn& read, float multiplier) const override {
        const std::vector<double> f1 = host_factor(read, "1"), f2 = host_factor(read, "2");
        const double s = double(scale(multiplier));
        std::vector<float> d(f1.size());
        for (size_t i = 0; i < d.size(); i++) d[i] = float(s * f1[i] * f2[i]);
        return d;
    }

    void init_params(const WriteFn& write, std::mt19937_64& rng) const override {
        auto n = [&](const char* s) { return size_t(numel(s)); };
        if (tucker())
            for (const char* t : {"hada_t1", "hada_t2"}) write(param(t), normal(n(t), 0.1f, rng));
        write(param("hada_w1_b"), normal(n("hada_w1_b"), 1.0f, rng));
        write(param("hada_w1_a"), normal(n("hada_w1_a"), 0.1f, rng));
        write(param("hada_w2_b"), normal(n("hada_w2_b"), 1.0f, rng));
        write(param("hada_w2_a"), std::vector<float>(n("hada_w2_a"), 0.0f));
    }

    int64_t numel(const std::string& suffix) const {
        int64_t n = 1;
        for (int64_t d : tensor(suffix)->file_shape) n *= d;
        return n;
    }
};

class LohaType final : public ModuleType {
public:
    const char* algo() const override { return "loha"; }
    const char* title() const override { return "LoHa"; }
    std::vector<std::string> markers() const override { return {"hada_w1_a"}; }

    std::unique_ptr<Module> make(const Layer& layer, const ModuleSettings& s) const override {
        return std::make_unique<Loha>(*this, layer, s);
    }

    std::unique_ptr<Module> read(const Layer& layer, const FileModule& f, ModuleSettings s) const override {
        if (!f.has("hada_w1_a")) return nullptr;
        s.rank = read_rank(f, "hada_w1_b", 0);  // ComfyUI and LyCORIS: R from hada_w1_b
        s.alpha = f.alpha;
        s.tucker = f.has("hada_t1");
        s.dora = f.has("dora_scale");
        if (s.dora) s.dora_on_output = f.shape("dora_scale").at(0) == layer.out;
        return std::make_unique<Loha>(*this, layer, s);
    }
};

}  // namespace

const ModuleType& loha_type() {
    static const LohaType t;
    return t;
}

}  // namespace lora
