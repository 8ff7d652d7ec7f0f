#include "data/config.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include <toml++/toml.h>

#include "data/toml_value.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

namespace data {
namespace fs = std::filesystem;
namespace {

enum class Kind { boolean, integer, number, string, reso, pair };
enum class Scope {
    subset_only,  // only in [[datasets.subsets]]
    subset_or_command_line,  // in [[datasets.subsets]], or on the command line for all (kohya's argparse fallback)
    subset,       // a subset setting that a dataset, [general] or the command line may give for all
    dataset,      // a dataset setting: [[datasets]], [general] or the command line
};
struct Key {
    const char* name;
    Kind kind;
    Scope scope;
};

constexpr Key kKeys[] = {
    {"image_dir", Kind::string, Scope::subset_only},
    {"metadata_file", Kind::string, Scope::subset_only},  // a fine-tuning subset (kohya's FineTuningSubset)
    {"is_reg", Kind::boolean, Scope::subset_only},
    {"conditioning_data_dir", Kind::string, Scope::subset_only},
    {"alpha_mask", Kind::boolean, Scope::subset_or_command_line},
    {"num_repeats", Kind::integer, Scope::subset},
    {"class_tokens", Kind::string, Scope::subset},
    {"caption_extension", Kind::string, Scope::subset},
    {"cache_info", Kind::boolean, Scope::subset},  // kohya's size cache; accepted, not needed here
    {"shuffle_caption", Kind::boolean, Scope::subset},
    {"caption_separator", Kind::string, Scope::subset},
    {"keep_tokens", Kind::integer, Scope::subset},
    {"keep_tokens_separator", Kind::string, Scope::subset},
    {"secondary_separator", Kind::string, Scope::subset},
    {"caption_prefix", Kind::string, Scope::subset},
    {"caption_suffix", Kind::string, Scope::subset},
    {"caption_dropout_rate", Kind::number, Scope::subset},
    {"caption_dropout_every_n_epochs", Kind::integer, Scope::subset},
    {"caption_tag_dropout_rate", Kind::number, Scope::subset},
    {"flip_aug", Kind::boolean, Scope::subset},
    {"random_crop", Kind::boolean, Scope::subset},
    {"color_aug", Kind::boolean, Scope::subset},
    {"face_crop_aug_range", Kind::pair, Scope::subset},
    {"resize_interpolation", Kind::string, Scope::subset},  // and the dataset's own (kohya's two ascendable keys)
    {"enable_wildcard", Kind::boolean, Scope::subset},
    {"token_warmup_min", Kind::integer, Scope::subset},
    {"token_warmup_step", Kind::number, Scope::subset},
    {"batch_size", Kind::integer, Scope::dataset},
    {"resolution", Kind::reso, Scope::dataset},
    {"enable_bucket", Kind::boolean, Scope::dataset},
    {"min_bucket_reso", Kind::integer, Scope::dataset},
    {"max_bucket_reso", Kind::integer, Scope::dataset},
    {"bucket_reso_steps", Kind::integer, Scope::dataset},
    {"bucket_no_upscale", Kind::boolean, Scope::dataset},
    // kohya's schema takes these per dataset (or [general]), not per subset, whatever its
    // docs/validation.md shows.
    {"validation_split", Kind::number, Scope::dataset},
    {"validation_seed", Kind::integer, Scope::dataset},
};
// kohya keys sdtrain does not implement: refused rather than silently ignored, with the reason.
constexpr std::pair<const char*, const char*> kUnsupported[] = {
    {"custom_attributes", "only other families' trainers read it (Lumina's); kohya's SD1.x training ignores it"},
    {"network_multiplier", "a dataset's own network multiplier is not implemented"}};

const Key* find_key(const std::string& name) {
    for (const Key& k : kKeys)
        if (name == k.name) return &k;
    return nullptr;
}

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::boolean: return "a boolean";
        case Kind::integer: return "an integer";
        case Kind::number: return "a number";
        case Kind::string: return "a string";
        case Kind::reso: return "an integer or [width, height]";
        case Kind::pair: return "[low, high] (two numbers)";
    }
    return "?";
}

