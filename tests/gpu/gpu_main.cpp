// GPU test runner: every test needs a CUDA device; without one the run prints why and passes
// with nothing executed, so CI machines without a GPU stay green.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "ggml-lite/core/runtime.h"

int main(int argc, char** argv) {
    std::string why;
    if (!gl::cuda_available(&why)) {
        std::printf("GPU tests skipped: %s\n", why.c_str());
        return 0;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
