// LoKr (Yeh et al. 2023, LyCORIS's LokrModule): dW = s kron(W1, W2), s = alpha / R.
// out = a b and in = c d with (a, b) = factorization(out, factor), (c, d) = factorization(in,
// factor) (a <= b, c <= d; unbalanced_factorization swaps a and b). W1 [a, c] is lokr_w1, or
// lokr_w1_a [a, R] @ lokr_w1_b [R, c] with decompose_both when R < max(a, c) / 2. W2 [b, d] (a
// conv's [b, d, kh, kw]) is lokr_w2 when R >= max(b, d) / 2 (or full_matrix), else lokr_w2_a
// [b, R] @ lokr_w2_b [R, d (kh kw)]; a k x k conv with use_tucker: lokr_w2_a [R, b], lokr_w2_b
// [R, d] and lokr_t2 [R, R, kh, kw], W2[p, r, ..] = sum_ij t2[i, j, ..] w2_a[i, p] w2_b[j, r].
// With both factors full, alpha is the rank (s = 1). kron(W1, W2)[i b + j, l d + m] = W1[i, l] W2[j, m]
// (kernel positions riding with W2), built as a broadcast product [a, 1, c, 1] * [1, b, 1, d].
// Init: W2 zero (lokr_w2, or lokr_w2_b), every other tensor Kaiming-uniform (W1 is not zero).
// kohya passes the args as strings: factor goes through int(), decompose_both is used as given
// (any text, "False" included, is true), full_matrix and unbalanced_factorization through str_bool.
#include <algorithm>
#include <cctype>
#include <climits>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "lora/module.h"

namespace lora {

namespace {

using gl::Shape;
using gl::ValueId;

struct LokrArgs : TypeArgs {
    int factor = -1;
    bool decompose_both = false, full_matrix = false, unbalanced = false;
};

// LyCORIS's factorization(dimension, factor) (functional/general.py).
std::pair<int64_t, int64_t> factorization(int64_t dim, int64_t factor) {
    if (factor > 0 && dim % factor == 0) {
        int64_t m = factor, n = dim / factor;
        if (m > n) std::swap(m, n);
        return {m, n};
    }
    if (factor < 0) factor = dim;
    int64_t m = 1, n = dim;
    const int64_t length = m + n;
    while (m < n) {
        int64_t nm = m + 1;
        while (dim % nm != 0) nm++;
        const int64_t nn = dim / nm;
        if (nm + nn > length || nm > factor) break;
        m = nm, n = nn;
    }
    if (m > n) std::swap(m, n);
    return {m, n};
}

// Which factors a module has, and their sizes.
struct Structure {
    int64_t a = 1, b = 1, c = 1, d = 1;
    bool w1_full = true, w2_full = true, tucker = false;
};

class Lokr final : public Module {
public:
    Lokr(const ModuleType& t, Layer l, ModuleSettings s, Structure st) : Module(t, std::move(l), fix(s, st)), st_(st) {}

    std::string alpha_tensor() const override {
        if (st_.w1_full && st_.w2_full) return "";
        return st_.w1_full ? "lokr_w1" : "lokr_w1_a";
    }

protected:
    static ModuleSettings fix(ModuleSettings s, const Structure& st) {
        if (st.w1_full && st.w2_full) s.alpha = float(s.rank);  // LyCORIS: scale 1
        return s;
    }
    int64_t kk() const { return int64_t(layer_.k) * layer_.k; }
    bool conv() const { return layer_.kind != ModuleKind::linear; }  // LyCORIS's conv branch (1x1 too)

