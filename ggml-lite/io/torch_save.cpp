// torch.save's zip archive of a tensor dict (see torch_save.h). The pickle is written with the
// opcodes torch's own pickler uses for a state dict, without the memo (nothing repeats).
#include "ggml-lite/io/torch_save.h"

#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "ggml-lite/core/checked.h"
#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/atomic_file.h"
#include "ggml-lite/io/convert.h"
#include "ggml-lite/io/pickle.h"
#include "ggml-lite/io/zip.h"

namespace gl::io {

namespace {

class Pickle {
public:
    std::string bytes;

    void op(char c) { bytes += c; }
    void global(const std::string& dotted) {  // GLOBAL "module\nname\n"
        const size_t dot = dotted.rfind('.');
        bytes += 'c' + dotted.substr(0, dot) + '\n' + dotted.substr(dot + 1) + '\n';
    }
    void text(const std::string& s) {  // BINUNICODE
        op('X');
        put(uint64_t(s.size()), 4);
        bytes += s;
    }
    void integer(int64_t v) {
        if (v >= 0 && v < 256) {
            op('K');
            put(uint64_t(v), 1);
        } else if (v >= 0 && v < 65536) {
            op('M');
            put(uint64_t(v), 2);
        } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
            op('J');
            put(uint64_t(uint32_t(int32_t(v))), 4);
        } else {  // LONG1: 8 bytes of two's complement
            op('\x8a');
            put(8, 1);
            put(uint64_t(v), 8);
        }
    }
    void tuple(const std::vector<int64_t>& v) {
        op('(');
        for (int64_t x : v) integer(x);
        op('t');
    }
    void empty_ordered_dict() {
        global("collections.OrderedDict");
        op(')');
        op('R');
    }

private:
    void put(uint64_t v, int n) {
        for (int i = 0; i < n; i++) bytes += char((v >> (8 * i)) & 0xffu);
    }
};

std::string data_pkl(const std::vector<TensorToWrite>& tensors) {
    Pickle p;
    p.op('\x80');
    p.op('\x02');
    p.empty_ordered_dict();
    p.op('(');
    for (size_t i = 0; i < tensors.size(); i++) {
        const TensorToWrite& t = tensors[i];
        const int64_t numel = checked_numel(t.shape.data(), t.shape.size(), t.name);
        std::vector<int64_t> stride(t.shape.size());
        int64_t s = 1;
        for (size_t d = t.shape.size(); d-- > 0;) {
            stride[d] = s;
            s *= t.shape[d];
        }
        p.text(t.name);
        p.global("torch._utils._rebuild_tensor_v2");
        p.op('(');
        p.op('(');  // the persistent id: ('storage', type, key, location, numel)
        p.text("storage");
        p.global(torch_storage_class(stored_of(t.dtype)));
        p.text(std::to_string(i));
        p.text("cpu");
        p.integer(numel);
        p.op('t');
        p.op('Q');  // BINPERSID
        p.integer(0);  // storage offset
        p.tuple(t.shape);
        p.tuple(stride);
        p.op('\x89');  // requires_grad False
        p.empty_ordered_dict();  // backward hooks
        p.op('t');
        p.op('R');
    }
    p.op('u');  // SETITEMS
    p.op('.');
    return std::move(p.bytes);
}

// torch's archive name: the file's stem, when it is a plain name.
std::string archive_name(const std::string& path) {
    std::string stem = std::filesystem::path(path).filename().string();
    stem = stem.substr(0, stem.find('.'));
    const bool plain = !stem.empty() && stem.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                               "0123456789_-") == std::string::npos;
    return plain ? stem : "archive";
}

void le(std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; i++) out += char((v >> (8 * i)) & 0xffu);
}

constexpr uint64_t kAlign = 64;
constexpr uint64_t kDosDate = (1 << 5) | 1;  // 1980-01-01, 00:00

struct Entry {
    std::string name;
    const void* data;
    uint64_t size;
    uint32_t crc;
    uint64_t header_at = 0;
};

}  // namespace

