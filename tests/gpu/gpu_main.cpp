// GPU test runner: every test needs a CUDA device; without one the run prints why and passes
// with nothing executed, so CI machines without a GPU stay green. A crash prints the stack
// (frames as binary(+offset): `addr2line -f -C -e gl-gpu-tests <offset>` names them), since a
// GPU run is rare and expensive to repeat under a debugger.
#define DOCTEST_CONFIG_IMPLEMENT
#define DOCTEST_CONFIG_NO_POSIX_SIGNALS  // the handler below reports more than doctest's
#include <doctest/doctest.h>

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "ggml-lite/core/runtime.h"

namespace {
void on_fatal_signal(int sig) {
    const char msg[] = "gl-gpu-tests: fatal signal, stack:\n";
    (void)!write(2, msg, sizeof msg - 1);
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
}  // namespace

int main(int argc, char** argv) {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
    std::string why;
    if (!gl::cuda_available(&why)) {
        std::printf("GPU tests skipped: %s\n", why.c_str());
        return 0;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