const char* value_name(const ConfigValue& v) {
    if (std::holds_alternative<bool>(v)) return "a boolean";
    if (std::holds_alternative<int64_t>(v)) return "an integer";
    if (std::holds_alternative<double>(v)) return "a number";
    if (std::holds_alternative<std::string>(v)) return "a string";
    if (std::holds_alternative<std::array<double, 2>>(v)) return "an array of 2 numbers";
    return "an array of 2 integers";
}

bool fits(const ConfigValue& v, Kind k) {
    switch (k) {
        case Kind::boolean: return std::holds_alternative<bool>(v);
        case Kind::integer: return std::holds_alternative<int64_t>(v);
        case Kind::number: return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
        case Kind::string: return std::holds_alternative<std::string>(v);
        case Kind::reso:
            return std::holds_alternative<int64_t>(v) || std::holds_alternative<std::array<int64_t, 2>>(v);
        case Kind::pair:
            return std::holds_alternative<std::array<int64_t, 2>>(v) || std::holds_alternative<std::array<double, 2>>(v);
    }
    return false;
}

// The key's entry; throws naming an unsupported or unknown key.
const Key* known_key(const std::string& name, const std::string& where) {
    for (const auto& [key, why] : kUnsupported)
        if (name == key) gl::fail(where, ": '", name, "' is a kohya option that sdtrain does not support (", why, ")");
    const Key* k = find_key(name);
    GL_CHECK(k, where, ": unknown key '", name, "'");
    return k;
}

// Checks every key of one level: known, allowed there, of the right type.
void validate_level(const ConfigLevel& level, const std::string& where, bool is_subset, bool is_command_line = false) {
    for (const auto& entry : level) {
        const std::string& name = entry.first;
        const ConfigValue& value = entry.second;
        const Key* k = known_key(name, where);
        GL_CHECK(is_subset || k->scope != Scope::subset_only, where, ": '", name,
                 "' belongs in a [[datasets.subsets]] table");
        GL_CHECK(is_subset || is_command_line || k->scope != Scope::subset_or_command_line, where, ": '", name,
                 "' belongs in a [[datasets.subsets]] table (or on the command line)");
        GL_CHECK(!is_subset || k->scope != Scope::dataset, where, ": '", name,
                 "' is a dataset setting, not a subset one");
        GL_CHECK(fits(value, k->kind), where, ": '", name, "' must be ", kind_name(k->kind), ", got ",
                 value_name(value));
    }
}

struct Levels {
    std::vector<const ConfigLevel*> chain;  // most specific first
    std::vector<std::string> names;

    const ConfigValue* find(const std::string& key, std::string* where = nullptr) const {
        for (size_t i = 0; i < chain.size(); i++) {
            auto it = chain[i]->find(key);
            if (it != chain[i]->end()) {
                if (where) *where = names[i];
                return &it->second;
            }
        }
        return nullptr;
    }
    bool get(const char* key, bool def) const {
        const ConfigValue* v = find(key);
        return v ? std::get<bool>(*v) : def;
    }
    std::string get(const char* key, const std::string& def) const {
        const ConfigValue* v = find(key);
        return v ? std::get<std::string>(*v) : def;
    }
    double number(const char* key, double def) const {
        const ConfigValue* v = find(key);
        if (!v) return def;
        return std::holds_alternative<double>(*v) ? std::get<double>(*v) : double(std::get<int64_t>(*v));
    }
    int integer(const char* key, int def) const {
        std::string where;
        const ConfigValue* v = find(key, &where);
        if (!v) return def;
        const int64_t x = std::get<int64_t>(*v);
        GL_CHECK(x >= -(int64_t(1) << 30) && x <= (int64_t(1) << 30), where, ": '", key, "' out of range: ", x);
        return int(x);
    }
};

