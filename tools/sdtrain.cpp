// sdtrain: the single-binary SD1.5 LoRA trainer, with kohya sd-scripts' train_network.py options
// (tools/sdtrain/options.h) and engine (train/run/session.h). Prints the plan, trains with a
// progress line, keeps metrics.jsonl and report.html in the output folder (tools/sdtrain/console.h),
// saves.
// Ctrl-C (SIGINT) or SIGTERM once the plan is made stops the run after the current step, saves the
// LoRA at that step and a state to --resume from, and exits with status 130 (while caching latents
// it stops there, with nothing saved); a second one ends the program at once (every file is
// written under a temporary name and renamed, so what was saved stays whole).
// Exit status: 0 done (or --dry_run, --help, --output_config), 2 a bad command line, 1 any other
// error (a plan that does not fit the device included: it lists what would), 130 stopped by a signal.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "tools/common/cli.h"
#include "tools/common/progress.h"
#include "tools/sdtrain/console.h"
#include "tools/sdtrain/options.h"
#include "train/run/session.h"

namespace {

std::atomic<bool> g_stop{false};

void say(const char* text, size_t n) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    (void)w;
}

// Async-signal-safe: an atomic, write(2), sigaction, raise.
void on_signal(int sig) {
    gl::cli::Progress::end_line_from_signal();
    if (g_stop.exchange(true)) {
        static const char kAbort[] = "sdtrain: stopped at once (second signal); the files saved so far are whole\n";
        say(kAbort, sizeof kAbort - 1);
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, nullptr);
        raise(sig);  // delivered when this handler returns: the default action ends the program
        return;
    }
    static const char kStop[] = "sdtrain: stopping after the current step to save the LoRA and a state "
                                "(again to quit at once)\n";
    say(kStop, sizeof kStop - 1);
}

void install_signal_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // reads and writes in progress continue rather than fail with EINTR
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
    // Every kernel module loaded with the context (unless the user chose): the context the plan
    // measures then holds all the code a run executes, where lazy loading would add a few MiB
    // beside the plan at the first steps and samples (bench/RESULTS.md, sixth session).
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    return gl::cli::run_main("sdtrain", [&] {
        const sdtrain::CommandLine cl = sdtrain::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
        if (!cl.wrote_config.empty()) {
            std::printf("wrote %s\n", cl.wrote_config.c_str());
            return 0;
        }
        std::fflush(stdout);  // from here on every line goes through the console's progress object
        sdtrain::Console console(gl::cli::Progress::on_fd(STDOUT_FILENO));
        train::Session session(cl.config, &console);
        // The plan reads headers and plans graphs, writing nothing: a signal there ends the program
        // as usual. From the caches on, the first one stops the run with a save.
        session.prepare();
        install_signal_handlers();
        const train::RunSummary s = session.run(&g_stop);
        return s.interrupted ? 130 : 0;
    });
}