    void create(gl::Graph& g) override {
        const int64_t r = rank(), k = layer_.k;
        if (st_.w1_full) {
            add(g, "lokr_w1", Shape{st_.a, st_.c}, {st_.a, st_.c});
        } else {
            add(g, "lokr_w1_a", Shape{st_.a, r}, {st_.a, r}, 1, 1);
            add(g, "lokr_w1_b", Shape{r, st_.c}, {r, st_.c}, 1, 0);
        }
        if (st_.w2_full) {
            const std::vector<int64_t> f =
                conv() ? std::vector<int64_t>{st_.b, st_.d, k, k} : std::vector<int64_t>{st_.b, st_.d};
            add(g, "lokr_w2", Shape::of(f), f);
        } else if (st_.tucker) {
            add(g, "lokr_w2_a", Shape{r, st_.b}, {r, st_.b}, 1, 0);
            add(g, "lokr_w2_b", Shape{r, st_.d}, {r, st_.d}, 1, 0);
            add(g, "lokr_t2", Shape{r, r, k, k}, {r, r, k, k}, 1, 0);
        } else {
            add(g, "lokr_w2_a", Shape{st_.b, r}, {st_.b, r}, 1, 1);
            add(g, "lokr_w2_b", Shape{r, st_.d * kk()}, {r, st_.d * kk()}, 1, 0);
        }
    }

    // W2 as [b, kh kw, d]: the kernel positions before d, as the graph's conv weights hold them.
    ValueId w2(gl::Graph& g) const {
        const int64_t r = rank(), K = kk();
        if (st_.tucker) {
            const ValueId t = gl::contiguous(g, gl::permute(g, param("lokr_t2"), {0, 2, 3, 1}));  // [i, kh, kw, j]
            const ValueId tb = gl::matmul(g, gl::reshape(g, t, Shape{r * K, r}), param("lokr_w2_b"));
            return gl::matmul(g, param("lokr_w2_a"), gl::reshape(g, tb, Shape{r, K * st_.d}), true, false);
        }
        const ValueId w = st_.w2_full ? param("lokr_w2") : gl::matmul(g, param("lokr_w2_a"), param("lokr_w2_b"));
        if (K == 1) return gl::reshape(g, w, Shape{st_.b, st_.d});
        // PyTorch's (d, kh, kw) -> (kh, kw, d).
        return gl::contiguous(g, gl::permute(g, gl::reshape(g, w, Shape{st_.b, st_.d, K}), {0, 2, 1}));
    }

    ValueId delta(gl::Graph& g) const override {
        const ValueId w1 = st_.w1_full ? param("lokr_w1") : gl::matmul(g, param("lokr_w1_a"), param("lokr_w1_b"));
        const int64_t K = kk();
        const ValueId kron = gl::mul(g, gl::reshape(g, w1, Shape{st_.a, 1, st_.c, 1}),
                                     gl::reshape(g, w2(g), Shape{1, st_.b * K, 1, st_.d}));  // [a, b K, c, d]
        return gl::scale(g, gl::reshape(g, kron, layer_.graph_shape()), scale(1.0f));
    }

    std::vector<double> matmul_host(const std::vector<float>& x, const std::vector<float>& y, int64_t m, int64_t q,
                                    int64_t n) const {
        std::vector<double> z(size_t(m * n), 0.0);
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < q; p++)
                for (int64_t j = 0; j < n; j++) z[size_t(i * n + j)] += double(x[size_t(i * q + p)]) * y[size_t(p * n + j)];
        return z;
    }

