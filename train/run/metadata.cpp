#include "train/run/metadata.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "ggml-lite/io/sha256.h"
#include "ggml-lite/core/error.h"

namespace train {

namespace fs = std::filesystem;

std::string py_float(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);  // shortest round trip, as repr
    std::string s(buf, end);
    // repr switches to exponent form below 1e-4 and from 1e16; to_chars picks the shorter form.
    const double a = std::fabs(x);
    if (a != 0 && (a < 1e-4 || a >= 1e16)) {
        auto [e2, ec2] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
        s.assign(buf, e2);
        const size_t e = s.find('e');
        std::string mant = s.substr(0, e), ex = s.substr(e + 1);
        const char sign = ex[0] == '-' ? '-' : '+';
        if (ex[0] == '-' || ex[0] == '+') ex.erase(0, 1);
        while (ex.size() > 2 && ex[0] == '0') ex.erase(0, 1);
        if (ex.size() < 2) ex = "0" + ex;
        return mant + "e" + sign + ex;
    }
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

std::string py_json_string(const std::string& u) {
    std::string out = "\"";
    char buf[16];
    for (size_t i = 0; i < u.size();) {
        const unsigned char c = static_cast<unsigned char>(u[i]);
        uint32_t cp = c;
        size_t n = 1;
        if (c >= 0x80) {  // decode UTF-8 (invalid bytes pass as U+FFFD)
            n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
            cp = n == 4 ? c & 0x07 : n == 3 ? c & 0x0f : c & 0x1f;
            bool ok = n > 1 && i + n <= u.size();
            for (size_t k = 1; ok && k < n; k++) {
                const unsigned char cc = static_cast<unsigned char>(u[i + k]);
                ok = (cc & 0xc0) == 0x80;
                cp = (cp << 6) | (cc & 0x3f);
            }
            if (!ok) cp = 0xfffd, n = 1;
        }
        i += n;
        switch (cp) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
        }
        if (cp >= 0x20 && cp < 0x7f) {
            out += char(cp);
        } else if (cp < 0x10000) {
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            out += buf;
        } else {
            const uint32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            out += buf;
        }
    }
    return out + "\"";
}

ModelFileInfo model_file_info(const std::string& path) {
    ModelFileInfo m;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        m.name = path;
        return m;
    }
    m.name = fs::path(path).filename().string();
    if (m.name.empty()) m.name = fs::path(path).parent_path().filename().string();  // "folder/"
    if (fs::is_directory(path, ec)) {
        m.legacy_hash = m.sha256 = "IsADirectory";  // kohya's hash functions on a folder
        return m;
    }
    std::ifstream f(path, std::ios::binary);
    GL_CHECK(f, "model ", path, ": cannot be read to hash it");
    gl::io::Sha256 whole, legacy;
    std::vector<char> buf(size_t(1) << 20);
    uint64_t at = 0;
    constexpr uint64_t kLo = 0x100000, kHi = 0x110000;
    while (f) {
        f.read(buf.data(), std::streamsize(buf.size()));
        const uint64_t n = uint64_t(f.gcount());
        if (n == 0) break;
        whole.update(buf.data(), size_t(n));
        const uint64_t lo = std::max(at, kLo), hi = std::min(at + n, kHi);
        if (lo < hi) legacy.update(buf.data() + (lo - at), size_t(hi - lo));
        at += n;
    }
    m.sha256 = whole.hex();
    m.legacy_hash = legacy.hex().substr(0, 8);
    return m;
}

