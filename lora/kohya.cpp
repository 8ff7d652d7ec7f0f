#include "lora/kohya.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>
#include <algorithm>
#include <tuple>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/checked.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sha256.h"
#include "ggml-lite/io/torch_save.h"

namespace lora {

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

// [O, k, k, I] -> [O, I, k, k] (ours -> PyTorch's conv layout).
std::vector<float> ohwi_to_oihw(const std::vector<float>& x, int64_t O, int64_t k, int64_t I) {
    std::vector<float> y(x.size());
    for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < k * k; p++)
            for (int64_t i = 0; i < I; i++) y[size_t((o * I + i) * k * k + p)] = x[size_t((o * k * k + p) * I + i)];
    return y;
}

}  // namespace

std::map<std::string, std::string> kohya_metadata(const LoraNetwork& net, const SaveOptions& opt) {
    const LoraConfig& c = net.config();
    const models::BaseModelStrings base = c.family->base_model(opt.prediction_type == "v");
    const std::string reso = std::to_string(opt.resolution_w) + "x" + std::to_string(opt.resolution_h);
    std::map<std::string, std::string> md = {
        {"ss_network_module", "networks.lora"},
        {"ss_network_dim", std::to_string(c.rank)},
        {"ss_network_alpha", py_float(c.effective_alpha())},
        {"ss_network_dropout", c.dropout > 0.0f ? py_float(c.dropout) : "None"},  // kohya's --network_dropout
        {"ss_base_model_version", base.ss_base_model_version},
        {"ss_v2", base.ss_v2},
        // sai_model_spec.build_metadata: ModelSpec 1.0.1; an SD1.x LoRA is a "diffusers" implementation.
        {"modelspec.sai_model_spec", "1.0.1"},
        {"modelspec.architecture", base.modelspec_architecture + "/lora"},
        {"modelspec.implementation", "diffusers"},
        {"modelspec.title", opt.title},
        {"modelspec.date", local_now_iso()},
        {"modelspec.resolution", reso},
        {"modelspec.prediction_type", opt.prediction_type},
    };
    if (opt.clip_skip > 0) md["modelspec.encoder_layer"] = std::to_string(opt.clip_skip);
    if (c.lycoris()) {
        md["ss_network_module"] = "lycoris.kohya";
        // kohya: json.dumps of the network args as given, plus its --network_dropout as "dropout".
        std::string args;
        bool dropout = false;
        for (const auto& [k, v] : c.args) {
            args += (args.empty() ? "" : ", ") + nlohmann::json(k).dump(-1, ' ', true) + ": " +
                    nlohmann::json(v).dump(-1, ' ', true);
            dropout = dropout || k == "dropout";
        }
        if (!dropout) args += std::string(args.empty() ? "" : ", ") + "\"dropout\": " + (c.dropout > 0.0f ? py_float(c.dropout) : "null");
        md["ss_network_args"] = "{" + args + "}";
    } else {
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
    }
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
    GL_CHECK(net.modules().size() > 0, "lora save ", path, ": the network has no modules (was the model built?)");
    const gl::DType t = save_dtype(opt.precision);
    const bool lycoris = net.config().lycoris();
    std::vector<const Module*> order;
    for (const Module& m : net.modules()) order.push_back(&m);
    if (lycoris)  // LyCORIS's state_dict order: the text encoder's modules first, each part as PyTorch defines it
        std::stable_sort(order.begin(), order.end(), [&f = *net.config().family](const Module* a, const Module* b) {
            const Layer &x = a->layer(), &y = b->layer();
            if (x.part != y.part) return x.part == Part::text_encoder;
            return f.definition_order(x.part, x.path) < f.definition_order(y.part, y.path);
        });
    // Owned bytes first, then the descriptors pointing into them (no reallocation after).
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<gl::io::TensorToWrite> out;
    for (const Module* m : order) {
        for (const std::string& suffix : m->file_order()) {
            if (suffix == "alpha") {
                bytes.push_back(encode({m->file_alpha()}, t));
                out.push_back({m->key() + ".alpha", t, {}, nullptr});
                continue;
            }
            const Tensor& x = *m->tensor(suffix);
            std::vector<float> v = read(x.id);
            if (x.conv_k > 1) v = ohwi_to_oihw(v, x.file_shape[0], x.conv_k, x.file_shape[1]);
            bytes.push_back(encode(v, t));
            out.push_back({m->key() + "." + suffix, t, x.file_shape, nullptr});
        }
    }
    for (size_t i = 0; i < out.size(); i++) out[i].data = bytes[i].data();
    if (torch_file(path)) {  // kohya's torch.save(state_dict): no metadata, no hashes
        gl::io::write_torch_checkpoint(path, out);
        return out.size();
    }
    std::map<std::string, std::string> md = kohya_metadata(net, opt);
    if (lycoris) md["sshs_model_hash"] = lycoris_model_hash(out);
    else std::tie(md["sshs_model_hash"], md["sshs_legacy_hash"]) = kohya_model_hashes(out, md);
    gl::io::write_safetensors(path, out, md);
    return out.size();
}

bool torch_file(const std::string& path) {
    const auto ends = [&](const std::string& e) {
        return path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0;
    };
    return ends(".ckpt") || ends(".pt");
}

std::string lycoris_model_hash(const std::vector<gl::io::TensorToWrite>& tensors) {
    gl::io::Sha256 h;
    for (const gl::io::TensorToWrite& t : tensors)
        h.update(t.data, gl::checked_bytes(gl::checked_numel(t.shape.data(), t.shape.size(), t.name),
                                           gl::dtype_size(t.dtype), t.name));
    return "0x" + h.hex();
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

}  // namespace lora