    std::vector<float> host_delta(const ReadFn& read, float multiplier) const override {
        const int64_t r = rank(), K = kk(), a = st_.a, b = st_.b, c = st_.c, d = st_.d;
        std::vector<double> w1;
        if (st_.w1_full) {
            const std::vector<float> v = read(param("lokr_w1"));
            w1.assign(v.begin(), v.end());
        } else {
            w1 = matmul_host(read(param("lokr_w1_a")), read(param("lokr_w1_b")), a, r, c);
        }
        std::vector<double> w2(size_t(b * K * d), 0.0);  // [b, K, d]
        if (st_.tucker) {
            const std::vector<float> t = read(param("lokr_t2")), wa = read(param("lokr_w2_a")), wb = read(param("lokr_w2_b"));
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < r; j++)
                    for (int64_t s = 0; s < K; s++)
                        for (int64_t p = 0; p < b; p++)
                            for (int64_t m = 0; m < d; m++)
                                w2[size_t((p * K + s) * d + m)] +=
                                    double(t[size_t((i * r + j) * K + s)]) * wa[size_t(i * b + p)] * wb[size_t(j * d + m)];
        } else {
            std::vector<double> v;  // [b, d, K]
            if (st_.w2_full) {
                const std::vector<float> f = read(param("lokr_w2"));
                v.assign(f.begin(), f.end());
            } else {
                v = matmul_host(read(param("lokr_w2_a")), read(param("lokr_w2_b")), b, r, d * K);
            }
            for (int64_t p = 0; p < b; p++)
                for (int64_t m = 0; m < d; m++)
                    for (int64_t s = 0; s < K; s++) w2[size_t((p * K + s) * d + m)] = v[size_t((p * d + m) * K + s)];
        }
        const double sc = double(scale(multiplier));
        std::vector<float> out(size_t(a * b * K * c * d));
        for (int64_t i = 0; i < a; i++)
            for (int64_t j = 0; j < b * K; j++)
                for (int64_t l = 0; l < c; l++)
                    for (int64_t m = 0; m < d; m++)
                        out[size_t(((i * b * K + j) * c + l) * d + m)] =
                            float(sc * w1[size_t(i * c + l)] * w2[size_t(j * d + m)]);
        return out;
    }

    void init_params(const WriteFn& write, std::mt19937_64& rng) const override {
        // LyCORIS's order: W2 (zero where it must be), then W1. fan_in = shape[1] * prod(shape[2:]).
        auto kaiming = [&](const std::string& suffix) {
            const std::vector<int64_t>& s = tensor(suffix)->file_shape;
            int64_t n = 1, fan = 1;
            for (size_t i = 0; i < s.size(); i++) n *= s[i], fan *= i ? s[i] : 1;
            write(param(suffix), kaiming_uniform(size_t(n), fan, rng));
        };
        auto zero = [&](const std::string& suffix) {
            int64_t n = 1;
            for (int64_t e : tensor(suffix)->file_shape) n *= e;
            write(param(suffix), std::vector<float>(size_t(n), 0.0f));
        };
        if (st_.w2_full) {
            zero("lokr_w2");
        } else {
            if (st_.tucker) kaiming("lokr_t2");
            kaiming("lokr_w2_a");
            zero("lokr_w2_b");
        }
        if (st_.w1_full) {
            kaiming("lokr_w1");
        } else {
            kaiming("lokr_w1_a");
            kaiming("lokr_w1_b");
        }
    }

private:
    Structure st_;
};

bool str_bool(const std::string& v) {  // LyCORIS's utils.str_bool
    std::string l = v;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    return l != "false";
}

class LokrType final : public ModuleType {
public:
    const char* algo() const override { return "lokr"; }
    const char* title() const override { return "LoKr"; }
    std::vector<std::string> markers() const override { return {"lokr_w1", "lokr_w1_a"}; }

    std::shared_ptr<const TypeArgs> parse_args(std::vector<std::pair<std::string, std::string>>& args) const override {
        auto own = std::make_shared<LokrArgs>();
        std::erase_if(args, [&](const std::pair<std::string, std::string>& kv) {
            const auto& [k, v] = kv;
            if (k == "factor") {
                size_t used = 0;
                long f = 0;
                try {
                    f = std::stol(v, &used);
                } catch (const std::exception&) {
                    used = 0;
                }
                while (used < v.size() && std::isspace(static_cast<unsigned char>(v[used]))) used++;
                GL_CHECK(used == v.size() && used > 0 && f >= INT32_MIN && f <= INT32_MAX, "--network_args factor=", v,
                         ": LoKr's factor is an integer (-1, the default: the most balanced split)");
                own->factor = int(f);
            } else if (k == "decompose_both") {
                own->decompose_both = !v.empty();  // used as given: a non-empty string is true
            } else if (k == "full_matrix") {
                own->full_matrix = str_bool(v);
            } else if (k == "unbalanced_factorization") {
                own->unbalanced = str_bool(v);
            } else {
                return false;
            }
            return true;
        });
        return own;
    }

