// PyTorch checkpoints (.ckpt, .pt, .bin) in the zip format torch.save has written since 1.6:
//   <top>/data.pkl       the pickled object (a state dict, or {"state_dict": {...}, ...})
//   <top>/data/<key>     the raw bytes of each storage, stored uncompressed
// The top folder's name varies with the torch version and the file name. The file is memory
// mapped; the pickle goes through a restricted unpickler that executes nothing (pickle.h);
// every tensor view (offset, size, stride) is checked against its storage before any read.
// Non-contiguous views are gathered element by element on read.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml-lite/io/mapped_file.h"
#include "ggml-lite/io/pickle.h"
#include "ggml-lite/io/tensor_source.h"

namespace gl::io {

class CkptFile : public TensorSource {
public:
    explicit CkptFile(const std::string& path);
    CkptFile(std::vector<uint8_t> bytes, const std::string& origin);  // tests, fuzzing

    std::string origin() const override { return bytes_.origin(); }
    std::vector<TensorInfo> list() const override;  // sorted by name
    bool has(const std::string& name) const override { return index_.count(name) != 0; }
    TensorInfo info(const std::string& name) const override;
    void read(const std::string& name, void* dst, DType to) const override;

    const PickledTensor& tensor(const std::string& name) const;
    StoredType stored_type(const std::string& name) const;
    // Keys of the state dict whose values are not tensors (ignored).
    const std::vector<std::string>& skipped() const { return dict_.skipped; }

private:
    void parse();
    FileBytes bytes_;
    PickledStateDict dict_;
    std::vector<const uint8_t*> storage_data_;  // per dict_.storages entry
    std::unordered_map<std::string, size_t> index_;
};

}  // namespace gl::io