// kohya's resize_interpolation of the most specific level that sets it (automatic when none does).
Interpolation interpolation_of(const Levels& l) {
    std::string where;
    const ConfigValue* v = l.find("resize_interpolation", &where);
    return v ? parse_interpolation(std::get<std::string>(*v), where) : Interpolation::automatic;
}

// kohya's DreamBooth-only keys: its fine-tuning schema refuses them in a subset or dataset table
// ([general] and the command line may hold them for other datasets; a fine-tuning subset ignores them).
constexpr const char* kDreamBoothOnly[] = {"is_reg", "class_tokens", "caption_extension", "cache_info",
                                           "conditioning_data_dir"};

void check_fine_tuning_level(const ConfigLevel& level, const std::string& where) {
    for (const char* key : kDreamBoothOnly)
        GL_CHECK(!level.count(key), where, ": '", key, "' is not a key of a fine-tuning dataset (its subsets have "
                 "metadata_file; kohya's fine-tuning schema refuses it: captions come from the metadata)");
}

SubsetConfig make_subset(const Levels& l, bool fine_tuning) {
    SubsetConfig s;
    std::string where;
    const ConfigValue* dir = l.find("image_dir", &where);
    if (fine_tuning) {  // kohya: image_dir is optional, needed only for relative keys
        s.metadata_file = fs::path(std::get<std::string>(*l.find("metadata_file")));
        GL_CHECK(!s.metadata_file->empty(), l.names.front(), ": 'metadata_file' is empty");
        if (dir) s.image_dir = fs::path(std::get<std::string>(*dir));
    } else {
        GL_CHECK(dir, l.names.front(), ": 'image_dir' is required");
        s.image_dir = fs::path(std::get<std::string>(*dir));
    }
    s.num_repeats = l.integer("num_repeats", 1);
    if (!fine_tuning) s.is_reg = l.get("is_reg", false);
    s.alpha_mask = l.get("alpha_mask", false);
    if (const ConfigValue* m = l.find("conditioning_data_dir")) {
        s.conditioning_data_dir = fs::path(std::get<std::string>(*m));
        // kohya's mask subsets (its ControlNet subsets) take neither key.
        GL_CHECK(!s.is_reg, l.names.front(), ": conditioning_data_dir (mask images) with is_reg: kohya's masked "
                                             "subsets are training images only");
        GL_CHECK(!s.alpha_mask, l.names.front(), ": conditioning_data_dir and alpha_mask: a subset takes its mask "
                                                 "from one of them");
    }
    if (const ConfigValue* ct = l.find("class_tokens"); ct && !fine_tuning) s.class_tokens = std::get<std::string>(*ct);
    CaptionOptions& c = s.caption;
    if (!fine_tuning) c.caption_extension = l.get("caption_extension", c.caption_extension);
    c.caption_prefix = l.get("caption_prefix", std::string());
    c.caption_suffix = l.get("caption_suffix", std::string());
    c.shuffle_caption = l.get("shuffle_caption", false);
    c.caption_separator = l.get("caption_separator", c.caption_separator);
    c.keep_tokens = l.integer("keep_tokens", 0);
    c.keep_tokens_separator = l.get("keep_tokens_separator", std::string());
    c.secondary_separator = l.get("secondary_separator", std::string());
    c.caption_dropout_rate = l.number("caption_dropout_rate", 0);
    c.caption_dropout_every_n_epochs = l.integer("caption_dropout_every_n_epochs", 0);
    c.caption_tag_dropout_rate = l.number("caption_tag_dropout_rate", 0);
    c.enable_wildcard = l.get("enable_wildcard", false);
    c.token_warmup_min = l.integer("token_warmup_min", 1);
    c.token_warmup_step = l.number("token_warmup_step", 0);
    try {
        c.validate();
    } catch (const gl::Error& e) {
        gl::fail(l.names.front(), ": ", e.what());
    }
    s.flip_aug = l.get("flip_aug", false);
    s.random_crop = l.get("random_crop", false);
    s.color_aug = l.get("color_aug", false);
    if (const ConfigValue* v = l.find("face_crop_aug_range", &where)) {
        std::array<double, 2> r;
        if (const auto* i = std::get_if<std::array<int64_t, 2>>(v)) r = {double((*i)[0]), double((*i)[1])};
        else r = std::get<std::array<double, 2>>(*v);
        GL_CHECK(std::isfinite(r[0]) && std::isfinite(r[1]) && r[0] > 0 && r[0] <= r[1], where,
                 ": 'face_crop_aug_range' must be [low, high] with 0 < low <= high (kohya's assertion: low <= high; "
                 "it divides by both), got [", r[0], ", ", r[1], "]");
        s.face_crop_aug_range = r;
    }
    s.resize_interpolation = interpolation_of(l);
    return s;
}