    std::unique_ptr<Module> make(const Layer& layer, const ModuleSettings& s) const override {
        static const LokrArgs defaults;
        const LokrArgs& o = s.own ? static_cast<const LokrArgs&>(*s.own) : defaults;
        Structure st;
        std::tie(st.a, st.b) = factorization(layer.out, o.factor);
        if (o.unbalanced) std::swap(st.a, st.b);
        std::tie(st.c, st.d) = factorization(layer.in, o.factor);
        const double r = s.rank;
        st.w1_full = !(o.decompose_both && r < double(std::max(st.a, st.c)) / 2 && !o.full_matrix);
        st.w2_full = r >= double(std::max(st.b, st.d)) / 2 || o.full_matrix;
        st.tucker = !st.w2_full && s.tucker && layer.kind == ModuleKind::conv && layer.k > 1;
        return std::make_unique<Lokr>(*this, layer, s, st);
    }

    std::unique_ptr<Module> read(const Layer& layer, const FileModule& f, ModuleSettings s) const override {
        if (!f.has("lokr_w1") && !f.has("lokr_w1_a")) return nullptr;
        Structure st;
        st.w1_full = f.has("lokr_w1");
        st.w2_full = f.has("lokr_w2");
        st.tucker = f.has("lokr_t2");
        auto dims = [&](const char* suffix) {
            const std::vector<int64_t> v = f.shape(suffix);
            GL_CHECK(v.size() >= 2, "lora: ", f.origin, ": ", f.name(suffix), " must have 2 or more dimensions");
            return v;
        };
        if (st.w1_full) {
            const auto w = dims("lokr_w1");
            st.a = w[0], st.c = w[1];
        } else {
            st.a = dims("lokr_w1_a")[0], st.c = dims("lokr_w1_b")[1];
        }
        const int64_t K = int64_t(layer.k) * layer.k;
        if (st.w2_full) {
            const auto w = dims("lokr_w2");
            st.b = w[0], st.d = w[1];
        } else if (st.tucker) {
            st.b = dims("lokr_w2_a")[1], st.d = dims("lokr_w2_b")[1];
        } else {
            st.b = dims("lokr_w2_a")[0];
            const int64_t cols = dims("lokr_w2_b")[1];
            GL_CHECK(cols % K == 0, "lora: ", f.origin, ": ", f.name("lokr_w2_b"), " has ", cols,
                     " columns, not a multiple of the kernel's ", K);
            st.d = cols / K;
        }
        GL_CHECK(st.a * st.b == layer.out && st.c * st.d == layer.in, "lora: ", f.origin, ": the LoKr factors of ",
                 layer.key, " make a ", st.a * st.b, " x ", st.c * st.d, " weight; the layer is ", layer.out, " x ",
                 layer.in);
        // ComfyUI and stable-diffusion.cpp: R from lokr_w2_b, else lokr_w1_b; 1 with both full.
        s.rank = !st.w2_full ? read_rank(f, "lokr_w2_b", 0) : !st.w1_full ? read_rank(f, "lokr_w1_b", 0) : 1;
        s.alpha = f.alpha;
        s.tucker = st.tucker;
        s.dora = f.has("dora_scale");
        if (s.dora) s.dora_on_output = f.shape("dora_scale").at(0) == layer.out;
        return std::make_unique<Lokr>(*this, layer, s, st);
    }
};

}  // namespace

const ModuleType& lokr_type() {
    static const LokrType t;
    return t;
}

}  // namespace lora