void write_torch_checkpoint(const std::string& path, const std::vector<TensorToWrite>& tensors) {
    std::set<std::string> names;
    for (const TensorToWrite& t : tensors) GL_CHECK(names.insert(t.name).second, path, ": tensor ", t.name, " twice");
    const std::string top = archive_name(path);
    const std::string pkl = data_pkl(tensors);
    static const std::string kByteorder = "little", kVersion = "3\n";
    std::vector<Entry> entries;
    auto add = [&](std::string name, const void* data, uint64_t size) {
        entries.push_back({top + "/" + std::move(name), data, size, crc32(static_cast<const uint8_t*>(data), size_t(size))});
    };
    add("data.pkl", pkl.data(), pkl.size());
    add("byteorder", kByteorder.data(), kByteorder.size());
    for (size_t i = 0; i < tensors.size(); i++) {
        const TensorToWrite& t = tensors[i];
        const int64_t numel = checked_numel(t.shape.data(), t.shape.size(), t.name);
        add("data/" + std::to_string(i), t.data, uint64_t(checked_bytes(numel, dtype_size(t.dtype), t.name)));
    }
    add("version", kVersion.data(), kVersion.size());
    GL_CHECK(entries.size() <= 0xffff, path, ": ", tensors.size(), " tensors are more than a zip without zip64 holds");

    // Local headers, each padded with an extra field (id "FB", as torch's writer) so that the
    // entry's data starts on a 64-byte boundary.
    std::vector<std::string> headers;
    uint64_t at = 0;
    for (Entry& e : entries) {
        e.header_at = at;
        const uint64_t fixed = 30 + e.name.size() + 4;
        const uint64_t pad = (kAlign - (at + fixed) % kAlign) % kAlign;
        std::string h;
        le(h, 0x04034b50, 4);
        le(h, 20, 2);  // version needed
        le(h, 0, 2);   // flags
        le(h, 0, 2);   // stored
        le(h, 0, 2);
        le(h, kDosDate, 2);
        le(h, e.crc, 4);
        le(h, e.size, 4);
        le(h, e.size, 4);
        le(h, e.name.size(), 2);
        le(h, 4 + pad, 2);
        h += e.name;
        le(h, 0x4246, 2);
        le(h, pad, 2);
        h.append(size_t(pad), '\0');
        at += h.size() + e.size;
        GL_CHECK(at < 0xffffffffull, path, ": more than 4 GiB, past what a zip without zip64 holds");
        headers.push_back(std::move(h));
    }
    std::string central;
    for (const Entry& e : entries) {
        le(central, 0x02014b50, 4);
        le(central, 20, 2);  // made by
        le(central, 20, 2);  // needed
        le(central, 0, 2);
        le(central, 0, 2);
        le(central, 0, 2);
        le(central, kDosDate, 2);
        le(central, e.crc, 4);
        le(central, e.size, 4);
        le(central, e.size, 4);
        le(central, e.name.size(), 2);
        le(central, 0, 2);  // extra
        le(central, 0, 2);  // comment
        le(central, 0, 2);  // disk
        le(central, 0, 2);  // internal attributes
        le(central, 0, 4);  // external attributes
        le(central, e.header_at, 4);
        central += e.name;
    }
    GL_CHECK(at + central.size() < 0xffffffffull, path, ": more than 4 GiB, past what a zip without zip64 holds");
    std::string end;
    le(end, 0x06054b50, 4);
    le(end, 0, 2);
    le(end, 0, 2);
    le(end, entries.size(), 2);
    le(end, entries.size(), 2);
    le(end, central.size(), 4);
    le(end, at, 4);
    le(end, 0, 2);

    std::vector<ByteRange> pieces;
    for (size_t i = 0; i < entries.size(); i++) {
        pieces.push_back({headers[i].data(), headers[i].size()});
        pieces.push_back({entries[i].data, size_t(entries[i].size)});
    }
    pieces.push_back({central.data(), central.size()});
    pieces.push_back({end.data(), end.size()});
    write_file_atomic(path, pieces);
}

}  // namespace gl::io
