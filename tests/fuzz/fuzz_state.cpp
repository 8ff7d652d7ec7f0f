// libFuzzer target for --resume's train_state.json reader (train/run/state_file.cpp; the bounded
// cases CI runs are in tests/test_sdtrain_state.cpp). Every input must end in a RunPosition or in
// gl::Error naming the file, under ASan and UBSan. Build and seed corpus: tests/fuzz/CMakeLists.txt.
#include <cstdint>
#include <string>

#include "train/run/state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        train::parse_run_position(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    } catch (const gl::Error&) {
    }
    return 0;
}