DatasetConfig make_dataset(const Levels& l) {
    DatasetConfig d;
    d.batch_size = l.integer("batch_size", 1);
    std::string where = "defaults";
    if (const ConfigValue* r = l.find("resolution", &where)) {
        if (std::holds_alternative<int64_t>(*r)) {
            d.width = d.height = int(std::clamp<int64_t>(std::get<int64_t>(*r), 0, 1 << 20));
        } else {
            const auto& wh = std::get<std::array<int64_t, 2>>(*r);
            d.width = int(std::clamp<int64_t>(wh[0], 0, 1 << 20));
            d.height = int(std::clamp<int64_t>(wh[1], 0, 1 << 20));
        }
    }
    GL_CHECK(d.width > 0 && d.height > 0, where, ": resolution must be positive");
    d.enable_bucket = l.get("enable_bucket", false);
    d.min_bucket_reso = l.integer("min_bucket_reso", 256);
    d.max_bucket_reso = l.integer("max_bucket_reso", 1024);
    d.bucket_reso_steps = l.integer("bucket_reso_steps", 64);
    d.bucket_no_upscale = l.get("bucket_no_upscale", false);
    d.resize_interpolation = interpolation_of(l);
    d.validation_split = l.number("validation_split", 0.0);
    if (const ConfigValue* v = l.find("validation_seed")) d.validation_seed = std::get<int64_t>(*v);
    GL_CHECK(d.validation_split >= 0.0 && d.validation_split <= 1.0, l.names.front(),
             ": validation_split must be in [0, 1], got ", d.validation_split);
    GL_CHECK(d.batch_size >= 1, l.names.front(), ": batch_size must be >= 1");
    GL_CHECK(d.bucket_reso_steps >= 1, l.names.front(), ": bucket_reso_steps must be >= 1");
    GL_CHECK(d.min_bucket_reso >= 1 && d.min_bucket_reso <= d.max_bucket_reso, l.names.front(),
             ": need 1 <= min_bucket_reso <= max_bucket_reso, got ", d.min_bucket_reso, " and ", d.max_bucket_reso);
    return d;
}

// A value no key takes (a table, a date, an array other than [width, height]): the error names
// what was given and what the key wants (an unknown or unsupported key is named as such first).
[[noreturn]] void refuse_value(const std::string& key, const toml::node& node, const std::string& where) {
    const Key* k = known_key(key, where);
    gl::fail(where, ": '", key, "' must be ", kind_name(k->kind), ", got ", describe_toml_value(node));
}

ConfigLevel level_of(const toml::table& t, const std::string& where, bool is_subset) {
    ConfigLevel out;
    for (const auto& [k, node] : t) {
        const std::string key(k.str());
        if (key == "datasets" || key == "subsets") continue;
        if (auto b = node.value_exact<bool>()) out[key] = *b;
        else if (auto i = node.value_exact<int64_t>()) out[key] = *i;
        else if (auto d = node.value_exact<double>()) out[key] = *d;
        else if (auto s = node.value_exact<std::string>()) out[key] = *s;
        else if (const toml::array* a = node.as_array(); a && a->size() == 2 && a->is_homogeneous<int64_t>())
            out[key] = std::array<int64_t, 2>{*a->get(0)->value<int64_t>(), *a->get(1)->value<int64_t>()};
        else if (a && a->size() == 2 && a->get(0)->is_number() && a->get(1)->is_number())
            out[key] = std::array<double, 2>{*a->get(0)->value<double>(), *a->get(1)->value<double>()};
        else refuse_value(key, node, where);
    }
    validate_level(out, where, is_subset);
    return out;
}

}  // namespace

