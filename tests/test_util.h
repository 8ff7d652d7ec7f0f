// Small helpers shared by the CPU test suites.
#pragma once
#include <cstdlib>
#include <functional>
#include <string>

#include "ggml-lite/core/error.h"

namespace gltest {

// The message of the gl::Error f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const gl::Error& e) {
        return e.what();
    }
    return "(no error)";
}

// The folder of an area's committed golden data (tests/golden/data/<area>/), with a trailing slash.
inline std::string golden_dir(const std::string& area) {
    const std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/" + area + "/";
}

// Iterations of a fuzz-style test: bounded for CI; GL_FUZZ_ITERATIONS=<n> runs longer (e.g. under
// ASan/UBSan).
inline int fuzz_iterations(int fallback) {
    const char* env = std::getenv("GL_FUZZ_ITERATIONS");
    return env && std::atoi(env) > 0 ? std::atoi(env) : fallback;
}

}  // namespace gltest
