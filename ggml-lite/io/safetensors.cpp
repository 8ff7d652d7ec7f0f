#include "ggml-lite/io/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "ggml-lite/core/checked.h"
#include "ggml-lite/io/atomic_file.h"

namespace gl::io {

using nlohmann::json;

namespace {

// The reference implementation refuses headers above 100 MB; so do we (SD1.5 needs ~200 KB).
constexpr uint64_t kMaxHeader = 100u << 20;

bool parse_stored(const std::string& s, StoredType* t) {
    static const std::pair<const char*, StoredType> table[] = {
        {"F64", StoredType::f64}, {"F32", StoredType::f32}, {"F16", StoredType::f16},
        {"BF16", StoredType::bf16}, {"I64", StoredType::i64}, {"I32", StoredType::i32},
        {"I8", StoredType::i8},   {"U8", StoredType::u8},   {"BOOL", StoredType::boolean},
    };
    for (const auto& [name, type] : table)
        if (s == name) {
            *t = type;
            return true;
        }
    return false;
}

// A JSON number that is a non-negative integer below `limit`, else false.
bool as_count(const json& v, uint64_t limit, int64_t* out) {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) return false;
    uint64_t u = v.get<uint64_t>();
    if (u > limit) return false;
    *out = int64_t(u);
    return true;
}

std::string tick(const std::string& name) { return "'" + name + "'"; }

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : bytes_(FileBytes::map(path)) { parse(); }

SafetensorsFile::SafetensorsFile(std::vector<uint8_t> bytes, const std::string& origin)
    : bytes_(FileBytes::own(std::move(bytes), origin)) {
    parse();
}

void SafetensorsFile::parse() {
    const std::string& file = bytes_.origin();
    const size_t size = bytes_.size();
    GL_CHECK(size >= 8, file, ": not a safetensors file: ", size, " bytes, shorter than the 8-byte header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes_.data()[i];
    GL_CHECK(n <= kMaxHeader, file, ": safetensors header length ", n, " exceeds the ", kMaxHeader, "-byte limit");
    GL_CHECK(n <= size - 8, file, ": truncated: header length ", n, " but only ", size - 8,
             " bytes follow the length field");
    const char* h = reinterpret_cast<const char*>(bytes_.data() + 8);
    GL_CHECK(n >= 2 && h[0] == '{', file, ": safetensors header does not start with a JSON object");
    data_area_ = bytes_.data() + 8 + n;
    const uint64_t data_size = size - 8 - n;

    // Duplicate top-level names would make "which one did we load" ambiguous, and nothing a
    // valid header holds nests deeper than 2 levels below the root object.
    std::set<std::string> seen;
    std::string duplicate;
    json root;
    try {
        root = json::parse(h, h + n, [&](int depth, json::parse_event_t ev, json& v) {
            if (depth > 3) throw Error(cat(file, ": safetensors header nests deeper than a header can"));
            if (ev == json::parse_event_t::key && depth == 1 && !seen.insert(v.get<std::string>()).second &&
                duplicate.empty())
                duplicate = v.get<std::string>();
            return true;
        });
    } catch (const json::exception& e) {
        fail(file, ": safetensors header is not valid JSON: ", e.what());
    }
    GL_CHECK(root.is_object(), file, ": safetensors header is not a JSON object");
    GL_CHECK(duplicate.empty(), file, ": safetensors header names tensor ", tick(duplicate), " twice");

    for (const auto& [name, v] : root.items()) {
        if (name == "__metadata__") {
            GL_CHECK(v.is_object(), file, ": __metadata__ is not a JSON object");
            for (const auto& [k, s] : v.items()) {
                GL_CHECK(s.is_string(), file, ": __metadata__ value of ", tick(k), " is not a string");
                metadata_[k] = s.get<std::string>();
            }
            continue;
        }
        const std::string what = cat(file, ": tensor ", tick(name));
        GL_CHECK(v.is_object(), what, ": header entry is not a JSON object");
        for (const auto& [k, unused] : v.items())
            GL_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", what, ": unknown header field ", tick(k));
        GL_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), what,
                 ": header entry needs dtype, shape and data_offsets");
        Entry e;
        e.name = name;
        const json& dt = v["dtype"];
        GL_CHECK(dt.is_string(), what, ": dtype is not a string");
        GL_CHECK(parse_stored(dt.get<std::string>(), &e.stored), what, ": unsupported dtype ", dt.dump(),
                 " (known: F64 F32 F16 BF16 I64 I32 I8 U8 BOOL)");
        const json& sh = v["shape"];
        GL_CHECK(sh.is_array(), what, ": shape is not an array");
        int64_t numel = 1;
        for (const json& d : sh) {
            int64_t x = 0;
            GL_CHECK(as_count(d, uint64_t(INT64_MAX), &x), what, ": shape ", sh.dump(),
                     " holds something other than a non-negative integer");
            GL_CHECK(mul_ok(numel, x, &numel), what, ": shape ", sh.dump(), " overflows");
            e.shape.push_back(x);
        }
        const json& off = v["data_offsets"];
        GL_CHECK(off.is_array() && off.size() == 2, what, ": data_offsets is not [begin, end]");
        GL_CHECK(as_count(off[0], data_size, &e.begin) && as_count(off[1], data_size, &e.end), what,
                 ": data_offsets ", off.dump(), " fall outside the ", data_size, "-byte data area (file truncated?)");
        GL_CHECK(e.begin <= e.end, what, ": data_offsets ", off.dump(), " end before they begin");
        int64_t want = 0;
        GL_CHECK(mul_ok(numel, int64_t(stored_size(e.stored)), &want) && want == e.end - e.begin, what,
                 ": shape ", sh.dump(), " x ", stored_name(e.stored), " needs ", want, " bytes but data_offsets ",
                 off.dump(), " hold ", e.end - e.begin);
        entries_.push_back(std::move(e));
    }

