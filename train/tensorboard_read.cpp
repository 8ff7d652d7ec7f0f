// Reading TensorBoard event files back (train/tensorboard.h): TFRecord framing checked by its
// CRCs, Events decoded from the protobuf wire format (unknown fields skipped).
#include <bit>
#include <fstream>
#include <iterator>

#include "ggml-lite/core/error.h"
#include "train/tensorboard.h"

namespace train {

namespace {

uint64_t le(const std::string& s, size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
    return v;
}

// A protobuf message's fields, one at a time.
class Fields {
public:
    Fields(const std::string& bytes, const std::string& what) : s_(bytes), what_(what) {}
    bool next() {
        if (at_ >= s_.size()) return false;
        const uint64_t k = varint();
        field_ = int(k >> 3);
        wire_ = int(k & 7);
        switch (wire_) {
            case 0: value_ = varint(); break;
            case 1: value_ = take(8), bytes_.clear(); break;
            case 5: value_ = take(4), bytes_.clear(); break;
            case 2: {
                const uint64_t n = varint();
                GL_CHECK(n <= s_.size() - at_, what_, ": a field runs past its message");
                bytes_ = s_.substr(at_, size_t(n));
                at_ += size_t(n);
                break;
            }
            default: gl::fail(what_, ": protobuf wire type ", wire_, " is not an Event's");
        }
        return true;
    }
    int field() const { return field_; }
    int wire() const { return wire_; }
    uint64_t value() const { return value_; }
    const std::string& bytes() const { return bytes_; }

private:
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            GL_CHECK(at_ < s_.size(), what_, ": a varint runs past its message");
            const uint8_t b = uint8_t(s_[at_++]);
            v |= uint64_t(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        gl::fail(what_, ": a varint longer than 10 bytes");
    }
    uint64_t take(int n) {
        GL_CHECK(s_.size() - at_ >= size_t(n), what_, ": a fixed field runs past its message");
        const uint64_t v = le(s_, at_, n);
        at_ += size_t(n);
        return v;
    }
    const std::string& s_;
    std::string what_;
    size_t at_ = 0;
    int field_ = 0, wire_ = 0;
    uint64_t value_ = 0;
    std::string bytes_;
};

void read_image(const std::string& bytes, TbEvent& e, const std::string& what) {
    Fields f(bytes, what);
    while (f.next()) {
        if (f.field() == 1 && f.wire() == 0) e.height = int(f.value());
        else if (f.field() == 2 && f.wire() == 0) e.width = int(f.value());
        else if (f.field() == 3 && f.wire() == 0) e.channels = int(f.value());
        else if (f.field() == 4 && f.wire() == 2) e.png.assign(f.bytes().begin(), f.bytes().end());
    }
}

// A Summary's values, each its own event (torch's writer puts one value in a summary).
void read_summary(const std::string& bytes, const TbEvent& base, std::vector<TbEvent>& out, const std::string& what) {
    Fields f(bytes, what);
    while (f.next()) {
        if (f.field() != 1 || f.wire() != 2) continue;
        TbEvent e = base;
        Fields v(f.bytes(), what);
        while (v.next()) {
            if (v.field() == 1 && v.wire() == 2) e.tag = v.bytes();
            else if (v.field() == 2 && v.wire() == 5) e.value = std::bit_cast<float>(uint32_t(v.value()));
            else if (v.field() == 4 && v.wire() == 2) read_image(v.bytes(), e, what);
        }
        out.push_back(std::move(e));
    }
}

void read_event(const std::string& bytes, std::vector<TbEvent>& out, const std::string& what) {
    TbEvent e;
    std::string summary;
    bool has_summary = false;
    Fields f(bytes, what);
    while (f.next()) {
        if (f.field() == 1 && f.wire() == 1) e.wall_time = std::bit_cast<double>(f.value());
        else if (f.field() == 2 && f.wire() == 0) e.step = int64_t(f.value());
        else if (f.field() == 3 && f.wire() == 2) e.file_version = f.bytes();
        else if (f.field() == 5 && f.wire() == 2) summary = f.bytes(), has_summary = true;
    }
    if (has_summary) read_summary(summary, e, out, what);
    else out.push_back(std::move(e));
}

}  // namespace

TbFile read_tensorboard_events(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    GL_CHECK(in, "tensorboard: cannot open ", file.string());
    const std::string s{std::istreambuf_iterator<char>(in), {}};
    TbFile r;
    size_t at = 0;
    for (int64_t n = 1; at < s.size(); n++) {
        const std::string where = gl::cat(file.string(), ": record ", n, " at byte ", at);
        if (s.size() - at < 12) {
            r.stopped = where + ": its header is cut short";
            break;
        }
        const uint64_t len = le(s, at, 8);
        if (uint32_t(le(s, at + 8, 4)) != masked_crc32c(s.data() + at, 8)) {
            r.stopped = where + ": the length's CRC does not match";
            break;
        }
        if (len > s.size() - at - 12 || s.size() - at - 12 - len < 4) {
            r.stopped = where + ": cut short";
            break;
        }
        const std::string event = s.substr(at + 12, size_t(len));
        if (uint32_t(le(s, at + 12 + size_t(len), 4)) != masked_crc32c(event.data(), event.size())) {
            r.stopped = where + ": the data's CRC does not match";
            break;
        }
        read_event(event, r.events, where);
        at += 16 + size_t(len);
    }
    return r;
}

}  // namespace train
