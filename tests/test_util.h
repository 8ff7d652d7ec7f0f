// Small helpers shared by the test suites.
#pragma once
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/tensor_source.h"

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

// A fresh folder under the system's temporary folder, removed with everything in it.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        static std::atomic<int> n{0};
        path = std::filesystem::temp_directory_path() /
               ("gl-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const { return (path / name).string(); }
    // Writes text to a file of the folder; its path.
    std::string file(const std::string& name, const std::string& text) const {
        std::ofstream(path / name, std::ios::binary) << text;
        return (path / name).string();
    }
};

// A file's bytes ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream os;
    os << f.rdbuf();
    return os.str();
}

// A tensor of a checkpoint or golden file, as f32.
inline std::vector<float> read_f32(const gl::io::TensorSource& src, const std::string& name) {
    std::vector<float> v(size_t(src.info(name).numel()));
    src.read(name, v.data(), gl::DType::f32);
    return v;
}

// max |got - want| / max |want|: one number per tensor, independent of its scale (an elementwise
// relative error means nothing where the reference crosses zero); max |got| when want is all zero.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    double diff = 0, ref = 0;
    for (size_t i = 0; i < got.size(); i++) {
        diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
        ref = std::max(ref, std::abs(double(want[i])));
    }
    return ref > 0 ? diff / ref : diff;
}

// Iterations of a fuzz-style test: bounded for CI; GL_FUZZ_ITERATIONS=<n> runs longer (e.g. under
// ASan/UBSan).
inline int fuzz_iterations(int fallback) {
    const char* env = std::getenv("GL_FUZZ_ITERATIONS");
    return env && std::atoi(env) > 0 ? std::atoi(env) : fallback;
}

}  // namespace gltest
