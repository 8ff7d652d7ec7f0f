#include "data/npz.h"

#include <zlib.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

namespace data {

namespace {

uint16_t u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint64_t u64(const uint8_t* p) { return uint64_t(u32(p)) | uint64_t(u32(p + 4)) << 32; }

// The .npy header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 4), }
class HeaderParser {
public:
    HeaderParser(const std::string& s, const std::string& name) : s_(s), name_(name) {}
    void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
        bool got_descr = false, got_order = false, got_shape = false;
        expect('{');
        while (!peek('}')) {
            const std::string key = quoted();
            expect(':');
            if (key == "descr" && !got_descr) {
                descr = quoted();
                got_descr = true;
            } else if (key == "fortran_order" && !got_order) {
                fortran = word() == "True";
                got_order = true;
            } else if (key == "shape" && !got_shape) {
                shape = tuple();
                got_shape = true;
            } else {
                fail(gl::cat("unexpected key '", key, "'"));
            }
            if (!peek('}')) expect(',');
        }
        expect('}');
        if (!got_descr || !got_order || !got_shape) fail("'descr', 'fortran_order' or 'shape' missing");
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw gl::Error(gl::cat(name_, ": bad .npy header (", why, "): ", s_.substr(0, 120)));
    }
    void skip() {
        while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n')) at_++;
    }
    bool peek(char c) {
        skip();
        return at_ < s_.size() && s_[at_] == c;
    }
    void expect(char c) {
        if (!peek(c)) fail(gl::cat("'", c, "' expected"));
        at_++;
    }
    std::string quoted() {
        skip();
        if (at_ >= s_.size() || (s_[at_] != '\'' && s_[at_] != '"')) fail("a quoted string expected");
        const char q = s_[at_++];
        const size_t end = s_.find(q, at_);
        if (end == std::string::npos) fail("unterminated string");
        std::string out = s_.substr(at_, end - at_);
        at_ = end + 1;
        return out;
    }
    std::string word() {
        skip();
        const size_t from = at_;
        while (at_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[at_]))) at_++;
        std::string w = s_.substr(from, at_ - from);
        if (w != "True" && w != "False") fail("True or False expected");
        return w;
    }
    std::vector<int64_t> tuple() {
        std::vector<int64_t> out;
        expect('(');
        while (!peek(')')) {
            skip();
            int64_t v = 0;
            size_t digits = 0;
            while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') {
                if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("a dimension overflows");
                v = v * 10 + (s_[at_++] - '0');
                digits++;
            }
            if (digits == 0) fail("a dimension expected");
            while (at_ < s_.size() && s_[at_] == 'L') at_++;  // Python 2's long suffix
            out.push_back(v);
            if (!peek(')')) expect(',');
        }
        expect(')');
        if (out.size() > 32) fail("more than 32 dimensions");
        return out;
    }
    const std::string& s_;
    const std::string& name_;
    size_t at_ = 0;
};

int64_t int_at(const uint8_t* p, char kind, int itemsize) {
    uint64_t u = 0;
    for (int b = 0; b < itemsize; b++) u |= uint64_t(p[b]) << (8 * b);
    if (kind == 'i' && itemsize < 8 && (u >> (8 * itemsize - 1)) & 1) u |= ~uint64_t(0) << (8 * itemsize);
    return int64_t(u);
}

double float_at(const uint8_t* p, int itemsize) {
    if (itemsize == 4) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    if (itemsize == 8) {
        double d;
        std::memcpy(&d, p, 8);
        return d;
    }
    return gl::f16_to_f32(u16(p));
}

}  // namespace

size_t NpyArray::count() const {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    return n;
}

std::vector<float> NpyArray::to_float() const {
    const size_t n = count();
    std::vector<float> out(n);
    const uint8_t* p = bytes.data();
    for (size_t i = 0; i < n; i++, p += itemsize) {
        out[i] = kind == 'f' ? float(float_at(p, itemsize)) : float(int_at(p, kind, itemsize));
    }
    return out;
}

std::vector<int64_t> NpyArray::to_int() const {
    const size_t n = count();
    std::vector<int64_t> out(n);
    const uint8_t* p = bytes.data();
    for (size_t i = 0; i < n; i++, p += itemsize) {
        if (kind == 'f') {
            const double d = float_at(p, itemsize);
            GL_CHECK(std::isfinite(d) && std::fabs(d) < 9.2e18, "npy: ", d, " is not an integer");
            out[i] = int64_t(d);
        } else {
            out[i] = int_at(p, kind, itemsize);
        }
    }
    return out;
}