std::vector<DatasetConfig> parse_dataset_config(const std::string& text, const std::string& name,
                                                const ConfigLevel& command_line) {
    toml::table root;
    try {
        root = toml::parse(text, name);
    } catch (const toml::parse_error& e) {
        std::ostringstream os;
        os << e.description() << " (line " << e.source().begin.line << ", column " << e.source().begin.column << ")";
        gl::fail(name, ": invalid TOML: ", os.str());
    }
    for (const auto& [k, node] : root) {
        const std::string key(k.str());
        GL_CHECK(key == "general" || key == "datasets", name, ": unknown top-level key '", key,
                 "' (expected [general] and [[datasets]])");
    }
    validate_level(command_line, "command line", false, true);
    ConfigLevel general;
    if (const toml::node* g = root.get("general")) {
        GL_CHECK(g->is_table(), name, ": [general] must be a table");
        general = level_of(*g->as_table(), name + " [general]", false);
    }
    const toml::array* datasets = root["datasets"].as_array();
    GL_CHECK(datasets && !datasets->empty(), name, ": no [[datasets]]");
    std::vector<DatasetConfig> out;
    for (size_t i = 0; i < datasets->size(); i++) {
        const std::string dname = gl::cat(name, " [[datasets]] #", i + 1);
        const toml::table* dt = datasets->get(i)->as_table();
        GL_CHECK(dt, dname, ": must be a table");
        const ConfigLevel dl = level_of(*dt, dname, false);
        Levels dlev{{&dl, &general, &command_line}, {dname, name + " [general]", "command line"}};
        DatasetConfig d = make_dataset(dlev);
        const toml::array* subsets = (*dt)["subsets"].as_array();
        GL_CHECK(subsets && !subsets->empty(), dname, ": no [[datasets.subsets]]");
        std::vector<ConfigLevel> levels;
        for (size_t j = 0; j < subsets->size(); j++) {
            const std::string sname = gl::cat(dname, " subset #", j + 1);
            const toml::table* st = subsets->get(j)->as_table();
            GL_CHECK(st, sname, ": must be a table");
            levels.push_back(level_of(*st, sname, true));
        }
        // kohya's dataset kinds: fine-tuning when every subset has metadata_file, DreamBooth (or
        // masks) when none has; a mix is refused with kohya's reason.
        const auto with_metadata = std::count_if(levels.begin(), levels.end(),
                                                 [](const ConfigLevel& sl) { return sl.count("metadata_file") > 0; });
        GL_CHECK(with_metadata == 0 || size_t(with_metadata) == levels.size(), dname, ": metadata_file is set in ",
                 with_metadata, " of its ", levels.size(), " subsets; kohya cannot mix DreamBooth subsets and "
                 "fine-tuning subsets in one dataset: split them into separate [[datasets]]");
        const bool fine_tuning = with_metadata > 0;
        if (fine_tuning) {
            check_fine_tuning_level(dl, dname);
            for (size_t j = 0; j < levels.size(); j++) check_fine_tuning_level(levels[j], gl::cat(dname, " subset #", j + 1));
            // kohya hands validation_split to FineTuningDataset, which does not split: its validation
            // set would be its whole training set.
            GL_CHECK(d.validation_split == 0.0, dname, ": validation_split ", d.validation_split,
                     " with fine-tuning subsets (metadata_file): kohya's FineTuningDataset does not split its images "
                     "(its validation set would be the training set itself); sdtrain refuses it");
        }
        for (size_t j = 0; j < levels.size(); j++) {
            const std::string sname = gl::cat(dname, " subset #", j + 1);
            d.subsets.push_back(make_subset(Levels{{&levels[j], &dl, &general, &command_line},
                                                   {sname, dname, name + " [general]", "command line"}},
                                            fine_tuning));
        }
        // kohya reads a dataset as one of masks (its ControlNet dataset) only when every subset names
        // its mask folder; otherwise the key is one its DreamBooth schema refuses.
        const auto masked = std::count_if(d.subsets.begin(), d.subsets.end(),
                                          [](const SubsetConfig& s) { return s.conditioning_data_dir.has_value(); });
        GL_CHECK(masked == 0 || size_t(masked) == d.subsets.size(), dname, ": conditioning_data_dir is set in ", masked,
                 " of its ", d.subsets.size(), " subsets; kohya takes mask folders for every subset of a dataset "
                 "or for none");
        out.push_back(std::move(d));
    }
    return out;
}

