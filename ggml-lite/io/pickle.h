// A restricted unpickler for PyTorch state dicts. It interprets the pickle stream as data and
// executes nothing: the only callables it understands are torch's tensor-rebuild functions and
// collections.OrderedDict, implemented here as constructors of plain records. Any other GLOBAL
// is refused by name ("refusing to unpickle GLOBAL os.system"), except a short list of inert
// data classes that training checkpoints carry next to the weights (numpy scalars, Lightning's
// ModelCheckpoint state); those become opaque values that are never looked into.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ggml-lite/io/convert.h"

namespace gl::io {

struct PickledStorage {
    std::string key;  // names the zip entry <top>/data/<key>
    StoredType type = StoredType::f32;
    int64_t numel = 0;  // elements, as the persistent id declares
};

struct PickledTensor {
    std::string name;
    size_t storage = 0;  // index into PickledStateDict::storages
    int64_t offset = 0;  // in elements
    std::vector<int64_t> size, stride;
    bool contiguous() const;
};

struct PickledStateDict {
    std::vector<PickledStorage> storages;
    std::vector<PickledTensor> tensors;  // in pickle order; a repeated name keeps the last value
    std::vector<std::string> skipped;    // keys whose value is not a tensor
};

// Limits on what a state dict pickle may do; beyond them the pickle is refused as hostile.
constexpr int kPickleMaxDepth = 64;  // container nesting and open MARKs
constexpr int kPickleMaxRank = 16;

// Parses the pickle in p[0, n), unwraps a top-level {"state_dict": {...}} (nested ones too) and
// returns the tensors with their views checked against their storages' declared sizes. Throws
// gl::Error naming `origin` and the byte position on anything outside the supported subset.
PickledStateDict unpickle_state_dict(const uint8_t* p, size_t n, const std::string& origin);

// The torch storage class of a stored type as pickles name it ("torch.FloatStorage"): the one the
// unpickler reads back as t.
const char* torch_storage_class(StoredType t);

}  // namespace gl::io