namespace {

std::string py_bool(bool b) { return b ? "True" : "False"; }
template <class T>
std::string py_opt(const std::optional<T>& v) {
    if (!v) return "None";
    if constexpr (std::is_floating_point_v<T>) return py_float(*v);
    else if constexpr (std::is_same_v<T, std::string>) return *v;
    else return std::to_string(*v);
}

// ss_optimizer: the class as module.name and the arguments given, as kohya prints them.
std::string optimizer_text(const RunConfig& c) {
    const optim::OptimizerConfig o = c.optimizer();
    std::string cls = o.name();
    size_t dots = 0;
    for (const char* p : o.def->class_paths) {
        const std::string s = p;
        const size_t n = size_t(std::count(s.begin(), s.end(), '.'));
        if (n > dots) dots = n, cls = s;
    }
    std::string args;
    for (const std::string& a : c.optimizer_args) {
        const size_t eq = a.find('=');
        std::string v = eq == std::string::npos ? "" : a.substr(eq + 1);
        if (v.find(',') != std::string::npos && v.front() != '(' && v.front() != '[') {
            std::string t;
            for (char ch : v) t += ch == ',' ? std::string(", ") : std::string(1, ch);
            v = "(" + t + ")";
        }
        // Appended piece by piece: GCC 12 warns falsely on "literal" + std::string&& (PR 105651).
        if (!args.empty()) args += ',';
        args.append(a, 0, eq).append("=").append(v);
    }
    return args.empty() ? cls : cls + "(" + args + ")";
}

// {dir: {"n_repeats": r, "img_count": n}} of the train (or reg) subsets, base names made unique
// with " (2)" as kohya does for dataset configs.
std::string dataset_dirs(const RunData& d, bool reg) {
    std::vector<std::pair<std::string, std::string>> entries;
    std::map<int, int64_t> count;
    for (const data::ImageEntry& e : d.dataset.images) count[e.subset]++;
    for (size_t i = 0; i < d.dataset.config.subsets.size(); i++) {
        const data::SubsetConfig& s = d.dataset.config.subsets[i];
        if (s.is_reg != reg) continue;
        std::string name = s.image_dir.filename().string(), v = name;
        for (int k = 2; std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.first == v; }); k++)
            v = gl::cat(name, " (", k, ")");
        entries.emplace_back(v, gl::cat("{\"n_repeats\": ", s.num_repeats, ", \"img_count\": ", count[int(i)], "}"));
    }
    std::string out = "{";
    for (size_t i = 0; i < entries.size(); i++)
        out += (i ? ", " : "") + py_json_string(entries[i].first) + ": " + entries[i].second;
    return out + "}";
}

// {dir: {tag: count}}: every caption split at ',', stripped, lower-cased (ASCII), in first-seen order.
std::string tag_frequency(const RunData& d) {
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, int64_t>>>> dirs;
    for (const data::ImageEntry& e : d.dataset.images) {
        const std::string dir = d.dataset.config.subsets[size_t(e.subset)].image_dir.filename().string();
        auto it = std::find_if(dirs.begin(), dirs.end(), [&](const auto& x) { return x.first == dir; });
        if (it == dirs.end()) it = dirs.insert(dirs.end(), {dir, {}});
        size_t a = 0;
        for (;;) {
            const size_t b = e.caption.find(',', a);
            std::string tag = e.caption.substr(a, b == std::string::npos ? std::string::npos : b - a);
            const size_t s = tag.find_first_not_of(" \t\r\n"), t = tag.find_last_not_of(" \t\r\n");
            tag = s == std::string::npos ? "" : tag.substr(s, t - s + 1);
            for (char& ch : tag)
                if (ch >= 'A' && ch <= 'Z') ch = char(ch - 'A' + 'a');
            if (!tag.empty()) {
                auto& tags = it->second;
                auto jt = std::find_if(tags.begin(), tags.end(), [&](const auto& x) { return x.first == tag; });
                if (jt == tags.end()) tags.emplace_back(tag, 1);
                else jt->second++;
            }
            if (b == std::string::npos) break;
            a = b + 1;
        }
    }
    std::string out = "{";
    for (size_t i = 0; i < dirs.size(); i++) {
        out += (i ? ", " : "") + py_json_string(dirs[i].first) + ": {";
        for (size_t j = 0; j < dirs[i].second.size(); j++)
            out += (j ? ", " : "") + py_json_string(dirs[i].second[j].first) + ": " +
                   std::to_string(dirs[i].second[j].second);
        out += "}";
    }
    return out + "}";
}

// {"buckets": {index: {"resolution": [w, h], "count": n}}, "mean_img_ar_error": e}; index as kohya's
// bucket manager numbers them (its predefined resolutions, or the sorted used ones without).
std::string bucket_info(const RunData& d) {
    const data::DatasetConfig& c = d.dataset.config;
    std::vector<data::Reso> resos;
    if (c.enable_bucket && !c.bucket_no_upscale)
        resos = data::make_bucket_resolutions({c.width, c.height}, c.min_bucket_reso, c.max_bucket_reso,
                                              c.bucket_reso_steps);
    std::string out = "{\"buckets\": {";
    for (size_t i = 0; i < d.buckets.buckets.size(); i++) {
        const data::Bucket& b = d.buckets.buckets[i];
        size_t index = i;
        for (size_t k = 0; k < resos.size(); k++)
            if (resos[k] == b.reso) index = k;
        out += gl::cat(i ? ", " : "", "\"", index, "\": {\"resolution\": [", b.reso.w, ", ", b.reso.h,
                       "], \"count\": ", b.images.size(), "}");
    }
    return out + "}, \"mean_img_ar_error\": " + py_float(d.buckets.mean_ar_error) + "}";
}

