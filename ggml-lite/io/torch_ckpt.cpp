#include "ggml-lite/io/torch_ckpt.h"

#include <algorithm>
#include <cstring>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/zip.h"

namespace gl::io {

CkptFile::CkptFile(const std::string& path) : bytes_(FileBytes::map(path)) { parse(); }

CkptFile::CkptFile(std::vector<uint8_t> bytes, const std::string& origin)
    : bytes_(FileBytes::own(std::move(bytes), origin)) {
    parse();
}

void CkptFile::parse() {
    const std::string& file = bytes_.origin();
    const uint8_t* d = bytes_.data();
    const size_t size = bytes_.size();
    // torch.save before 1.6 wrote a bare pickle stream starting with a pickled magic number.
    static const uint8_t legacy[] = {0x80, 0x02, 0x8a, 0x0a};
    GL_CHECK(!(size >= 4 && std::memcmp(d, legacy, 4) == 0), file,
             ": legacy (pre-1.6) torch.save format is not supported; re-save it with a current torch");
    GL_CHECK(size >= 4 && std::memcmp(d, "PK\x03\x04", 4) == 0, file,
             ": not a PyTorch zip checkpoint (no zip signature at the start)");
    ZipIndex zip(d, size, file);

    const ZipEntry* pkl = nullptr;
    for (const ZipEntry& e : zip.entries()) {
        size_t slash = e.name.find('/');
        if (slash == std::string::npos || e.name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
        GL_CHECK(!pkl, file, ": two pickles in one checkpoint (", pkl ? pkl->name : "", ", ", e.name, ")");
        pkl = &e;
    }
    GL_CHECK(pkl, file, ": no <top>/data.pkl entry: not a torch.save checkpoint");
    const std::string top = pkl->name.substr(0, pkl->name.size() - std::strlen("data.pkl"));
    if (const ZipEntry* bo = zip.find(top + "byteorder")) {
        std::string order(reinterpret_cast<const char*>(d + bo->offset), size_t(bo->size));
        GL_CHECK(order == "little", file, ": storages are ", order, "-endian; only little-endian is supported");
    }
    zip.check_crc(*pkl);
    dict_ = unpickle_state_dict(d + pkl->offset, size_t(pkl->size), file + " (" + pkl->name + ")");

    for (const PickledStorage& s : dict_.storages) {
        const ZipEntry* e = zip.find(top + "data/" + s.key);
        GL_CHECK(e, file, ": storage ", s.key, " has no entry ", top, "data/", s.key);
        int64_t need = 0;
        GL_CHECK(mul_ok(s.numel, int64_t(stored_size(s.type)), &need) && uint64_t(need) <= e->size, file,
                 ": storage ", s.key, " declares ", s.numel, " ", stored_name(s.type), " elements but its entry holds ",
                 e->size, " bytes");
        storage_data_.push_back(d + e->offset);
    }
    for (size_t i = 0; i < dict_.tensors.size(); i++) index_[dict_.tensors[i].name] = i;
}

const PickledTensor& CkptFile::tensor(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) fail(origin(), ": no tensor '", name, "'");
    return dict_.tensors[it->second];
}

StoredType CkptFile::stored_type(const std::string& name) const {
    return dict_.storages[tensor(name).storage].type;
}

std::vector<TensorInfo> CkptFile::list() const {
    std::vector<TensorInfo> out;
    for (const PickledTensor& t : dict_.tensors)
        out.push_back({t.name, natural_dtype(dict_.storages[t.storage].type), t.size});
    std::sort(out.begin(), out.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    return out;
}

TensorInfo CkptFile::info(const std::string& name) const {
    const PickledTensor& t = tensor(name);
    return {t.name, natural_dtype(dict_.storages[t.storage].type), t.size};
}

void CkptFile::read(const std::string& name, void* dst, DType to) const {
    const PickledTensor& t = tensor(name);
    const PickledStorage& s = dict_.storages[t.storage];
    const std::string what = cat(origin(), ": tensor '", name, "'");
    const uint8_t* base = storage_data_[t.storage];
    if (t.contiguous()) {
        int64_t n = 1;
        for (int64_t x : t.size) n *= x;
        convert_elements(base + size_t(t.offset) * stored_size(s.type), s.type, dst, to, n, what);
    } else {
        gather_elements(base, s.type, t.offset, t.size.data(), t.stride.data(), int(t.size.size()), dst, to, what);
    }
}

}  // namespace gl::io