NpyArray parse_npy(const uint8_t* p, size_t n, const std::string& name) {
    static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    GL_CHECK(n >= 10 && std::memcmp(p, magic, 6) == 0, name, ": not a .npy array (no \\x93NUMPY magic)");
    const int major = p[6];
    GL_CHECK(major >= 1 && major <= 3, name, ": .npy format version ", major, " (1, 2 or 3 expected)");
    const size_t lenbytes = major == 1 ? 2 : 4;
    GL_CHECK(n >= 8 + lenbytes, name, ": truncated .npy header");
    const uint64_t hlen = major == 1 ? u16(p + 8) : u32(p + 8);
    const uint64_t start = 8 + lenbytes + hlen;
    GL_CHECK(start <= n, name, ": .npy header of ", hlen, " bytes runs past the member's ", n, " bytes");
    const std::string header(reinterpret_cast<const char*>(p) + 8 + lenbytes, size_t(hlen));
    std::string descr;
    bool fortran = false;
    NpyArray a;
    HeaderParser(header, name).parse(descr, fortran, a.shape);
    GL_CHECK(!fortran, name, ": Fortran-order arrays are not supported");
    GL_CHECK(descr.size() >= 3 && (descr[0] == '<' || descr[0] == '|' || descr[0] == '='), name, ": dtype '", descr,
             "' (little-endian numbers expected)");
    a.kind = descr[1];
    const std::string width = descr.substr(2);
    a.itemsize = width == "1" ? 1 : width == "2" ? 2 : width == "4" ? 4 : width == "8" ? 8 : 0;
    const bool ok = (a.kind == 'f' && (a.itemsize == 2 || a.itemsize == 4 || a.itemsize == 8)) ||
                    ((a.kind == 'i' || a.kind == 'u') && a.itemsize > 0) || (a.kind == 'b' && a.itemsize == 1);
    GL_CHECK(ok, name, ": dtype '", descr, "' is not supported (floats, integers or bools expected)");
    uint64_t count = 1;
    for (int64_t d : a.shape) {
        GL_CHECK(d >= 0, name, ": negative dimension");
        GL_CHECK(d == 0 || count <= std::numeric_limits<uint64_t>::max() / uint64_t(d), name, ": shape overflows");
        count *= uint64_t(d);
    }
    GL_CHECK(count <= (n - start) / uint64_t(a.itemsize) && count * uint64_t(a.itemsize) == n - start, name, ": ",
             n - start, " data bytes for ", count, " values of ", a.itemsize, " bytes");
    a.bytes.assign(p + start, p + n);
    return a;
}