    // No two tensors may share bytes (empty tensors take none).
    std::vector<const Entry*> by_offset;
    for (const Entry& e : entries_)
        if (e.end > e.begin) by_offset.push_back(&e);
    std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_offset.size(); i++)
        GL_CHECK(by_offset[i]->begin >= by_offset[i - 1]->end, file, ": tensors ", tick(by_offset[i - 1]->name),
                 " and ", tick(by_offset[i]->name), " overlap in the data area");

    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
    for (size_t i = 0; i < entries_.size(); i++) index_[entries_[i].name] = i;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) fail(origin(), ": no tensor ", tick(name));
    return entries_[it->second];
}

std::vector<TensorInfo> SafetensorsFile::list() const {
    std::vector<TensorInfo> out;
    out.reserve(entries_.size());
    for (const Entry& e : entries_) out.push_back({e.name, natural_dtype(e.stored), e.shape});
    return out;
}

TensorInfo SafetensorsFile::info(const std::string& name) const {
    const Entry& e = entry(name);
    return {e.name, natural_dtype(e.stored), e.shape};
}

const void* SafetensorsFile::raw(const std::string& name) const { return data_area_ + entry(name).begin; }

size_t SafetensorsFile::nbytes(const std::string& name) const {
    const Entry& e = entry(name);
    return size_t(e.end - e.begin);
}

void SafetensorsFile::read(const std::string& name, void* dst, DType to) const {
    const Entry& e = entry(name);
    const int64_t n = (e.end - e.begin) / int64_t(stored_size(e.stored));
    convert_elements(data_area_ + e.begin, e.stored, dst, to, n, cat(origin(), ": tensor ", tick(name)));
}

// ---- writer ----

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    // Validate everything and build the header before touching the disk.
    GL_CHECK(!path.empty() && path.back() != '/', "write_safetensors: '", path, "' names no file");
    std::vector<const TensorToWrite*> order;
    std::set<std::string> names;
    for (const TensorToWrite& t : tensors) {
        const std::string what = cat(path, ": tensor ", tick(t.name));
        GL_CHECK(!t.name.empty() && t.name != "__metadata__", path, ": invalid tensor name ", tick(t.name));
        GL_CHECK(names.insert(t.name).second, what, ": given twice");
        const int64_t numel = checked_numel(t.shape.data(), t.shape.size(), what);
        checked_bytes(numel, dtype_size(t.dtype), what);
        GL_CHECK(t.data || numel == 0, what, ": no data");
        order.push_back(&t);
    }
    // Wider elements first, then by name: every tensor starts aligned to its element size.
    std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
        size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
        return sa != sb ? sa > sb : a->name < b->name;
    });
    json header = json::object();  // std::map underneath: keys come out sorted
    std::vector<size_t> sizes;
    uint64_t offset = 0;
    for (const TensorToWrite* t : order) {
        const size_t nb = size_t(checked_bytes(checked_numel(t->shape.data(), t->shape.size(), path),
                                               dtype_size(t->dtype), path));
        header[t->name] = {{"dtype", stored_name(stored_of(t->dtype))},
                           {"shape", t->shape},
                           {"data_offsets", {offset, offset + nb}}};
        sizes.push_back(nb);
        offset = uint64_t(checked_add(int64_t(offset), int64_t(nb), path, ": the data area"));
    }
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::string text;
    try {
        text = header.dump();
    } catch (const json::exception& e) {
        fail(path, ": cannot encode the safetensors header (names and metadata must be UTF-8): ", e.what());
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

    std::vector<ByteRange> pieces{{len, 8}, {text.data(), text.size()}};
    for (size_t i = 0; i < order.size(); i++) pieces.push_back({order[i]->data, sizes[i]});
    write_file_atomic(path, pieces);
}

}  // namespace gl::io
