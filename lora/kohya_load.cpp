// load_lora (lora/kohya.h): a file's tensors into a network's modules, whatever their type.
#include <algorithm>
#include <cmath>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "lora/kohya.h"

namespace lora {

namespace {

// [O, I, k, k] -> [O, k, k, I] (PyTorch's conv layout -> ours).
std::vector<float> oihw_to_ohwi(const std::vector<float>& x, int64_t O, int64_t k, int64_t I) {
    std::vector<float> y(x.size());
    for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < k * k; p++)
            for (int64_t i = 0; i < I; i++) y[size_t((o * k * k + p) * I + i)] = x[size_t((o * I + i) * k * k + p)];
    return y;
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

// Shapes that hold the same elements in the same order: equal but for trailing unit axes
// ([out, r] and [out, r, 1, 1], as files of 1x1 convs hold either).
bool same_shape(std::vector<int64_t> a, std::vector<int64_t> b) {
    while (a.size() > 1 && a.back() == 1) a.pop_back();
    while (b.size() > 1 && b.back() == 1) b.pop_back();
    return a == b;
}

}  // namespace

LoadReport load_lora(const gl::io::TensorSource& src, const LoraNetwork& net, gl::Runtime& rt,
                     const LdmNames& ldm) {
    return load_lora(
        src, net, [&rt](gl::ValueId v, const std::vector<float>& x) { rt.write_f32(v, x); }, ldm);
}

LoadReport load_lora(const gl::io::TensorSource& src, const LoraNetwork& net, const WriteFn& write,
                     const LdmNames& ldm) {
    LoadReport rep;
    // A module is in a layout when its first tensor is.
    auto first = [&](LoraFormat f, const Module& m) { return file_key(f, m.layer(), m.tensors().front().suffix, ldm); };

    // The layout naming the most of the network's modules.
    size_t best = 0;
    for (LoraFormat f : kLoraFormats) {
        size_t n = 0;
        for (const Module& m : net.modules()) {
            const std::string k = first(f, m);
            if (!k.empty() && src.has(k)) n++;
        }
        if (n > best) best = n, rep.format = f;
    }
    GL_CHECK(best > 0, "lora load ", src.origin(), ": holds none of the network's ", net.modules().size(),
             " modules in any known layout (kohya, diffusers, peft)");

    std::set<std::string> used;
    bool first_loaded = true;
    for (const Module& m : net.modules()) {
        const Layer& l = m.layer();
        const std::string lead = first(rep.format, m);
        if (lead.empty() || !src.has(lead)) {
            rep.missing.push_back(m.key());
            continue;
        }
        // Every tensor present, of its rank and shape.
        std::vector<std::string> names;
        for (const Tensor& t : m.tensors()) {
            const std::string k = file_key(rep.format, l, t.suffix, ldm);
            GL_CHECK(!k.empty() && src.has(k), "lora load ", src.origin(), ": ", lead, " has no ",
                     k.empty() ? m.key() + "." + t.suffix : k);
            const std::vector<int64_t> fs = src.info(k).shape;
            if (t.rank_axis >= 0) {
                const int64_t r = int64_t(fs.size()) > t.rank_axis ? fs[size_t(t.rank_axis)] : 0;
                GL_CHECK(r == m.rank(), "lora load ", src.origin(), ": ", k, " is ", shape_str(fs), ", rank ", r,
                         " where the network has rank ", m.rank());
            }
            GL_CHECK(same_shape(fs, t.file_shape), "lora load ", src.origin(), ": ", k, " is ", shape_str(fs),
                     ", expected ", shape_str(t.file_shape));
            names.push_back(k);
        }
        float alpha = float(m.rank());  // layouts without alpha mean scale 1
        const std::string ak = file_key(rep.format, l, "alpha", ldm);
        if (rep.format == LoraFormat::kohya || rep.format == LoraFormat::kohya_ldm) {
            if (src.has(ak)) {
                const gl::io::TensorInfo ai = src.info(ak);
                GL_CHECK(ai.numel() == 1, "lora load ", src.origin(), ": ", ak, " is ", shape_str(ai.shape),
                         ", expected a scalar");
                src.read(ak, &alpha, gl::DType::f32);
                GL_CHECK(std::isfinite(alpha), "lora load ", src.origin(), ": ", ak, " is not finite");
                if (alpha == 0.0f) alpha = float(m.rank());  // kohya: alpha 0 means alpha = rank
                used.insert(ak);
            }
        }
        if (first_loaded) rep.file_alpha = alpha, first_loaded = false;

        const std::string fold = m.alpha_tensor();
        for (size_t i = 0; i < names.size(); i++) {
            const Tensor& t = m.tensors()[i];
            std::vector<float> v(size_t(src.info(names[i]).numel()));
            src.read(names[i], v.data(), gl::DType::f32);
            const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
            GL_CHECK(bad == v.end(), "lora load ", src.origin(), ": ", names[i], " holds ",
                     std::isnan(*bad) ? "NaN" : "inf", " (element ", bad - v.begin(),
                     "); a LoRA with non-finite weights would break every output");
            if (t.conv_k > 1) v = oihw_to_ohwi(v, t.file_shape[0], t.conv_k, t.file_shape[1]);
            if (t.suffix == fold && alpha != m.alpha()) {
                const float f = alpha / m.alpha();
                for (float& e : v) e *= f;
            }
            write(t.id, v);
            used.insert(names[i]);
        }
        rep.modules++;
    }
    for (const gl::io::TensorInfo& t : src.list())
        if (!used.count(t.name)) rep.unexpected.push_back(t.name);
    return rep;
}

}  // namespace lora
