#include "lora/kohya.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/checked.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sha256.h"

namespace lora {

const char* lora_format_name(LoraFormat f) {
    switch (f) {
        case LoraFormat::kohya: return "kohya";
        case LoraFormat::kohya_ldm: return "kohya (LDM names)";
        case LoraFormat::diffusers: return "diffusers";
        case LoraFormat::peft: return "peft";
    }
    return "?";
}

namespace {

// Python's str(float) for the values kohya writes ("1.0", "0.5", "16.0").
std::string py_float(float f) {
    char buf[64];
    if (std::floor(f) == f && std::fabs(f) < 1e15f) {
        std::snprintf(buf, sizeof buf, "%.1f", double(f));
    } else {
        // The shortest form that reads back as the same float.
        for (int prec = 6; prec <= 9; prec++) {
            std::snprintf(buf, sizeof buf, "%.*g", prec, double(f));
            if (std::strtof(buf, nullptr) == f) break;
        }
    }
    return buf;
}

// kohya: datetime.fromtimestamp(int(time.time())).isoformat(), the local time without a zone.
std::string local_now_iso() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    return buf;
}

gl::DType save_dtype(SavePrecision p) {
    return p == SavePrecision::fp16 ? gl::DType::f16 : p == SavePrecision::bf16 ? gl::DType::bf16 : gl::DType::f32;
}

// f32 values as the bytes of dtype t.
std::vector<uint8_t> encode(const std::vector<float>& x, gl::DType t) {
    std::vector<uint8_t> out(x.size() * gl::dtype_size(t));
    for (size_t i = 0; i < x.size(); i++) {
        if (t == gl::DType::f32) {
            std::memcpy(&out[i * 4], &x[i], 4);
        } else {
            const uint16_t h = t == gl::DType::f16 ? gl::f32_to_f16(x[i]) : gl::f32_to_bf16(x[i]);
            std::memcpy(&out[i * 2], &h, 2);
        }
    }
    return out;
}

// [O, k, k, I] <-> [O, I, k, k] (ours <-> PyTorch's conv layout).
std::vector<float> ohwi_to_oihw(const std::vector<float>& x, int64_t O, int64_t k, int64_t I) {
    std::vector<float> y(x.size());
    for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < k * k; p++)
            for (int64_t i = 0; i < I; i++) y[size_t((o * I + i) * k * k + p)] = x[size_t((o * k * k + p) * I + i)];
    return y;
}
std::vector<float> oihw_to_ohwi(const std::vector<float>& x, int64_t O, int64_t k, int64_t I) {
    std::vector<float> y(x.size());
    for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < k * k; p++)
            for (int64_t i = 0; i < I; i++) y[size_t((o * k * k + p) * I + i)] = x[size_t((o * I + i) * k * k + p)];
    return y;
}

}  // namespace

std::map<std::string, std::string> kohya_metadata(const LoraNetwork& net, const SaveOptions& opt) {
    const LoraConfig& c = net.config();
    const std::string reso = std::to_string(opt.resolution_w) + "x" + std::to_string(opt.resolution_h);
    std::map<std::string, std::string> md = {
        {"ss_network_module", "networks.lora"},
        {"ss_network_dim", std::to_string(c.rank)},
        {"ss_network_alpha", py_float(c.effective_alpha())},
        {"ss_network_dropout", c.dropout > 0.0f ? py_float(c.dropout) : "None"},  // kohya's --network_dropout
        {"ss_base_model_version", "sd_v1"},
        {"ss_v2", "False"},
        // sai_model_spec.build_metadata: ModelSpec 1.0.1; an SD1.x LoRA is a "diffusers" implementation.
        {"modelspec.sai_model_spec", "1.0.1"},
        {"modelspec.architecture", "stable-diffusion-v1/lora"},
        {"modelspec.implementation", "diffusers"},
        {"modelspec.title", opt.title},
        {"modelspec.date", local_now_iso()},
        {"modelspec.resolution", reso},
        {"modelspec.prediction_type", opt.prediction_type},
    };
    if (opt.clip_skip > 0) md["modelspec.encoder_layer"] = std::to_string(opt.clip_skip);
    // kohya writes the network args it was given as a JSON object of strings.
    std::string args;
    auto arg = [&](const std::string& k, const std::string& v) {
        args += (args.empty() ? "" : ", ") + ("\"" + k + "\": \"" + v + "\"");
    };
    if (c.conv_dim > 0) {
        arg("conv_dim", std::to_string(c.conv_dim));
        arg("conv_alpha", py_float(c.effective_conv_alpha()));
    }
    if (c.rank_dropout > 0.0f) arg("rank_dropout", py_float(c.rank_dropout));
    if (c.module_dropout > 0.0f) arg("module_dropout", py_float(c.module_dropout));
    if (!args.empty()) md["ss_network_args"] = "{" + args + "}";
    for (const auto& [k, v] : opt.training) md[k] = v;
    if (opt.minimum_metadata)
        std::erase_if(md, [](const auto& kv) {
            static const std::set<std::string> keep = {"ss_v2", "ss_base_model_version", "ss_network_module",
                                                       "ss_network_dim", "ss_network_alpha", "ss_network_args"};
            return !keep.count(kv.first) && kv.first.rfind("modelspec.", 0) != 0;
        });
    return md;
}