std::string network_args_json(const RunConfig& c) {
    std::string out = "{";
    bool has_dropout = false;
    for (const auto& [k, v] : parse_network_args(c.network_args)) {
        out += (out.size() > 1 ? ", " : "") + py_json_string(k) + ": " + py_json_string(v);
        has_dropout |= k == "dropout";
    }
    // kohya puts --network_dropout among the args before writing them ("workaround for LyCORIS").
    if (!has_dropout) out += std::string(out.size() > 1 ? ", " : "") + "\"dropout\": " +
                             (c.network_dropout ? py_float(*c.network_dropout) : "null");
    return out + "}";
}

}  // namespace

std::map<std::string, std::string> run_metadata(const RunConfig& c, const RunData& d, const RunFacts& f) {
    const StepCounts& k = f.counts;
    const std::string warmup = c.lr_warmup_steps.ratio ? py_float(c.lr_warmup_steps.value)
                                                       : std::to_string(int64_t(c.lr_warmup_steps.value));
    std::map<std::string, std::string> m = {
        {"ss_session_id", std::to_string(f.session_id)},
        {"ss_training_started_at", py_float(f.started_at)},
        {"ss_output_name", py_opt(c.output_name)},
        {"ss_learning_rate", py_float(c.learning_rate)},
        {"ss_text_encoder_lr", py_opt(c.text_encoder_lr)},
        {"ss_unet_lr", py_opt(c.unet_lr)},
        {"ss_num_train_images", std::to_string(d.dataset.num_train_images)},
        {"ss_num_validation_images", "0"},
        {"ss_num_reg_images", std::to_string(d.dataset.num_reg_images)},
        {"ss_num_batches_per_epoch", std::to_string(k.batches_per_epoch)},
        {"ss_num_epochs", std::to_string(k.epochs)},
        {"ss_gradient_checkpointing", py_bool(c.gradient_checkpointing)},
        {"ss_gradient_accumulation_steps", std::to_string(k.accum)},
        {"ss_max_train_steps", std::to_string(k.max_train_steps)},
        {"ss_lr_warmup_steps", warmup},
        {"ss_lr_scheduler", c.lr_scheduler},
        {"ss_network_module", c.network_module},
        {"ss_mixed_precision", c.mixed_precision},
        {"ss_full_fp16", py_bool(c.full_fp16)},
        {"ss_v2", "False"},
        {"ss_base_model_version", "sd_v1"},
        {"ss_clip_skip", py_opt(c.clip_skip)},
        {"ss_max_token_length", py_opt(c.max_token_length)},
        {"ss_cache_latents", py_bool(c.cache_latents)},
        {"ss_seed", std::to_string(f.seed)},
        {"ss_lowram", "False"},
        {"ss_noise_offset", py_opt(c.noise_offset)},
        {"ss_multires_noise_iterations", "None"},
        {"ss_multires_noise_discount", "0.3"},
        {"ss_adaptive_noise_scale", "None"},
        {"ss_zero_terminal_snr", "False"},
        {"ss_training_comment", py_opt(c.training_comment)},
        {"ss_sd_scripts_commit_hash", f.version},
        {"ss_optimizer", optimizer_text(c)},
        {"ss_max_grad_norm", py_float(c.max_grad_norm)},
        {"ss_caption_dropout_rate", py_float(c.caption_dropout_rate)},
        {"ss_caption_dropout_every_n_epochs", std::to_string(c.caption_dropout_every_n_epochs)},
        {"ss_caption_tag_dropout_rate", py_float(c.caption_tag_dropout_rate)},
        {"ss_face_crop_aug_range", "None"},
        {"ss_prior_loss_weight", py_float(c.prior_loss_weight)},
        {"ss_min_snr_gamma", py_opt(c.min_snr_gamma)},
        {"ss_scale_weight_norms", "None"},
        {"ss_ip_noise_gamma", "None"},
        {"ss_debiased_estimation", "False"},
        {"ss_noise_offset_random_strength", "False"},
        {"ss_ip_noise_gamma_random_strength", "False"},
        {"ss_loss_type", c.loss_type},
        {"ss_huber_schedule", c.huber_schedule},
        {"ss_huber_scale", py_float(c.huber_scale)},
        {"ss_huber_c", py_float(c.huber_c)},
        {"ss_fp8_base", py_bool(c.fp8_base)},
        {"ss_fp8_base_unet", py_bool(c.fp8_base_unet)},
        {"ss_validation_seed", "None"},
        {"ss_validation_split", "0.0"},
        {"ss_max_validation_steps", "None"},
        {"ss_validate_every_n_epochs", "None"},
        {"ss_validate_every_n_steps", "None"},
        {"ss_resize_interpolation", "None"},
        {"ss_tag_frequency", tag_frequency(d)},
        {"ss_dataset_dirs", dataset_dirs(d, false)},
        {"ss_sd_model_name", f.model.name},
    };
    if (!f.model.sha256.empty()) {
        m["ss_sd_model_hash"] = f.model.legacy_hash;
        m["ss_new_sd_model_hash"] = f.model.sha256;
    }
    if (!c.network_args.empty()) m["ss_network_args"] = network_args_json(c);
    const data::DatasetConfig& dc = d.dataset.config;
    if (!d.from_dataset_config) {
        m["ss_batch_size_per_device"] = std::to_string(dc.batch_size);
        m["ss_total_batch_size"] = std::to_string(int64_t(dc.batch_size) * c.gradient_accumulation_steps);
        m["ss_resolution"] = gl::cat("(", dc.width, ", ", dc.height, ")");
        m["ss_color_aug"] = py_bool(c.color_aug);
        m["ss_flip_aug"] = py_bool(c.flip_aug);
        m["ss_random_crop"] = py_bool(c.random_crop);
        m["ss_shuffle_caption"] = py_bool(c.shuffle_caption);
        m["ss_enable_bucket"] = py_bool(dc.enable_bucket);
        m["ss_bucket_no_upscale"] = py_bool(dc.bucket_no_upscale);
        m["ss_min_bucket_reso"] = std::to_string(dc.min_bucket_reso);
        m["ss_max_bucket_reso"] = std::to_string(dc.max_bucket_reso);
        m["ss_keep_tokens"] = std::to_string(c.keep_tokens);
        m["ss_reg_dataset_dirs"] = dataset_dirs(d, true);
        m["ss_bucket_info"] = bucket_info(d);
    } else {
        // kohya's ss_datasets: one entry per dataset with its subsets.
        std::string subsets;
        std::map<int, int64_t> count;
        for (const data::ImageEntry& e : d.dataset.images) count[e.subset]++;
        for (size_t i = 0; i < dc.subsets.size(); i++) {
            const data::SubsetConfig& s = dc.subsets[i];
            const data::CaptionOptions& co = s.caption;
            subsets += gl::cat(i ? ", " : "", "{\"img_count\": ", count[int(i)], ", \"num_repeats\": ", s.num_repeats,
                               ", \"color_aug\": false, \"flip_aug\": ", s.flip_aug ? "true" : "false",
                               ", \"random_crop\": ", s.random_crop ? "true" : "false", ", \"shuffle_caption\": ",
                               co.shuffle_caption ? "true" : "false", ", \"keep_tokens\": ", co.keep_tokens,
                               ", \"image_dir\": ", py_json_string(s.image_dir.filename().string()),
                               ", \"class_tokens\": ", s.class_tokens ? py_json_string(*s.class_tokens) : "null",
                               ", \"is_reg\": ", s.is_reg ? "true" : "false", "}");
        }
        m["ss_datasets"] = gl::cat(
            "[{\"is_dreambooth\": true, \"batch_size_per_device\": ", dc.batch_size, ", \"num_train_images\": ",
            d.dataset.num_train_images, ", \"num_reg_images\": ", d.dataset.num_reg_images, ", \"resolution\": [",
            dc.width, ", ", dc.height, "], \"enable_bucket\": ", dc.enable_bucket ? "true" : "false",
            ", \"min_bucket_reso\": ", dc.min_bucket_reso, ", \"max_bucket_reso\": ", dc.max_bucket_reso,
            ", \"tag_frequency\": ", tag_frequency(d), ", \"bucket_info\": ", bucket_info(d), ", \"subsets\": [",
            subsets, "]}]");
    }
    return m;
}

std::map<std::string, std::string> save_metadata(std::map<std::string, std::string> run, int64_t steps,
                                                 int64_t epoch) {
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    run["ss_training_finished_at"] = py_float(now);
    run["ss_steps"] = std::to_string(steps);
    run["ss_epoch"] = std::to_string(epoch);
    return run;
}

}  // namespace train
