#include "data/fine_tuning.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

namespace data {
namespace fs = std::filesystem;
namespace {

using Json = nlohmann::ordered_json;

// kohya's IMAGE_EXTENSIONS (without the optional AVIF / JPEG XL plug-ins), in its order.
constexpr const char* kImageExtensions[] = {".png", ".jpg", ".jpeg", ".webp", ".bmp",
                                            ".PNG", ".JPG", ".JPEG", ".WEBP", ".BMP"};

// Python's len() of a UTF-8 string: its code points.
size_t code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xc0) != 0x80;
    return n;
}

bool blank(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f); });
}

std::vector<std::string> split_lines(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t a = 0;
    for (;;) {
        const size_t b = s.find(sep, a);
        out.push_back(s.substr(a, b == std::string::npos ? b : b - a));
        if (b == std::string::npos) return out;
        a = b + 1;
    }
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
    return s;
}

// Python's text-mode lines (universal newlines: \n, \r\n and \r end a line), without their ends.
std::vector<std::string> text_lines(const std::string& s) {
    std::vector<std::string> out;
    std::string line;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '\n' || s[i] == '\r') {
            out.push_back(std::move(line));
            line.clear();
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') i++;
        } else {
            line += s[i];
        }
    }
    if (!line.empty()) out.push_back(std::move(line));
    return out;
}

Json parse_json(const std::string& text, const std::string& where) {
    try {
        return Json::parse(text);
    } catch (const Json::parse_error& e) {
        gl::fail(where, ": not valid JSON (", e.what(), ")");
    }
}

// A string or null / absent value of an entry; other types are refused (kohya's code would fail on them).
std::optional<std::string> string_field(const Json& md, const char* key, const std::string& where) {
    const auto it = md.find(key);
    if (it == md.end() || it->is_null()) return std::nullopt;
    GL_CHECK(it->is_string(), where, ": '", key, "' must be a string, got ", it->dump());
    return it->get<std::string>();
}

std::optional<std::array<int64_t, 2>> size_field(const Json& v, const std::string& where) {
    if (v.is_null()) return std::nullopt;
    GL_CHECK(v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer() &&
                 v[0].get<int64_t>() > 0 && v[1].get<int64_t>() > 0,
             where, ": 'image_size' must be [width, height] (two positive integers), got ", v.dump());
    return std::array<int64_t, 2>{v[0].get<int64_t>(), v[1].get<int64_t>()};
}

struct Raw {
    std::string key;
    Json md;
};

// The metadata as kohya's dict: keys in first-seen order, the last value of a key kept.
std::vector<Raw> read_entries(const fs::path& file) {
    const std::string name = file.string();
    std::string text;
    try {  // a folder or a FIFO is refused, never waited on
        text = gl::io::read_small_file(name, uint64_t(1) << 31);
    } catch (const gl::Error& e) {
        gl::fail("metadata file ", e.what(), " (kohya: no metadata)");
    }
    GL_CHECK(text.rfind("\xEF\xBB\xBF", 0) != 0, "metadata file ", name,
             ": starts with a UTF-8 byte order mark, which kohya's json reader refuses; save it without one");
    std::vector<Raw> out;
    std::unordered_map<std::string, size_t> index;
    auto put = [&](const std::string& key, Json md) {
        const auto [it, added] = index.try_emplace(key, out.size());
        if (!added) return void(out[it->second].md = std::move(md));
        out.push_back({key, std::move(md)});
    };
    const bool jsonl = name.size() >= 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0;
    if (!jsonl) {
        Json root = parse_json(text, "metadata file " + name);
        GL_CHECK(root.is_object(), "metadata file ", name, ": must be a JSON object of image key -> {\"caption\", "
                 "\"tags\", ...}, got ", root.type_name());
        // nlohmann keeps a duplicated key's first place and last value, as Python's json does.
        for (auto& [key, md] : root.items()) {
            GL_CHECK(md.is_object(), "metadata file ", name, ": the entry of '", key, "' must be an object, got ",
                     md.type_name());
            put(key, std::move(md));
        }
        return out;
    }
    const std::vector<std::string> lines = text_lines(text);
    for (size_t i = 0; i < lines.size(); i++) {
        const std::string where = gl::cat("metadata file ", name, " line ", i + 1);
        const Json line = parse_json(lines[i], where);
        GL_CHECK(line.is_object(), where, ": must be a JSON object, got ", line.type_name());
        const auto path = line.find("image_path");
        GL_CHECK(path != line.end() && path->is_string(), where, ": needs \"image_path\" (a string)");
        Json md = Json::object();
        const auto caption = line.find("caption");  // kohya: line_md.get("caption", "")
        md["caption"] = caption == line.end() ? Json("") : *caption;
        if (line.contains("image_size")) md["image_size"] = line["image_size"];
        if (line.contains("width") && line.contains("height")) md["image_size"] = Json::array({line["width"], line["height"]});
        if (line.contains("tags")) md["tags"] = line["tags"];
        put(path->get<std::string>(), std::move(md));
    }
    return out;
}

