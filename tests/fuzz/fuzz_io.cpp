// libFuzzer target for the checkpoint readers (coverage-guided, longer than the bounded doctest
// fuzz cases in test_safetensors.cpp / test_torch_ckpt.cpp that CI runs). The first input byte picks
// the reader: safetensors header parser, .ckpt archive, or the restricted unpickler alone.
// Every input must end in gl::Error or in tensors that read in bounds, under ASan and UBSan.
// Build and seed corpus: tests/fuzz/CMakeLists.txt.
#include <cstdint>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/torch_ckpt.h"
#include "ggml-lite/io/pickle.h"
#include "ggml-lite/io/safetensors.h"

namespace {

void read_all(const gl::io::TensorSource& s) {
    for (const gl::io::TensorInfo& t : s.list()) {
        // A valid stride-0 view may list far more bytes than the input holds: listed, not read.
        if (t.nbytes() > (size_t(256) << 20)) continue;
        std::vector<uint8_t> dst(t.nbytes());
        try {
            s.read(t.name, dst.data(), t.dtype);
        } catch (const gl::Error&) {  // an I64 value outside i32
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    std::vector<uint8_t> body(data + 1, data + size);
    try {
        switch (data[0] % 3) {
            case 0: read_all(gl::io::SafetensorsFile(std::move(body), "fuzz")); break;
            case 1: read_all(gl::io::CkptFile(std::move(body), "fuzz")); break;
            case 2: gl::io::unpickle_state_dict(body.data(), body.size(), "fuzz"); break;
        }
    } catch (const gl::Error&) {
    }
    return 0;
}