size_t save_kohya(const std::string& path, const LoraNetwork& net, const gl::Runtime& rt, const SaveOptions& opt) {
    return save_kohya(path, net, [&rt](gl::ValueId v) { return rt.read_f32(v); }, opt);
}

size_t save_kohya(const std::string& path, const LoraNetwork& net, const ReadFn& read, const SaveOptions& opt) {
    GL_CHECK(!net.modules().empty(), "lora save ", path, ": the network has no modules (was the model built?)");
    const gl::DType t = save_dtype(opt.precision);
    // Owned bytes first, then the descriptors pointing into them (no reallocation after).
    std::vector<std::vector<uint8_t>> bytes;
    bytes.reserve(net.modules().size() * 3);
    std::vector<gl::io::TensorToWrite> out;
    for (const LoraModule& m : net.modules()) {
        const auto [ds, us] = kohya_shapes(m);
        const std::vector<int64_t> dshape(ds.d.begin(), ds.d.begin() + ds.nd), ushape(us.d.begin(), us.d.begin() + us.nd);
        std::vector<float> down = read(m.down);
        if (m.kind == ModuleKind::conv) down = ohwi_to_oihw(down, m.rank, m.k, m.in);
        bytes.push_back(encode(down, t));
        out.push_back({m.key + ".lora_down.weight", t, dshape, nullptr});
        bytes.push_back(encode(read(m.up), t));
        out.push_back({m.key + ".lora_up.weight", t, ushape, nullptr});
        bytes.push_back(encode({m.alpha}, t));
        out.push_back({m.key + ".alpha", t, {}, nullptr});
    }
    for (size_t i = 0; i < out.size(); i++) out[i].data = bytes[i].data();
    std::map<std::string, std::string> md = kohya_metadata(net, opt);
    std::tie(md["sshs_model_hash"], md["sshs_legacy_hash"]) = kohya_model_hashes(out, md);
    gl::io::write_safetensors(path, out, md);
    return out.size();
}