std::vector<DatasetConfig> load_dataset_config(const fs::path& file, const ConfigLevel& command_line) {
    std::string text;
    try {  // a FIFO or a folder is refused, never waited on
        text = gl::io::read_small_file(file.string());
    } catch (const gl::Error& e) {
        gl::fail("dataset config ", e.what());
    }
    return parse_dataset_config(text, file.string(), command_line);
}

DatasetConfig folder_dataset_config(const fs::path& train_dir, const std::optional<fs::path>& reg_dir,
                                    const ConfigLevel& command_line, std::vector<std::string>& warnings) {
    validate_level(command_line, "command line", false, true);
    Levels dlev{{&command_line}, {"command line"}};
    DatasetConfig d = make_dataset(dlev);
    auto scan = [&](const fs::path& base, bool is_reg) {
        std::error_code ec;
        GL_CHECK(fs::is_directory(base, ec), is_reg ? "reg_data_dir " : "train_data_dir ", base.string(),
                 ": not a directory");
        std::vector<fs::path> dirs;
        for (const fs::directory_entry& e : fs::directory_iterator(base))
            if (e.is_directory()) dirs.push_back(e.path());
        std::sort(dirs.begin(), dirs.end());
        for (const fs::path& dir : dirs) {
            const std::string folder = dir.filename().string();
            const std::string head = folder.substr(0, folder.find('_'));
            char* end = nullptr;
            const long repeats = head.empty() ? 0 : std::strtol(head.c_str(), &end, 10);
            if (head.empty() || *end != '\0' || repeats < 1 || repeats > (1 << 20)) {
                warnings.push_back(gl::cat("skipping folder ", dir.string(),
                                           ": its name does not start with a repeat count >= 1 (<repeats>_<name>)"));
                continue;
            }
            ConfigLevel sub = {{"image_dir", dir.string()},
                               {"num_repeats", int64_t(repeats)},
                               {"is_reg", is_reg},
                               {"class_tokens", folder.find('_') == std::string::npos
                                                    ? std::string()
                                                    : folder.substr(folder.find('_') + 1)}};
            d.subsets.push_back(make_subset(Levels{{&sub, &command_line}, {dir.string(), "command line"}}, false));
        }
    };
    scan(train_dir, false);
    if (reg_dir) scan(*reg_dir, true);
    return d;
}

DatasetConfig metadata_dataset_config(const fs::path& in_json, const std::optional<fs::path>& train_data_dir,
                                      const ConfigLevel& command_line) {
    validate_level(command_line, "command line", false, true);
    Levels dlev{{&command_line}, {"command line"}};
    DatasetConfig d = make_dataset(dlev);
    GL_CHECK(d.validation_split == 0.0, "--validation_split ", d.validation_split,
             " with --in_json: kohya's FineTuningDataset does not split its images (its validation set would be the "
             "training set itself); sdtrain refuses it");
    ConfigLevel sub = {{"metadata_file", in_json.string()}};
    if (train_data_dir) sub["image_dir"] = train_data_dir->string();
    d.subsets.push_back(make_subset(Levels{{&sub, &command_line}, {"--in_json " + in_json.string(), "command line"}}, true));
    return d;
}

}  // namespace data
