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
// Several GPUs (tools/sdtrain/launch.h): --gpus / --num_processes start a rank per process and
// supervise them; under torchrun / srun / mpirun this process is one rank. Rank 0 shows and
// records the run; the other ranks print only their errors, as "rank N: sdtrain: error: ...".
// Ranks stop together: a signal on any of them stops all after the same update.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <optional>

#include "tools/common/cli.h"
#include "tools/common/progress.h"
#include "ggml-lite/core/cuda_devices.h"
#include "ggml-lite/dist/rendezvous.h"
#include "tools/sdtrain/console.h"
#include "tools/sdtrain/launch.h"
#include "tools/sdtrain/options.h"
#include "train/run/session.h"

namespace {

std::atomic<bool> g_stop{false};
bool g_quiet = false;  // a rank other than 0: its notices are rank 0's too

void say(const char* text, size_t n) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    (void)w;
}

// Async-signal-safe: an atomic, write(2), sigaction, raise.
void on_signal(int sig) {
    gl::cli::Progress::end_line_from_signal();
    if (g_stop.exchange(true)) {
        if (g_quiet) {
            struct sigaction dfl {};
            dfl.sa_handler = SIG_DFL;
            sigaction(sig, &dfl, nullptr);
            raise(sig);
            return;
        }
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
    if (!g_quiet) say(kStop, sizeof kStop - 1);
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
    std::string program = "sdtrain";
    try {  // a rank names itself in every error, the command line's too
        const gl::dist::Rendezvous r = gl::dist::rendezvous_from_env();
        if (r.world_size > 1) program = "rank " + std::to_string(r.rank) + ": sdtrain";
    } catch (const gl::Error&) {  // plan_launch reports it
    }
    const std::vector<std::string> args(argv + 1, argv + argc);
    return gl::cli::run_main(program, [&] {
        const sdtrain::CommandLine cl = sdtrain::parse_command_line(args);
        if (!cl.wrote_config.empty()) {
            std::printf("wrote %s\n", cl.wrote_config.c_str());
            return 0;
        }
        const sdtrain::LaunchPlan launch =
            sdtrain::plan_launch(cl.config, gl::dist::process_env(), [] { return gl::cuda_device_count(); });
        if (launch.mode == sdtrain::LaunchPlan::Mode::supervise) return sdtrain::supervise(launch, args);
        sdtrain::select_device(launch);  // before anything starts CUDA
        std::unique_ptr<gl::dist::Communicator> comm;
        if (launch.mode == sdtrain::LaunchPlan::Mode::rank && launch.rendezvous.world_size > 1)
            comm = sdtrain::connect_rank(launch);
        g_quiet = comm && comm->rank() != 0;
        try {
            std::fflush(stdout);  // from here on every line goes through the console's progress object
            std::optional<sdtrain::Console> console;
            train::RunObserver silent;  // the other ranks: errors only (run_main prints them)
            if (!g_quiet) console.emplace(gl::cli::Progress::on_fd(STDOUT_FILENO));
            train::Session session(cl.config, console ? static_cast<train::RunObserver*>(&*console) : &silent);
            session.set_communicator(comm.get());
            // The plan reads headers and plans graphs, writing nothing: a signal there ends the program
            // as usual. From the caches on, the first one stops the run with a save.
            session.prepare();
            install_signal_handlers();
            const train::RunSummary s = session.run(&g_stop);
            return s.interrupted ? 130 : 0;
        } catch (const std::exception& e) {
            if (comm) comm->abort(e.what());  // the others' collectives end now, naming this rank
            throw;
        }
    });
}