namespace {

// The rank safetensors' Python package sorts tensors by (descending), before their names.
int python_dtype_rank(gl::DType t) {
    switch (t) {
        case gl::DType::f32: return 5;
        case gl::DType::i32: return 4;
        case gl::DType::bf16: return 3;
        case gl::DType::f16: return 2;
        case gl::DType::i8: return 1;
        case gl::DType::u8: return 0;
        case gl::DType::f8e4m3: break;  // never in a LoRA file
    }
    return -1;
}

std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

std::pair<std::string, std::string> kohya_model_hashes(const std::vector<gl::io::TensorToWrite>& tensors,
                                                       const std::map<std::string, std::string>& metadata) {
    std::vector<const gl::io::TensorToWrite*> order;
    for (const gl::io::TensorToWrite& t : tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const gl::io::TensorToWrite* a, const gl::io::TensorToWrite* b) {
        const int ra = python_dtype_rank(a->dtype), rb = python_dtype_rank(b->dtype);
        return ra != rb ? ra > rb : a->name < b->name;
    });
    // The header exactly as the package writes it: compact JSON, the metadata object first (empty
    // or not), tensors in data order, padded with spaces to a multiple of 8. (It orders the
    // metadata keys at random; the hashes depend only on the header's length.)
    // Built by appending: "literal" + a temporary sets off GCC 12's bogus -Wrestrict (its PR 105651).
    std::string meta;
    for (const auto& [k, v] : metadata) {
        if (k.rfind("ss_", 0) != 0) continue;
        if (!meta.empty()) meta += ',';
        meta += json_string(k) + ":" + json_string(v);
    }
    std::string header = "{\"__metadata__\":{" + meta + "}";
    std::vector<uint64_t> sizes;
    uint64_t offset = 0;
    for (const gl::io::TensorToWrite* t : order) {
        const uint64_t n = uint64_t(gl::checked_bytes(gl::checked_numel(t->shape.data(), t->shape.size(), t->name),
                                                      gl::dtype_size(t->dtype), t->name));
        std::string shape;
        for (int64_t d : t->shape) {
            if (!shape.empty()) shape += ',';
            shape += std::to_string(d);
        }
        header += ',';
        header += json_string(t->name) + ":{\"dtype\":\"" +
                  gl::io::stored_name(gl::io::stored_of(t->dtype)) + "\",\"shape\":[" + shape +
                  "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
        sizes.push_back(n);
        offset += n;
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));

    // The file is streamed piece by piece: the data area into one hash, the window into the other.
    constexpr uint64_t kLo = 0x100000, kHi = 0x110000;
    gl::io::Sha256 model, legacy;
    uint64_t at = 0;
    auto feed = [&](const void* p, uint64_t n, bool data) {
        if (data) model.update(p, size_t(n));
        const uint64_t lo = std::max(at, kLo), hi = std::min(at + n, kHi);
        if (lo < hi) legacy.update(static_cast<const uint8_t*>(p) + (lo - at), size_t(hi - lo));
        at += n;
    };
    feed(len, 8, false);
    feed(header.data(), header.size(), false);
    for (size_t i = 0; i < order.size(); i++) feed(order[i]->data, sizes[i], true);
    return {model.hex(), legacy.hex().substr(0, 8)};
}

