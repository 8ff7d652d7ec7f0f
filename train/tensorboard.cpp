#include "train/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "ggml-lite/core/error.h"

namespace train {

namespace {

constexpr std::array<uint32_t, 256> crc32c_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli
        t[i] = c;
    }
    return t;
}
constexpr std::array<uint32_t, 256> kCrc32c = crc32c_table();

// Protocol-buffer wire format, just what Event needs.
void varint(std::string& s, uint64_t v) {
    while (v >= 0x80) {
        s += char(uint8_t(v) | 0x80);
        v >>= 7;
    }
    s += char(uint8_t(v));
}
void key(std::string& s, int field, int wire) { varint(s, uint64_t(field) << 3 | uint64_t(wire)); }
void fixed_le(std::string& s, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) s += char(uint8_t(v >> (8 * i)));
}
void field_double(std::string& s, int field, double v) {
    key(s, field, 1);
    fixed_le(s, std::bit_cast<uint64_t>(v), 8);
}
void field_float(std::string& s, int field, float v) {
    key(s, field, 5);
    fixed_le(s, std::bit_cast<uint32_t>(v), 4);
}
void field_int(std::string& s, int field, int64_t v) {  // int32 / int64: two's complement as varint
    key(s, field, 0);
    varint(s, uint64_t(v));
}
void field_bytes(std::string& s, int field, const void* data, size_t n) {
    key(s, field, 2);
    varint(s, n);
    s.append(static_cast<const char*>(data), n);
}
void field_bytes(std::string& s, int field, const std::string& b) { field_bytes(s, field, b.data(), b.size()); }

// Event {wall_time = 1, step = 2, summary = 5 {value = 1 {...}}}; a step of 0 is not written
// (proto3 leaves default values out, as protobuf's own serializer does).
std::string summary_event(const std::string& value, int64_t step, double wall_time) {
    std::string summary, e;
    field_bytes(summary, 1, value);
    field_double(e, 1, wall_time);
    if (step != 0) field_int(e, 2, step);
    field_bytes(e, 5, summary);
    return e;
}

std::string host_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
    return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
    const auto* p = static_cast<const uint8_t*>(data);
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = kCrc32c[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
    const uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tb_file_version_event(double wall_time, const std::string& writer) {
    std::string meta, e;
    field_bytes(meta, 1, writer);
    field_double(e, 1, wall_time);
    field_bytes(e, 3, std::string("brain.Event:2"));
    field_bytes(e, 10, meta);
    return e;
}

std::string tb_scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
    std::string v;
    field_bytes(v, 1, tag);
    field_float(v, 2, value);
    return summary_event(v, step, wall_time);
}

std::string tb_image_event(const std::string& tag, const std::vector<uint8_t>& png, int width, int height,
                           int channels, int64_t step, double wall_time) {
    std::string img, v;
    field_int(img, 1, height);
    field_int(img, 2, width);
    field_int(img, 3, channels);
    field_bytes(img, 4, png.data(), png.size());
    field_bytes(v, 1, tag);
    field_bytes(v, 4, img);
    return summary_event(v, step, wall_time);
}

std::string tb_record(const std::string& event) {
    std::string r;
    const uint64_t n = event.size();
    fixed_le(r, n, 8);
    std::string len = r;
    fixed_le(r, masked_crc32c(len.data(), len.size()), 4);
    r += event;
    fixed_le(r, masked_crc32c(event.data(), event.size()), 4);
    return r;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir, double wall_time) {
    GL_CHECK(std::isfinite(wall_time) && wall_time >= 0, "tensorboard: wall time ", wall_time);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    GL_CHECK(!ec, "--logging_dir ", dir.string(), ": cannot be created (", ec.message(), ")");
    static std::atomic<int> uid{0};
    path_ = dir / gl::cat("events.out.tfevents.", int64_t(wall_time), ".", host_name(), ".", ::getpid(), ".", uid++);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    GL_CHECK(fd_ >= 0, "tensorboard: cannot create ", path_.string(), " (", std::strerror(errno), ")");
    append(tb_file_version_event(wall_time, "ggml-lite sdtrain"));
}

TensorBoardWriter::~TensorBoardWriter() {
    if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::append(const std::string& event) {
    const std::string r = tb_record(event);
    size_t done = 0;
    while (done < r.size()) {
        const ssize_t k = ::write(fd_, r.data() + done, r.size() - done);
        if (k < 0 && errno == EINTR) continue;
        GL_CHECK(k > 0, "tensorboard: writing ", path_.string(), " failed (", k < 0 ? std::strerror(errno) : "no space",
                 ")");
        done += size_t(k);
    }
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step, double wall_time) {
    append(tb_scalar_event(tag, float(value), step, wall_time));
}

void TensorBoardWriter::image(const std::string& tag, const std::vector<uint8_t>& png, int width, int height,
                              int channels, int64_t step, double wall_time) {
    GL_CHECK(width > 0 && height > 0 && (channels == 1 || channels == 3 || channels == 4),
             "tensorboard: image ", tag, " of ", width, "x", height, "x", channels);
    append(tb_image_event(tag, png, width, height, channels, step, wall_time));
}

void TensorBoardWriter::flush() { ::fdatasync(fd_); }

}  // namespace train
