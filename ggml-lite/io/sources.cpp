#include "ggml-lite/io/sources.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/torch_ckpt.h"
#include "ggml-lite/io/safetensors.h"

namespace gl::io {

std::unique_ptr<TensorSource> open_checkpoint(const std::string& path) {
    // Only the first bytes decide; the chosen reader then validates the whole file.
    unsigned char head[9] = {};
    uint64_t size = 0;
    const int fd = open_regular(path, &size);
    const ssize_t r = ::pread(fd, head, sizeof head, 0);
    const int err = errno;
    ::close(fd);
    if (r < 0) fail(path, ": cannot read: ", std::strerror(err));
    const size_t got = size_t(r);
    if (got >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return std::make_unique<CkptFile>(path);
    if (got >= 9 && head[8] == '{') return std::make_unique<SafetensorsFile>(path);
    static const uint8_t legacy[] = {0x80, 0x02, 0x8a, 0x0a};
    if (got >= 4 && std::memcmp(head, legacy, 4) == 0) return std::make_unique<CkptFile>(path);  // explains itself
    std::string hex;
    for (size_t i = 0; i < got; i++) hex += cat(i ? " " : "", "0123456789abcdef"[head[i] >> 4], "0123456789abcdef"[head[i] & 15]);
    fail(path, ": neither a safetensors file nor a PyTorch zip checkpoint (", got, " bytes, first bytes: ",
         hex.empty() ? "none" : hex, ")");
}

void MergedSource::add(const std::string& prefix, std::unique_ptr<TensorSource> src) {
    GL_CHECK(src, origin_, ": add(", prefix, ") without a source");
    const size_t at = sources_.size();
    std::vector<TensorInfo> names = src->list();
    for (const TensorInfo& t : names) {
        std::string full = prefix + t.name;
        auto it = index_.find(full);
        if (it != index_.end())
            fail(origin_, ": tensor ", full, " is in both ", sources_[it->second.source]->origin(), " and ",
                 src->origin());
    }
    for (const TensorInfo& t : names) index_.emplace(prefix + t.name, Where{at, t.name});
    sources_.push_back(std::move(src));
}

const MergedSource::Where& MergedSource::find(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) fail(origin_, ": no tensor '", name, "'");
    return it->second;
}

std::vector<TensorInfo> MergedSource::list() const {
    std::vector<TensorInfo> out;
    for (const auto& [name, w] : index_) {
        TensorInfo t = sources_[w.source]->info(w.inner);
        t.name = name;
        out.push_back(std::move(t));
    }
    std::sort(out.begin(), out.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    return out;
}

TensorInfo MergedSource::info(const std::string& name) const {
    const Where& w = find(name);
    TensorInfo t = sources_[w.source]->info(w.inner);
    t.name = name;
    return t;
}

void MergedSource::read(const std::string& name, void* dst, DType to) const {
    const Where& w = find(name);
    sources_[w.source]->read(w.inner, dst, to);
}

}  // namespace gl::io