namespace {

struct Keys {
    std::string down, up, alpha;  // alpha "" when the format has none
};

// The keys of module m in format f; down "" when the format cannot name it.
Keys keys_for(LoraFormat f, const LoraModule& m, const sd::UnetConfig* ucfg) {
    const std::string pre = m.part == Part::unet ? "unet." : "text_encoder.";
    switch (f) {
        case LoraFormat::kohya: return {m.key + ".lora_down.weight", m.key + ".lora_up.weight", m.key + ".alpha"};
        case LoraFormat::kohya_ldm: {
            if (m.part != Part::unet || ucfg == nullptr) return {};
            std::string k = sd::unet_key_original(*ucfg, m.path + ".weight");
            const std::string p = sd::kUnetOriginalPrefix, s = ".weight";
            if (k.size() <= p.size() + s.size() || k.compare(0, p.size(), p) != 0) return {};
            k = k.substr(p.size(), k.size() - p.size() - s.size());
            const std::string key = kohya_key(Part::unet, k);
            return {key + ".lora_down.weight", key + ".lora_up.weight", key + ".alpha"};
        }
        case LoraFormat::diffusers:
            return {pre + m.path + ".lora.down.weight", pre + m.path + ".lora.up.weight", ""};
        case LoraFormat::peft: return {pre + m.path + ".lora_A.weight", pre + m.path + ".lora_B.weight", ""};
    }
    return {};
}

// [a, b] or [a, b, 1, 1].
bool matrix_shape(const std::vector<int64_t>& s, int64_t a, int64_t b) {
    return (s.size() == 2 || (s.size() == 4 && s[2] == 1 && s[3] == 1)) && s[0] == a && s[1] == b;
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

}  // namespace

LoadReport load_lora(const gl::io::TensorSource& src, const LoraNetwork& net, gl::Runtime& rt,
                     const sd::UnetConfig* unet_cfg) {
    return load_lora(
        src, net, [&rt](gl::ValueId v, const std::vector<float>& x) { rt.write_f32(v, x); }, unet_cfg);
}

LoadReport load_lora(const gl::io::TensorSource& src, const LoraNetwork& net, const WriteFn& write,
                     const sd::UnetConfig* unet_cfg) {
    LoadReport rep;

    // The format naming the most of the network's modules.
    size_t best = 0;
    for (LoraFormat f : {LoraFormat::kohya, LoraFormat::kohya_ldm, LoraFormat::diffusers, LoraFormat::peft}) {
        size_t n = 0;
        for (const LoraModule& m : net.modules()) {
            const Keys k = keys_for(f, m, unet_cfg);
            if (!k.down.empty() && src.has(k.down)) n++;
        }
        if (n > best) best = n, rep.format = f;
    }
    GL_CHECK(best > 0, "lora load ", src.origin(), ": holds none of the network's ", net.modules().size(),
             " modules in any known layout (kohya, diffusers, peft)");

    std::set<std::string> used;
    bool first = true;
    for (const LoraModule& m : net.modules()) {
        const Keys k = keys_for(rep.format, m, unet_cfg);
        const int64_t r = m.rank;
        if (k.down.empty() || !src.has(k.down)) {
            rep.missing.push_back(m.key);
            continue;
        }
        GL_CHECK(src.has(k.up), "lora load ", src.origin(), ": ", k.down, " has no ", k.up);
        const gl::io::TensorInfo di = src.info(k.down), ui = src.info(k.up);
        GL_CHECK(!di.shape.empty() && di.shape[0] == r, "lora load ", src.origin(), ": ", k.down, " is ",
                 shape_str(di.shape), ", rank ", di.shape.empty() ? 0 : di.shape[0], " where the network has rank ", r);
        const bool conv = m.kind == ModuleKind::conv;
        const bool down_ok =
            conv ? di.shape == std::vector<int64_t>{r, m.in, m.k, m.k} : matrix_shape(di.shape, r, m.in);
        GL_CHECK(down_ok, "lora load ", src.origin(), ": ", k.down, " is ", shape_str(di.shape), ", expected [", r,
                 ", ",
                 m.in, conv ? ", " + std::to_string(m.k) + ", " + std::to_string(m.k) : std::string(), "]");
        GL_CHECK(matrix_shape(ui.shape, m.out, r), "lora load ", src.origin(), ": ", k.up, " is ", shape_str(ui.shape),
                 ", expected [", m.out, ", ", r, "]");
        float alpha = float(r);  // formats without alpha mean scale 1
        if (!k.alpha.empty() && src.has(k.alpha)) {
            const gl::io::TensorInfo ai = src.info(k.alpha);
            GL_CHECK(ai.numel() == 1, "lora load ", src.origin(), ": ", k.alpha, " is ", shape_str(ai.shape),
                     ", expected a scalar");
            src.read(k.alpha, &alpha, gl::DType::f32);
            GL_CHECK(std::isfinite(alpha), "lora load ", src.origin(), ": ", k.alpha, " is not finite");
            if (alpha == 0.0f) alpha = float(r);  // kohya: alpha 0 means alpha = rank
            used.insert(k.alpha);
        }
        if (first) rep.file_alpha = alpha, first = false;

        std::vector<float> down(size_t(di.numel())), up(size_t(ui.numel()));
        src.read(k.down, down.data(), gl::DType::f32);
        src.read(k.up, up.data(), gl::DType::f32);
        for (const auto& [key, v] : {std::pair{&k.down, &down}, std::pair{&k.up, &up}}) {
            const auto bad = std::find_if(v->begin(), v->end(), [](float x) { return !std::isfinite(x); });
            GL_CHECK(bad == v->end(), "lora load ", src.origin(), ": ", *key, " holds ", std::isnan(*bad) ? "NaN" : "inf",
                     " (element ", bad - v->begin(), "); a LoRA with non-finite weights would break every output");
        }
        if (conv) down = oihw_to_ohwi(down, r, m.k, m.in);
        if (alpha != m.alpha) {
            const float f = alpha / m.alpha;
            for (float& e : up) e *= f;
        }
        write(m.down, down);
        write(m.up, up);
        used.insert(k.down);
        used.insert(k.up);
        rep.modules++;
    }
    for (const gl::io::TensorInfo& t : src.list())
        if (!used.count(t.name)) rep.unexpected.push_back(t.name);
    return rep;
}

}  // namespace lora
