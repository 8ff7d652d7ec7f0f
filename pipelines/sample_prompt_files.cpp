// kohya's .toml and .json sample-prompt files (see sample_prompt_files.h): each prompt's keys are
// gathered as typed fields from either format, then read by one set of rules.
#include "pipelines/sample_prompt_files.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

namespace sd {

namespace {

using diffusion::SamplePrompt;
using nlohmann::json;

// A key's value as both formats hold it; `other` names a type no key takes (a list, a table).
struct Integer {
    bool negative = false;
    uint64_t magnitude = 0;
};
struct Other {
    std::string type;
};
using Field = std::variant<Integer, double, std::string, bool, Other>;
using Fields = std::map<std::string, Field>;

const char* const kKeys = "prompt, negative_prompt, width, height, scale, seed, sample_steps, sample_sampler";

std::string type_name(const Field& f) {
    if (std::holds_alternative<Integer>(f)) return "an integer";
    if (std::holds_alternative<double>(f)) return "a float";
    if (std::holds_alternative<std::string>(f)) return "a string";
    if (std::holds_alternative<bool>(f)) return "a boolean";
    return std::get<Other>(f).type;
}

SamplePrompt from_fields(const Fields& fields, const SamplePrompt& defaults, const std::string& where) {
    SamplePrompt p = defaults;
    p.where = where;
    auto text = [&](const std::string& k, const Field& f) {
        GL_CHECK(std::holds_alternative<std::string>(f), where, ": ", k, " must be a string, got ", type_name(f));
        return std::get<std::string>(f);
    };
    auto whole = [&](const std::string& k, const Field& f, uint64_t max) {
        const Integer* i = std::get_if<Integer>(&f);
        GL_CHECK(i, where, ": ", k, " must be a whole number, got ", type_name(f));
        GL_CHECK(!i->negative && i->magnitude <= max, where, ": ", k, " ", i->negative ? "-" : "", i->magnitude,
                 " must be in [0, ", max, "]");
        return i->magnitude;
    };
    constexpr uint64_t kInt = uint64_t(std::numeric_limits<int>::max());
    for (const auto& [k, f] : fields) {
        if (k == "prompt") p.prompt = text(k, f);
        else if (k == "negative_prompt") p.negative = text(k, f);
        else if (k == "sample_sampler") p.sampler = text(k, f);
        else if (k == "width") p.width = int(whole(k, f, kInt));
        else if (k == "height") p.height = int(whole(k, f, kInt));
        else if (k == "sample_steps") p.steps = int(whole(k, f, kInt));
        else if (k == "seed") p.seed = whole(k, f, std::numeric_limits<uint64_t>::max());
        else if (k == "scale") {
            if (const Integer* i = std::get_if<Integer>(&f)) p.cfg_scale = (i->negative ? -1.0 : 1.0) * double(i->magnitude);
            else if (const double* d = std::get_if<double>(&f)) p.cfg_scale = *d;
            else gl::fail(where, ": scale must be a number, got ", type_name(f));
        } else if (k == "guidance_scale" || k == "controlnet_image" || k == "cfg_trunc_ratio" || k == "renorm_cfg" ||
                   k == "flow_shift") {
            gl::fail(where, ": ", k, " is one of kohya's keys for other model families; SD1.x does not take it");
        } else {
            gl::fail(where, ": unknown key '", k, "' (known: ", kKeys, ")");
        }
    }
    diffusion::validate_prompt(p, where);
    return p;
}

Field toml_field(const toml::node& n) {
    if (const auto* v = n.as_integer()) {
        const int64_t x = v->get();
        return Integer{x < 0, x < 0 ? uint64_t(0) - uint64_t(x) : uint64_t(x)};
    }
    if (const auto* v = n.as_floating_point()) return v->get();
    if (const auto* v = n.as_string()) return v->get();
    if (const auto* v = n.as_boolean()) return v->get();
    if (n.is_array()) return Other{"an array"};
    if (n.is_table()) return Other{"a table"};
    return Other{"a date or time"};
}

Field json_field(const json& v) {
    if (v.is_number_unsigned()) return Integer{false, v.get<uint64_t>()};
    if (v.is_number_integer()) {
        const int64_t x = v.get<int64_t>();
        return Integer{x < 0, x < 0 ? uint64_t(0) - uint64_t(x) : uint64_t(x)};
    }
    if (v.is_number_float()) return v.get<double>();
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>();
    return Other{v.is_null() ? "null" : v.is_array() ? "an array" : "an object"};
}

std::vector<SamplePrompt> read_toml(const std::string& text, const std::string& path, const SamplePrompt& defaults) {
    toml::table root;
    try {
        root = toml::parse(text, path);
    } catch (const toml::parse_error& e) {
        std::ostringstream os;
        os << e.description() << " (line " << e.source().begin.line << ", column " << e.source().begin.column << ")";
        gl::fail(path, ": invalid TOML: ", os.str());
    }
    const toml::table* shared = root["prompt"].as_table();
    GL_CHECK(shared, path, ": no [prompt] table (kohya's prompt file: [prompt] with [[prompt.subset]] tables)");
    const toml::array* subsets = (*shared)["subset"].as_array();
    GL_CHECK(subsets && !subsets->empty(), path, ": no [[prompt.subset]] table: each one is a prompt");
    Fields common;
    for (const auto& [k, n] : *shared)
        if (k.str() != "subset") common[std::string(k.str())] = toml_field(n);
    std::vector<SamplePrompt> out;
    for (size_t i = 0; i < subsets->size(); i++) {
        const std::string where = gl::cat(path, ": prompt ", i + 1);
        const toml::table* t = subsets->get(i)->as_table();
        GL_CHECK(t, where, ": [[prompt.subset]] entries must be tables");
        Fields f = common;
        for (const auto& [k, n] : *t) {
            const std::string key(k.str());
            GL_CHECK(!common.count(key), where, ": ", key, " is given in [prompt] and in its subset (kohya's "
                     "dict(**prompt, **subset) refuses a key given twice)");
            f[key] = toml_field(n);
        }
        out.push_back(from_fields(f, defaults, where));
    }
    return out;
}

std::vector<SamplePrompt> read_json(const std::string& text, const std::string& path, const SamplePrompt& defaults) {
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    GL_CHECK(!j.is_discarded(), path, ": not valid JSON");
    GL_CHECK(j.is_array(), path, ": a JSON prompt file is a list of prompts (objects or lines)");
    std::vector<SamplePrompt> out;
    for (size_t i = 0; i < j.size(); i++) {
        const std::string where = gl::cat(path, ": prompt ", i + 1);
        const json& e = j[i];
        if (e.is_string()) {
            std::optional<SamplePrompt> p = diffusion::parse_prompt_line(e.get<std::string>(), defaults, where);
            GL_CHECK(p, where, ": an empty or '#' comment line, not a prompt");
            out.push_back(std::move(*p));
            continue;
        }
        GL_CHECK(e.is_object(), where, ": must be an object of prompt keys or a prompt line");
        Fields f;
        for (const auto& [k, v] : e.items()) f[k] = json_field(v);
        out.push_back(from_fields(f, defaults, where));
    }
    return out;
}

std::string lower_extension(const std::string& path) {
    const size_t dot = path.find_last_of('.');
    std::string e = dot == std::string::npos ? "" : path.substr(dot);
    for (char& ch : e) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return e;
}

}  // namespace

std::vector<SamplePrompt> read_sample_prompt_file(const std::string& path, const SamplePrompt& defaults) {
    const std::string ext = lower_extension(path);
    if (ext != ".toml" && ext != ".json") return diffusion::read_prompt_file(path, defaults);
    std::string text;
    try {  // a FIFO or a folder is refused, never waited on
        text = gl::io::read_small_file(path);
    } catch (const gl::Error& e) {
        gl::fail("prompt file ", e.what());
    }
    std::vector<SamplePrompt> out = ext == ".toml" ? read_toml(text, path, defaults) : read_json(text, path, defaults);
    GL_CHECK(!out.empty(), "prompt file ", path, ": holds no prompt");
    return out;
}

}  // namespace sd
