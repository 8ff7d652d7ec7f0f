#include "models/nn/weights.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/runtime.h"

namespace nn {

using gl::fail;

gl::ValueId Weights::get(const std::string& local, const gl::Shape& shape, WeightLayout layout) {
    std::string name = full(local);
    auto it = index_.find(name);
    if (it != index_.end()) {
        const WeightEntry& e = entries_[it->second];
        GL_CHECK(g_.shape(e.id) == shape, "weights: ", name, " requested as ", shape.str(), " but exists as ",
                 g_.shape(e.id).str());
        GL_CHECK(e.scale == gl::kNoValue, "weights: ", name, " is a quantized matrix, asked for as a plain weight");
        return e.id;
    }
    gl::ValueId id = g_.weight(name, dtype_, shape);
    g_.set_name(id, name);  // exactly the key, whatever graph scope is open
    index_[name] = entries_.size();
    entries_.push_back({name, id, layout});
    return id;
}

gl::QuantWeight Weights::matrix(const std::string& local, const gl::Shape& shape, WeightLayout layout) {
    if (format_ == gl::WeightFormat::dense) return {get(local, shape, layout), gl::kNoValue};
    std::string name = full(local);
    auto it = index_.find(name);
    if (it != index_.end()) {
        const WeightEntry& e = entries_[it->second];
        GL_CHECK(g_.shape(e.id) == shape, "weights: ", name, " requested as ", shape.str(), " but exists as ",
                 g_.shape(e.id).str());
        GL_CHECK(e.scale != gl::kNoValue, "weights: ", name, " is a plain weight, asked for as a quantized matrix");
        return {e.id, e.scale};
    }
    GL_CHECK(shape.nd >= 1, "weights: ", name, ": a matrix needs at least one dim");
    gl::ValueId id = g_.weight(name, gl::weight_format_dtype(format_), shape);
    g_.set_name(id, name);
    gl::ValueId scale = g_.weight(name + ".scale", gl::DType::f32, gl::Shape{shape.d[0]});
    g_.set_name(scale, name + ".scale");
    index_[name] = entries_.size();
    entries_.push_back({name, id, layout, scale});
    return {id, scale};
}

void Weights::push(const std::string& scope) { scope_.push_back(scope); }

void Weights::pop() {
    GL_CHECK(!scope_.empty(), "weights: pop without push");
    scope_.pop_back();
}

std::string Weights::full(const std::string& local) const {
    std::string s;
    for (const std::string& p : scope_) s += p + ".";
    return s + local;
}

namespace {

// [O][I][kh][kw] -> [O][kh][kw][I] (s: the leaf's [O, kh, kw, I]); output channels over threads.
template <class E>
void to_ohwi_typed(const E* in, E* out, int64_t O, int64_t kh, int64_t kw, int64_t I) {
    gl::parallel_for(O, 4, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; o++)
            for (int64_t i = 0; i < I; i++)
                for (int64_t y = 0; y < kh; y++)
                    for (int64_t x = 0; x < kw; x++)
                        out[((o * kh + y) * kw + x) * I + i] = in[((o * I + i) * kh + y) * kw + x];
    });
}

void to_ohwi(const unsigned char* in, unsigned char* out, const gl::Shape& s, size_t es) {
    const int64_t O = s[0], kh = s[1], kw = s[2], I = s[3];
    switch (es) {
        case 1: return to_ohwi_typed(in, out, O, kh, kw, I);
        case 2: return to_ohwi_typed(reinterpret_cast<const uint16_t*>(in), reinterpret_cast<uint16_t*>(out), O, kh, kw, I);
        case 4: return to_ohwi_typed(reinterpret_cast<const uint32_t*>(in), reinterpret_cast<uint32_t*>(out), O, kh, kw, I);
        default: fail("conv weight layout: element size ", es, " not supported");
    }
}

}  // namespace

void write_weight(const Weights& w, const WeightEntry& e, const float* values, gl::Runtime& rt) {
    const gl::Graph& g = rt.plan().graph;
    const gl::Value& v = g.v(e.id);
    if (e.scale == gl::kNoValue) {
        rt.write(e.id, values, gl::DType::f32);
        return;
    }
    const int64_t rows = v.shape()[0], cols = rows > 0 ? v.numel() / rows : 0;
    std::vector<unsigned char> codes(size_t(v.numel()));
    std::vector<float> scale(static_cast<size_t>(rows));
    gl::quantize_rows(values, rows, cols, w.format(), codes.data(), scale.data(), e.name);
    rt.write(e.id, codes.data(), v.dtype);
    rt.write(e.scale, scale.data(), gl::DType::f32);
}