// kohya's glob_images(dir, name): <dir>/<name><ext> for each extension, existing ones, sorted.
std::optional<fs::path> find_with_extension(const fs::path& dir, const std::string& name) {
    std::vector<std::string> found;
    for (const char* ext : kImageExtensions) {
        const fs::path p = dir / (name + ext);
        std::error_code ec;
        if (fs::exists(p, ec)) found.push_back(p.string());
    }
    if (found.empty()) return std::nullopt;
    std::sort(found.begin(), found.end());
    return fs::path(found.front());
}

}  // namespace

std::vector<MetadataImage> read_fine_tuning_metadata(const SubsetConfig& subset) {
    GL_CHECK(subset.metadata_file, "read_fine_tuning_metadata: the subset has no metadata_file");
    const std::string name = subset.metadata_file->string();
    std::vector<Raw> entries = read_entries(*subset.metadata_file);
    std::vector<MetadataImage> out;
    out.reserve(entries.size());
    for (Raw& r : entries) {
        const std::string where = gl::cat("metadata file ", name, ": '", r.key, "'");
        GL_CHECK(!r.key.empty(), "metadata file ", name, ": an empty image key");
        MetadataImage m;
        m.key = r.key;
        const fs::path key(r.key);
        fs::path path;
        if (key.is_absolute()) {
            path = key;
        } else {
            GL_CHECK(!subset.image_dir.empty(), where, ": image_dir is required when image paths are relative "
                     "(kohya's rule; give --train_data_dir, or image_dir in the subset)");
            path = subset.image_dir / key;
        }
        std::error_code ec;
        if (key.filename().extension().empty() || !fs::exists(path, ec)) {
            if (std::optional<fs::path> p = find_with_extension(path.parent_path(), key.filename().string())) path = *p;
        }
        GL_CHECK(fs::exists(path, ec), where, ": no image ", path.string(),
                 " (nor one of its name with an image extension); kohya would need its latents in an .npz, sdtrain "
                 "needs the image");
        m.path = path;
        std::optional<std::string> caption = string_field(r.md, "caption", where);
        std::optional<std::string> tags = string_field(r.md, "tags", where);
        if (const auto it = r.md.find("image_size"); it != r.md.end()) m.image_size = size_field(*it, where);
        m.caption = caption.value_or("");
        const std::string& sep = subset.caption.caption_separator;
        if (subset.caption.enable_wildcard) {
            if (tags) {
                *tags = replace_all(*tags, "\n", sep);
                std::string joined;
                for (const std::string& line : split_lines(m.caption, '\n')) {
                    if (blank(line)) continue;
                    if (!joined.empty()) joined += '\n';
                    joined += line + sep + *tags;
                }
                m.caption = joined;
                m.tags = tags;
            }
        } else if (tags && !tags->empty()) {
            if (!m.caption.empty()) m.caption += sep;
            m.caption += *tags;
            m.tags = tags;
        }
        out.push_back(std::move(m));
    }
    // kohya walks the keys longest first (Python's stable sort by len).
    std::stable_sort(out.begin(), out.end(), [](const MetadataImage& a, const MetadataImage& b) {
        return code_points(a.key) > code_points(b.key);
    });
    return out;
}

}  // namespace data