NpzFile::NpzFile(const std::filesystem::path& path, uint64_t max_bytes) : path_(path.string()) {
    bytes_ = gl::io::read_small_file(path_, max_bytes);
    const auto* p = reinterpret_cast<const uint8_t*>(bytes_.data());
    const size_t n = bytes_.size();
    // The end-of-central-directory record: the last signature within the comment's reach.
    GL_CHECK(n >= 22, path_, ": not a zip archive (", n, " bytes)");
    size_t eocd = std::string::npos;
    for (size_t at = n - 22 + 1; at-- > 0 && n - at <= 22 + 0xffff;)
        if (u32(p + at) == 0x06054b50 && at + 22 + u16(p + at + 20) == n) {
            eocd = at;
            break;
        }
    GL_CHECK(eocd != std::string::npos, path_, ": not a zip archive (no end-of-central-directory record)");
    const uint16_t disk = u16(p + eocd + 4), cd_disk = u16(p + eocd + 6);
    const uint16_t entries_here = u16(p + eocd + 8), entries = u16(p + eocd + 10);
    const uint64_t cd_size = u32(p + eocd + 12), cd_offset = u32(p + eocd + 16);
    GL_CHECK(disk == 0 && cd_disk == 0 && entries_here == entries, path_, ": multi-disk zip archives are not supported");
    GL_CHECK(entries != 0xffff && cd_size != 0xffffffffu && cd_offset != 0xffffffffu, path_,
             ": zip64 archives are not supported");
    GL_CHECK(cd_offset <= eocd && cd_size <= eocd - cd_offset, path_, ": the central directory lies outside the file");
    size_t at = size_t(cd_offset);
    const size_t cd_end = size_t(cd_offset + cd_size);
    for (uint16_t e = 0; e < entries; e++) {
        GL_CHECK(at + 46 <= cd_end && u32(p + at) == 0x02014b50, path_, ": damaged central directory (entry ", e, ")");
        const uint16_t flags = u16(p + at + 8);
        Member m;
        m.method = u16(p + at + 10);
        m.crc = u32(p + at + 16);
        m.compressed = u32(p + at + 20);
        m.size = u32(p + at + 24);
        const size_t name_len = u16(p + at + 28), extra_len = u16(p + at + 30), comment_len = u16(p + at + 32);
        m.local = u32(p + at + 42);
        GL_CHECK(at + 46 + name_len + extra_len + comment_len <= cd_end, path_, ": damaged central directory (entry ",
                 e, ")");
        std::string name(reinterpret_cast<const char*>(p + at + 46), name_len);
        // zip64 sizes and offset, in that order, for the fields that hold 0xffffffff.
        const uint8_t* x = p + at + 46 + name_len;
        for (size_t k = 0; k + 4 <= extra_len;) {
            const uint16_t id = u16(x + k), len = u16(x + k + 2);
            GL_CHECK(k + 4 + len <= extra_len, path_, ": damaged extra field of ", name);
            if (id == 0x0001) {
                size_t f = k + 4;
                for (uint64_t* v : {&m.size, &m.compressed, &m.local})
                    if (*v == 0xffffffffu) {
                        GL_CHECK(f + 8 <= k + 4 + len, path_, ": short zip64 field of ", name);
                        *v = u64(x + f);
                        f += 8;
                    }
            }
            k += 4 + len;
        }
        at += 46 + name_len + extra_len + comment_len;
        GL_CHECK(!(flags & 1), path_, ": ", name, " is encrypted");
        GL_CHECK(m.method == 0 || m.method == 8, path_, ": ", name, " uses zip method ", m.method,
                 " (stored or deflated expected)");
        GL_CHECK(m.method != 0 || m.compressed == m.size, path_, ": stored member ", name, " has two sizes");
        // Deflate packs at most 1032 bytes into one: a larger claim is not allocated.
        GL_CHECK(m.method != 8 || m.size / 1032 <= m.compressed + 1, path_, ": deflated member ", name,
                 " claims an impossible size (", m.size, " bytes from ", m.compressed, ")");
        GL_CHECK(name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0, path_, ": member '", name,
                 "' is not a .npy array");
        name.resize(name.size() - 4);
        GL_CHECK(members_.emplace(name, m).second, path_, ": two members named ", name, ".npy");
    }
}

std::vector<std::string> NpzFile::names() const {
    std::vector<std::string> out;
    for (const auto& [name, m] : members_) out.push_back(name);
    return out;
}

NpyArray NpzFile::array(const std::string& name) const {
    auto it = members_.find(name);
    GL_CHECK(it != members_.end(), path_, ": no array '", name, "'");
    const Member& m = it->second;
    const auto* p = reinterpret_cast<const uint8_t*>(bytes_.data());
    const size_t n = bytes_.size();
    const std::string what = gl::cat(path_, ": ", name, ".npy");
    GL_CHECK(m.local <= n && n - m.local >= 30 && u32(p + m.local) == 0x04034b50, what, ": bad local header");
    const uint64_t data_at = m.local + 30 + u16(p + m.local + 26) + u16(p + m.local + 28);
    GL_CHECK(data_at <= n && m.compressed <= n - data_at, what, ": its data runs past the end of the file");
    GL_CHECK(m.size <= (uint64_t(1) << 31), what, ": larger than 2 GiB");
    const uint8_t* data = p + data_at;
    std::vector<uint8_t> raw;
    if (m.method == 8) {
        raw.resize(size_t(m.size));
        z_stream z{};
        GL_CHECK(inflateInit2(&z, -15) == Z_OK, what, ": zlib failed to start");
        z.next_in = const_cast<Bytef*>(data);
        z.avail_in = uInt(m.compressed);
        z.next_out = raw.data();
        z.avail_out = uInt(raw.size());
        const int rc = inflate(&z, Z_FINISH);
        const uint64_t out = z.total_out;
        inflateEnd(&z);
        GL_CHECK(rc == Z_STREAM_END && out == m.size, what, ": damaged deflate data");
    } else {
        raw.assign(data, data + m.size);
    }
    const uint32_t crc = uint32_t(crc32(crc32(0L, Z_NULL, 0), raw.data(), uInt(raw.size())));
    GL_CHECK(crc == m.crc, what, ": CRC-32 mismatch (damaged file)");
    return parse_npy(raw.data(), raw.size(), what);
}

}  // namespace data
