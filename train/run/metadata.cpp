#include "train/run/metadata.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "ggml-lite/io/sha256.h"
#include "ggml-lite/core/error.h"
#include "train/run/build_info.h"
#include "train/run/option_table.h"

namespace train {

namespace fs = std::filesystem;

std::string build_version() { return GL_BUILD_VERSION; }
std::string build_commit() { return GL_BUILD_COMMIT; }
std::string implementation_version() {
    const std::string commit = build_commit();
    return "ggml-lite/" + build_version() + (commit.empty() ? "" : "+" + commit);
}

std::string py_float(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
    // The shortest digits that read back (as CPython's repr finds them), in the form d[.ddd]e<exp>.
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    const std::string_view sci(buf, size_t(end - buf));
    const bool negative = sci.front() == '-';
    const size_t e = sci.find('e');
    std::string digits;
    for (char ch : sci.substr(negative ? 1 : 0, e - (negative ? 1 : 0)))
        if (ch != '.') digits += ch;
    int exp = 0;
    const std::string_view ex = sci.substr(e + 1);
    std::from_chars(ex.data() + (ex.front() == '+'), ex.data() + ex.size(), exp);
    const int n = int(digits.size());
    std::string out = negative ? "-" : "";
    // repr's rule (float_repr_style 'short'): the exponent form when the first digit's decimal
    // exponent is below -4 or at least 16, else positional digits; to_chars' own shortest form
    // picks whichever is fewer characters ("1e-04" for 0.0001, "1e+15" for 1e15).
    if (exp < -4 || exp >= 16) {
        out += digits[0];
        if (n > 1) out.append(".").append(digits, 1);
        out += exp < 0 ? "e-" : "e+";
        const int a = exp < 0 ? -exp : exp;
        if (a < 10) out += '0';
        out += std::to_string(a);
    } else if (exp < 0) {
        out.append("0.").append(size_t(-exp - 1), '0').append(digits);
    } else if (n <= exp + 1) {
        out.append(digits).append(size_t(exp + 1 - n), '0').append(".0");
    } else {
        out.append(digits, 0, size_t(exp + 1)).append(".").append(digits, size_t(exp + 1));
    }
    return out;
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

namespace {

// The case mapping of Python's str.lower() on ASCII, Latin-1, Latin Extended-A, modern Greek
// (U+0386-U+03CE) and basic Cyrillic (U+0400-U+045F), exact there; other code points are kept.
uint32_t lower_code_point(uint32_t c) {
    if ((c >= 'A' && c <= 'Z') || (c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 0x20;
    if (c >= 0x100 && c <= 0x17f) {
        if (c == 0x178) return 0xff;
        // Capitals are the even code points, except in U+0139-U+0148 and U+0179-U+017E (odd).
        const bool odd_capitals = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
        const bool lower_only = c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17f;
        return !lower_only && c % 2 == (odd_capitals ? 1u : 0u) ? c + 1 : c;
    }
    if (c == 0x386) return 0x3ac;
    if (c >= 0x388 && c <= 0x38a) return c + 0x25;
    if (c == 0x38c) return 0x3cc;
    if (c == 0x38e || c == 0x38f) return c + 0x3f;
    if (c >= 0x391 && c <= 0x3ab && c != 0x3a2) return c + 0x20;
    if (c >= 0x400 && c <= 0x40f) return c + 0x50;
    if (c >= 0x410 && c <= 0x42f) return c + 0x20;
    return c;
}

}  // namespace

std::string py_lower(const std::string& u) {
    std::string out;
    for (size_t i = 0; i < u.size();) {
        const unsigned char c = static_cast<unsigned char>(u[i]);
        if (c < 0x80) {
            out += c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : char(c);
            i++;
        } else if (c >= 0xc0 && c < 0xe0 && i + 1 < u.size()) {  // two bytes: U+0080-U+07FF
            const uint32_t cp = (uint32_t(c & 0x1f) << 6) | (uint32_t(static_cast<unsigned char>(u[i + 1])) & 0x3f);
            const uint32_t lo = lower_code_point(cp);
            if (cp == 0x130) out += "i\xcc\x87";  // İ lowers to i + combining dot above
            else if (lo < 0x80) out += char(lo);
            else out += char(0xc0 | (lo >> 6)), out += char(0x80 | (lo & 0x3f));
            i += 2;
        } else {
            out += char(c);
            i++;
        }
    }
    return out;
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

std::string kohya_optimizer_text(const RunConfig& c) {
    const optim::OptimizerConfig o = c.optimizer();
    std::string cls = o.name();
    size_t dots = 0;
    for (const char* p : o.def->class_paths) {
        const std::string s = p;
        const size_t n = size_t(std::count(s.begin(), s.end(), '.'));
        if (n > dots) dots = n, cls = s;
    }
    if (o.def->kohya_class) cls = o.def->kohya_class;
    std::vector<std::string> given = c.optimizer_args;
    if (const char* added = o.def->kohya_added_arg) {  // kohya adds it to the kwargs it prints, last
        const std::string key = std::string(added).substr(0, std::string(added).find('='));
        const bool present = std::any_of(given.begin(), given.end(),
                                         [&](const std::string& a) { return a.substr(0, a.find('=')) == key; });
        if (!present) given.emplace_back(added);
    }
    std::string args;
    for (const std::string& a : given) {
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

namespace {

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string py_bool(bool b) { return b ? "True" : "False"; }


// The subsets kohya's DreamBoothDataset keeps (repeats >= 1, at least one image), in config order,
// each with its images as kohya lists them: the folder's files, the regularisation images the
// balancing left out included.
struct SubsetImages {
    const data::SubsetConfig* config = nullptr;
    std::vector<const data::ImageEntry*> images;
};
std::vector<SubsetImages> kept_subsets(const data::Dataset& ds) {
    std::vector<SubsetImages> out(ds.config.subsets.size());
    for (size_t i = 0; i < out.size(); i++) out[i].config = &ds.config.subsets[i];
    for (const data::ImageEntry& e : ds.images) out[size_t(e.subset)].images.push_back(&e);
    for (const data::ImageEntry& e : ds.unused_reg) out[size_t(e.subset)].images.push_back(&e);
    std::erase_if(out, [](const SubsetImages& s) { return s.images.empty(); });
    return out;
}

// The subset's name in kohya's metadata: its folder's, or a fine-tuning subset's metadata file's.
std::string dir_name(const data::SubsetConfig& s) {
    return s.metadata_file ? s.metadata_file->filename().string() : s.image_dir.filename().string();
}

// A json.dumps object built in insertion order; a key set again keeps its place (a dict's rule).
struct PyDict {
    std::vector<std::pair<std::string, std::string>> items;  // json key, json value
    void set(const std::string& key, std::string value) {
        const std::string k = py_json_string(key);
        for (auto& [ik, iv] : items)
            if (ik == k) return void(iv = std::move(value));
        items.emplace_back(k, std::move(value));
    }
    bool has(const std::string& key) const {
        const std::string k = py_json_string(key);
        return std::any_of(items.begin(), items.end(), [&](const auto& kv) { return kv.first == k; });
    }
    std::string dump() const {
        std::string out = "{";
        for (size_t i = 0; i < items.size(); i++) out += (i ? ", " : "") + items[i].first + ": " + items[i].second;
        return out + "}";
    }
};

std::string dir_info(const SubsetImages& s) {
    return gl::cat("{\"n_repeats\": ", s.config->num_repeats, ", \"img_count\": ", s.images.size(), "}");
}

// The folder layout's ss_dataset_dirs / ss_reg_dataset_dirs: {dir: {"n_repeats", "img_count"}}.
std::string dataset_dirs(const std::vector<SubsetImages>& subsets, bool reg) {
    PyDict d;
    for (const SubsetImages& s : subsets)
        if (s.config->is_reg == reg) d.set(dir_name(*s.config), dir_info(s));
    return d.dump();
}

// Python's str.isspace() (what str.strip() removes): ASCII whitespace, \x1c-\x1f, NEL, NBSP and
// Unicode's other spaces and separators (U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000, the ideographic space of Japanese captions).
bool py_space(uint32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

// The code point of the UTF-8 sequence of n bytes at p (n from its lead byte).
uint32_t decode_utf8(const unsigned char* p, size_t n) {
    if (n == 1) return p[0] < 0x80 ? p[0] : 0xfffd;
    uint32_t c = n == 2 ? p[0] & 0x1fu : n == 3 ? p[0] & 0x0fu : p[0] & 0x07u;
    for (size_t k = 1; k < n; k++) c = (c << 6) | (p[k] & 0x3fu);
    return c;
}
size_t utf8_length(unsigned char lead) { return lead < 0xc0 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4; }

std::string py_strip(const std::string& s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t a = 0, b = s.size();
    while (a < b) {
        const size_t n = std::min(utf8_length(p[a]), b - a);
        if (!py_space(decode_utf8(p + a, n))) break;
        a += n;
    }
    while (b > a) {
        size_t start = b - 1;  // back to the lead byte of the last character
        while (start > a && (p[start] & 0xc0) == 0x80 && b - start < 4) start--;
        if (utf8_length(p[start]) != b - start || !py_space(decode_utf8(p + start, b - start))) break;
        b = start;
    }
    return s.substr(a, b - a);
}

// BaseDataset.set_tag_frequency: {dir: {tag: count}}, every caption split at ',', stripped and
// lower-cased, tags in first-seen order; a folder seen twice adds to its counts.
std::string tag_frequency(const std::vector<SubsetImages>& subsets) {
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, int64_t>>>> dirs;
    for (const SubsetImages& s : subsets) {
        const std::string dir = dir_name(*s.config);
        auto it = std::find_if(dirs.begin(), dirs.end(), [&](const auto& x) { return x.first == dir; });
        if (it == dirs.end()) it = dirs.insert(dirs.end(), {dir, {}});
        for (const data::ImageEntry* e : s.images) {
            // A fine-tuning subset counts its metadata's tags only (kohya's tags_list).
            if (s.config->metadata_file && !e->tags) continue;
            const std::string& text = s.config->metadata_file ? *e->tags : e->caption;
            for (size_t a = 0;;) {
                const size_t b = text.find(',', a);
                const std::string tag = py_lower(py_strip(text.substr(a, b == std::string::npos ? b : b - a)));
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
    }
    PyDict out;
    for (const auto& [dir, tags] : dirs) {
        PyDict t;
        for (const auto& [tag, n] : tags) t.set(tag, std::to_string(n));
        out.set(dir, t.dump());
    }
    return out.dump();
}

// BaseDataset.bucket_info: {"buckets": {id: {"resolution": [w, h], "count": n}}, "mean_img_ar_error": e}.
// kohya's bucket manager keeps only the resolutions some image chose and numbers them 0..n-1 in
// (w, h) order (predefined resolutions or not); without bucketing there is none: null.
std::string bucket_info(const data::Dataset& ds, const data::BucketAssignment& buckets) {
    if (!ds.config.enable_bucket) return "null";
    std::string out = "{\"buckets\": {";
    for (size_t i = 0; i < buckets.buckets.size(); i++) {
        const data::Bucket& b = buckets.buckets[i];
        out += gl::cat(i ? ", " : "", "\"", i, "\": {\"resolution\": [", b.reso.w, ", ", b.reso.h,
                       "], \"count\": ", b.images.size(), "}");
    }
    return out + "}, \"mean_img_ar_error\": " + py_float(buckets.mean_ar_error) + "}";
}

// The dataset's min / max bucket resolution as kohya keeps them: moved to multiples of the steps
// (down / up), none without bucketing.
std::optional<std::pair<int, int>> bucket_limits(const data::DatasetConfig& c) {
    if (!c.enable_bucket) return std::nullopt;
    const int st = c.bucket_reso_steps, lo = c.min_bucket_reso, hi = c.max_bucket_reso;
    return std::pair{lo - lo % st, hi % st ? hi + st - hi % st : hi};
}

std::string json_bool(bool b) { return b ? "true" : "false"; }
std::string json_opt_string(const std::string& s) { return s.empty() ? "null" : py_json_string(s); }

// One dataset of --dataset_config's ss_datasets, with its subsets, keys in train_network.py's order.
std::string dataset_json(const data::BucketedDataset& d) {
    const std::vector<SubsetImages> subsets = kept_subsets(d.dataset);
    const data::DatasetConfig& dc = d.dataset.config;
    const auto limits = bucket_limits(dc);
    std::string list;
    for (const SubsetImages& si : subsets) {
        const data::SubsetConfig& s = *si.config;
        const data::CaptionOptions& co = s.caption;
        list += gl::cat(list.empty() ? "" : ", ", "{\"img_count\": ", si.images.size(), ", \"num_repeats\": ",
                        s.num_repeats, ", \"color_aug\": ", json_bool(s.color_aug), ", \"flip_aug\": ",
                        json_bool(s.flip_aug), ", \"random_crop\": ", json_bool(s.random_crop),
                        ", \"shuffle_caption\": ", json_bool(co.shuffle_caption), ", \"keep_tokens\": ",
                        co.keep_tokens, ", \"keep_tokens_separator\": ", py_json_string(co.keep_tokens_separator),
                        ", \"secondary_separator\": ", json_opt_string(co.secondary_separator),
                        ", \"enable_wildcard\": ", json_bool(co.enable_wildcard), ", \"caption_prefix\": ", json_opt_string(co.caption_prefix),
                        ", \"caption_suffix\": ", json_opt_string(co.caption_suffix),
                        ", \"resize_interpolation\": ", json_opt_string(data::interpolation_name(s.resize_interpolation)),
                        s.image_dir.empty() ? std::string() : ", \"image_dir\": " + py_json_string(s.image_dir.filename().string()),
                        s.metadata_file ? ", \"metadata_file\": " + py_json_string(dir_name(s))
                                        : gl::cat(", \"class_tokens\": ", s.class_tokens ? py_json_string(*s.class_tokens) : "null",
                                                  ", \"is_reg\": ", json_bool(s.is_reg)),
                        "}");
    }
    // kohya's is_dreambooth: false for a FineTuningDataset (its subsets have metadata_file).
    const bool dreambooth = dc.subsets.empty() || !dc.subsets.front().metadata_file;
    return gl::cat("{\"is_dreambooth\": ", json_bool(dreambooth), ", \"batch_size_per_device\": ", dc.batch_size,
                   ", \"num_train_images\": ", d.dataset.num_train_images, ", \"num_reg_images\": ",
                   d.dataset.num_reg_images, ", \"resolution\": [", dc.width, ", ", dc.height,
                   "], \"enable_bucket\": ", json_bool(dc.enable_bucket), ", \"min_bucket_reso\": ",
                   limits ? std::to_string(limits->first) : "null", ", \"max_bucket_reso\": ",
                   limits ? std::to_string(limits->second) : "null", ", \"tag_frequency\": ", tag_frequency(subsets),
                   ", \"bucket_info\": ", bucket_info(d.dataset, d.buckets),
                   ", \"resize_interpolation\": ", json_opt_string(data::interpolation_name(dc.resize_interpolation)),
                   ", \"subsets\": [", list, "]}");
}

// kohya's merged ss_tag_frequency of several datasets: a folder counted in an earlier dataset is
// not counted again.
std::vector<SubsetImages> tag_frequency_subsets(const RunData& d) {
    std::vector<SubsetImages> out;
    std::set<std::string> earlier;
    for (const data::BucketedDataset& p : d.parts) {
        std::set<std::string> here;
        for (SubsetImages& s : kept_subsets(p.dataset)) {
            if (earlier.count(dir_name(*s.config))) continue;
            here.insert(dir_name(*s.config));
            out.push_back(std::move(s));
        }
        earlier.insert(here.begin(), here.end());
    }
    return out;
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
    const std::vector<SubsetImages> subsets = kept_subsets(d.dataset);
    std::map<std::string, std::string> m = {
        {"ss_session_id", std::to_string(f.session_id)},
        {"ss_training_started_at", py_float(f.started_at)},
        {"ss_num_train_images", std::to_string(d.dataset.num_train_images)},
        // kohya's val_dataset_group.num_train_images: the held-out images, once each.
        {"ss_num_validation_images", std::to_string(d.validation ? d.validation->dataset.num_train_images : 0)},
        {"ss_num_reg_images", std::to_string(d.dataset.num_reg_images)},
        {"ss_num_batches_per_epoch", std::to_string(k.batches_per_epoch)},
        {"ss_num_epochs", std::to_string(k.epochs)},
        {"ss_gradient_accumulation_steps", std::to_string(k.accum)},
        {"ss_max_train_steps", std::to_string(k.max_train_steps)},
        {"ss_base_model_version", c.family().base_model(c.v_parameterization).ss_base_model_version},
        {"ss_seed", std::to_string(f.seed)},
        // kohya's get_git_revision_hash: the commit, or "(unknown)" outside a git checkout.
        {"ss_sd_scripts_commit_hash", build_commit().empty() ? "(unknown)" : build_commit()},
        {"ss_optimizer", kohya_optimizer_text(c)},
        {"ss_tag_frequency", tag_frequency(tag_frequency_subsets(d))},
        {"ss_sd_model_name", f.model.name},
    };
    // The options' own keys (kohya's args as str() writes them); some only for the folder layout.
    for (const Option& o : option_table())
        if (!o.ss_key.empty() && !(o.ss_folders_only && d.from_dataset_config)) m[o.ss_key] = o.python(c);
    if (!f.model.sha256.empty()) {
        m["ss_sd_model_hash"] = f.model.legacy_hash;
        m["ss_new_sd_model_hash"] = f.model.sha256;
    }
    if (f.vae) {
        m["ss_vae_name"] = f.vae->name;
        m["ss_vae_hash"] = f.vae->legacy_hash;
        m["ss_new_vae_hash"] = f.vae->sha256;
    }
    if (!c.network_args.empty()) m["ss_network_args"] = network_args_json(c);
    const data::DatasetConfig& dc = d.dataset.config;
    if (!d.from_dataset_config) {
        m["ss_batch_size_per_device"] = std::to_string(dc.batch_size);
        // kohya's total_batch_size: train_batch_size x num_processes x gradient_accumulation_steps.
        m["ss_total_batch_size"] = std::to_string(int64_t(dc.batch_size) * k.world * c.gradient_accumulation_steps);
        m["ss_resolution"] = gl::cat("(", dc.width, ", ", dc.height, ")");
        const auto limits = bucket_limits(dc);
        m["ss_enable_bucket"] = py_bool(dc.enable_bucket);
        m["ss_bucket_no_upscale"] = py_bool(dc.enable_bucket && dc.bucket_no_upscale);
        m["ss_min_bucket_reso"] = limits ? std::to_string(limits->first) : "None";
        m["ss_max_bucket_reso"] = limits ? std::to_string(limits->second) : "None";
        m["ss_dataset_dirs"] = dataset_dirs(subsets, false);
        m["ss_reg_dataset_dirs"] = dataset_dirs(subsets, true);
        m["ss_bucket_info"] = bucket_info(d.dataset, d.buckets);
    } else {
        std::string list;
        for (const data::BucketedDataset& p : d.parts) list += (list.empty() ? "" : ", ") + dataset_json(p);
        m["ss_datasets"] = "[" + list + "]";
        // The folders of the training subsets, a name seen before numbered " (2)", " (3)", ...
        PyDict dirs;
        for (const SubsetImages& s : subsets) {
            if (s.config->is_reg) continue;
            std::string name = dir_name(*s.config);
            for (int i = 2; dirs.has(name); i++) name = gl::cat(dir_name(*s.config), " (", i, ")");
            dirs.set(name, dir_info(s));
        }
        m["ss_dataset_dirs"] = dirs.dump();
    }
    return m;
}

std::map<std::string, std::string> save_metadata(std::map<std::string, std::string> run, int64_t steps,
                                                 int64_t epoch) {
    run["ss_training_finished_at"] = py_float(unix_now());
    run["ss_steps"] = std::to_string(steps);
    run["ss_epoch"] = std::to_string(epoch);
    return run;
}

lora::SaveOptions lora_save_options(const RunConfig& c, std::map<std::string, std::string> training) {
    lora::SaveOptions so;
    so.precision = c.save_dtype();
    // kohya: --metadata_title, else --output_name, else "LoRA@<the save's time.time()>".
    const auto finished = training.find("ss_training_finished_at");
    so.title = c.metadata_title.value_or(
        c.output_name.value_or("LoRA@" + (finished != training.end() ? finished->second : py_float(unix_now()))));
    // get_sai_model_spec takes --resolution, the family's (512x512; SD2 768-v: 768x768) without it
    // (a dataset config's own resolution does not reach it).
    const int side = c.family().base_model(c.v_parameterization).resolution;
    const std::array<int, 2> reso = c.resolution.value_or(std::array<int, 2>{side, side});
    so.resolution_w = reso[0];
    so.resolution_h = reso[1];
    so.clip_skip = c.clip_skip.value_or(0);
    so.prediction_type = c.v_parameterization ? "v" : "epsilon";
    so.training = std::move(training);
    for (const auto& [k, v] : {std::pair{"author", &c.metadata_author}, {"description", &c.metadata_description},
                               {"license", &c.metadata_license}, {"tags", &c.metadata_tags}})
        if (*v) so.training[std::string("modelspec.") + k] = **v;
    if (c.min_timestep || c.max_timestep)
        so.training["modelspec.timestep_range"] =
            gl::cat(c.min_timestep.value_or(0), ",", c.max_timestep.value_or(1000));
    so.training["modelspec.implementation_version"] = implementation_version();
    so.minimum_metadata = c.no_metadata;
    return so;
}

}  // namespace train