LoadReport load_weights(const Weights& w, const gl::io::TensorSource& src,
                        const std::function<std::string(const std::string&)>& key_of, gl::Runtime& rt,
                        const std::vector<std::string>& ignore_prefixes, bool allow_missing) {
    LoadReport r;
    std::set<std::string> used;
    const gl::Graph& g = rt.plan().graph;
    std::vector<unsigned char> buf, perm;
    std::vector<float> f32, scale;
    for (const WeightEntry& e : w.entries()) {
        std::string key = key_of(e.name);
        if (key.empty() || !src.has(key)) {
            r.missing.push_back(e.name + (key.empty() ? "" : " (" + key + ")"));
            continue;
        }
        used.insert(key);
        gl::io::TensorInfo info = src.info(key);
        const gl::Value& v = g.v(e.id);
        const gl::Shape& s = v.shape();
        // The checkpoint shape this leaf expects: OIHW for conv leaves, else the leaf's own,
        // with trailing 1s allowed (1x1 conv weights feeding linear leaves).
        std::vector<int64_t> want = s.vec();
        if (e.layout == WeightLayout::conv_ohwi) want = {s[0], s[3], s[1], s[2]};
        std::vector<int64_t> got = info.shape;
        while (got.size() > want.size() && got.back() == 1) got.pop_back();
        if (got != want) {
            std::string ws, gs;
            for (int64_t d : want) ws += std::to_string(d) + " ";
            for (int64_t d : info.shape) gs += std::to_string(d) + " ";
            fail(src.origin(), ": tensor ", key, " has shape [", gs, "], ", e.name, " needs [", ws, "]");
        }
        const size_t n = size_t(info.numel());
        if (e.scale == gl::kNoValue) {
            const size_t es = gl::dtype_size(v.dtype);
            buf.resize(n * es);
            src.read(key, buf.data(), v.dtype);
            if (e.layout == WeightLayout::conv_ohwi) {
                perm.resize(buf.size());
                to_ohwi(buf.data(), perm.data(), s, es);
                buf.swap(perm);
            }
            rt.write(e.id, buf.data(), v.dtype);
            r.bytes += buf.size();
        } else {
            // A quantized matrix: read as f32 and quantized per row in the checkpoint's layout (an
            // OIHW row holds the same elements as its OHWI row), then the codes re-laid out, so the
            // host holds one tensor in f32 and two in codes at most.
            const int64_t rows = s[0], cols = int64_t(n) / std::max<int64_t>(rows, 1);
            f32.resize(n);
            src.read(key, f32.data(), gl::DType::f32);
            buf.resize(n);
            scale.resize(size_t(rows));
            gl::quantize_rows(f32.data(), rows, cols, w.format(), buf.data(), scale.data(), e.name);
            if (e.layout == WeightLayout::conv_ohwi) {
                perm.resize(n);
                to_ohwi(buf.data(), perm.data(), s, 1);
                buf.swap(perm);
            }
            rt.write(e.id, buf.data(), v.dtype);
            rt.write(e.scale, scale.data(), gl::DType::f32);
            r.bytes += n + size_t(rows) * sizeof(float);
        }
        r.tensors++;
    }
    for (const gl::io::TensorInfo& t : src.list()) {
        if (used.count(t.name)) continue;
        bool ignored = false;
        for (const std::string& p : ignore_prefixes) ignored = ignored || t.name.rfind(p, 0) == 0;
        if (!ignored) r.unexpected.push_back(t.name);
    }
    if (!r.missing.empty() && !allow_missing) {
        std::string list;
        for (size_t i = 0; i < r.missing.size() && i < 20; i++) list += "\n  " + r.missing[i];
        if (r.missing.size() > 20) list += gl::cat("\n  ... and ", r.missing.size() - 20, " more");
        fail(src.origin(), ": ", r.missing.size(), " weights missing:", list);
    }
    return r;
}

}  // namespace nn
