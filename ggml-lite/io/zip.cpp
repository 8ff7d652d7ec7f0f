#include "ggml-lite/io/zip.h"

#include <array>

#include "ggml-lite/core/error.h"

namespace gl::io {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr size_t kEndSize = 22, kLocatorSize = 20, kEnd64Size = 56, kCentralSize = 46, kLocalSize = 30;

uint64_t le(const uint8_t* p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

// True when [off, off + len) lies inside [0, size), without overflowing.
bool inside(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

}  // namespace

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc) {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

ZipIndex::ZipIndex(const uint8_t* data, size_t size, const std::string& origin)
    : data_(data), size_(size), origin_(origin) {
    const std::string& f = origin_;
    // The end record sits at the very end, after a comment of at most 64 KiB.
    GL_CHECK(size >= kEndSize, f, ": not a zip archive (", size, " bytes); truncated?");
    size_t end = SIZE_MAX;
    const size_t lowest = size - kEndSize > 65535 ? size - kEndSize - 65535 : 0;
    for (size_t p = size - kEndSize + 1; p-- > lowest;) {
        if (le(data + p, 4) == kEndSig && p + kEndSize + le(data + p + 20, 2) == size) {
            end = p;
            break;
        }
    }
    GL_CHECK(end != SIZE_MAX, f, ": not a zip archive or truncated (no end-of-central-directory record)");
    const uint8_t* e = data + end;
    GL_CHECK(le(e + 4, 2) == 0 && le(e + 6, 2) == 0, f, ": multi-part zip archives are not supported");
    uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_off = le(e + 16, 4);
    // zip64: a locator just before the end record points to the 64-bit end record.
    if (end >= kLocatorSize && le(data + end - kLocatorSize, 4) == kLocator64Sig) {
        const uint8_t* loc = data + end - kLocatorSize;
        uint64_t r = le(loc + 8, 8);
        GL_CHECK(inside(r, kEnd64Size, end - kLocatorSize) && le(data + r, 4) == kEnd64Sig, f,
                 ": corrupt zip64 end record (offset ", r, ")");
        count = le(data + r + 32, 8);
        cd_size = le(data + r + 40, 8);
        cd_off = le(data + r + 48, 8);
    }
    GL_CHECK(inside(cd_off, cd_size, end), f, ": central directory (offset ", cd_off, ", ", cd_size,
             " bytes) lies outside the archive; truncated?");
    GL_CHECK(count <= cd_size / kCentralSize, f, ": central directory claims ", count, " entries in ", cd_size,
             " bytes");

    const uint8_t* cd = data + cd_off;
    uint64_t at = 0;
    entries_.reserve(size_t(count));
    for (uint64_t i = 0; i < count; i++) {
        GL_CHECK(inside(at, kCentralSize, cd_size) && le(cd + at, 4) == kCentralSig, f,
                 ": corrupt central directory at entry ", i);
        const uint8_t* h = cd + at;
        const uint64_t flags = le(h + 8, 2), method = le(h + 10, 2);
        const uint64_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
        GL_CHECK(inside(at + kCentralSize, name_len + extra_len + comment_len, cd_size), f,
                 ": central directory entry ", i, " runs past the directory");
        ZipEntry z;
        z.name.assign(reinterpret_cast<const char*>(h + kCentralSize), size_t(name_len));
        z.crc32 = uint32_t(le(h + 16, 4));
        uint64_t csize = le(h + 20, 4), usize = le(h + 24, 4), local = le(h + 42, 4);
        // zip64 extra field: the 64-bit values of exactly the fields saturated at 0xffffffff.
        const uint8_t* x = h + kCentralSize + name_len;
        for (uint64_t k = 0; k + 4 <= extra_len;) {
            uint64_t id = le(x + k, 2), len = le(x + k + 2, 2);
            GL_CHECK(k + 4 + len <= extra_len, f, ": entry ", z.name, ": corrupt extra field");
            if (id == 1) {
                uint64_t q = k + 4;
                for (uint64_t* v : {&usize, &csize, &local}) {
                    if (*v != 0xffffffffu) continue;
                    GL_CHECK(q + 8 <= k + 4 + len, f, ": entry ", z.name, ": zip64 field too short");
                    *v = le(x + q, 8);
                    q += 8;
                }
            }
            k += 4 + len;
        }
        GL_CHECK(!(flags & 1), f, ": entry ", z.name, " is encrypted");
        GL_CHECK(method == 0, f, ": entry ", z.name, " is compressed (method ", method,
                 "); only stored entries are supported, as torch.save writes them (was the archive re-zipped?)");
        GL_CHECK(csize == usize, f, ": entry ", z.name, ": stored sizes disagree (", csize, " vs ", usize, ")");
        GL_CHECK(inside(local, kLocalSize, size) && le(data + local, 4) == kLocalSig, f, ": entry ", z.name,
                 ": no local header at offset ", local);
        const uint64_t body = local + kLocalSize + le(data + local + 26, 2) + le(data + local + 28, 2);
        GL_CHECK(inside(body, usize, size), f, ": entry ", z.name, " (", usize, " bytes at offset ", body,
                 ") runs past the end of the file; truncated?");
        z.offset = body;
        z.size = usize;
        GL_CHECK(index_.emplace(z.name, entries_.size()).second, f, ": entry ", z.name, " appears twice");
        entries_.push_back(std::move(z));
        at += kCentralSize + name_len + extra_len + comment_len;
    }
}

const ZipEntry* ZipIndex::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &entries_[it->second];
}

void ZipIndex::check_crc(const ZipEntry& e) const {
    uint32_t c = crc32(data_ + e.offset, size_t(e.size));
    GL_CHECK(c == e.crc32, origin_, ": entry ", e.name, " is corrupt (CRC-32 ", c, ", directory says ", e.crc32, ")");
}

}  // namespace gl::io
