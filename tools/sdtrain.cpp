// sdtrain: the single-binary SD1.5 LoRA trainer, with kohya sd-scripts' train_network.py options
// (tools/sdtrain/options.h) and engine (train/run/session.h). Prints the plan, trains, saves.
// Exit status: 0 done (or --dry_run, --help, --output_config), 2 a bad command line, 1 any other
// error (a plan that does not fit the device included: it lists what would), 130 stopped by Ctrl-C
// after saving a LoRA and a state to --resume from.
#include <csignal>
#include <cstdio>

#include "ggml-lite/core/autofit.h"
#include "tools/common/cli.h"
#include "tools/sdtrain/options.h"
#include "train/run/session.h"

namespace {

std::atomic<bool> g_stop{false};

void on_sigint(int) {
    g_stop.store(true);
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the program at once
}

// Plain lines on stdout: the plan, the stages, one line per step, saves, the summary.
class PlainObserver : public train::RunObserver {
public:
    void on_plan(const train::RunPlan& p) override { std::printf("%s", p.text().c_str()); }
    void on_message(const std::string& m) override { std::printf("%s\n", m.c_str()); }
    void on_step(const train::StepEvent& e) override {
        std::printf("step %lld/%lld  epoch %lld/%lld  loss %.5f (mean %.5f)  lr %.3g  %.2f s/step%s\n",
                    (long long)e.step, (long long)e.total_steps, (long long)e.epoch, (long long)e.epochs, e.loss,
                    e.loss_mean, e.lr_unet > 0 ? e.lr_unet : e.lr_text_encoder, e.seconds,
                    e.applied ? "" : "  (skipped: fp16 overflow)");
        std::fflush(stdout);
    }
    void on_save(const train::SaveEvent& e) override {
        std::printf("saved %s%s\n", e.path.c_str(), e.state ? " (state)" : "");
        for (const std::string& r : e.removed) std::printf("removed %s\n", r.c_str());
    }
    void on_end(const train::RunSummary& s) override {
        if (s.dry_run) {
            std::printf("dry run: nothing was loaded or written\n");
            return;
        }
        std::printf("done: %lld steps, %.2f images/s, start-up %.1f s, host memory %s (peak resident %s with the "
                    "mapped model), device memory planned %s",
                    (long long)s.steps, s.images_per_second, s.startup_seconds,
                    gl::format_bytes(s.peak_host_anon_bytes).c_str(), gl::format_bytes(s.peak_host_bytes).c_str(),
                    gl::format_bytes(s.planned_device_bytes).c_str());
        if (s.peak_device_bytes) std::printf(", measured %s", gl::format_bytes(s.peak_device_bytes).c_str());
        std::printf("\n");
        if (!s.skipped_images.empty()) {
            std::printf("%zu images skipped:\n", s.skipped_images.size());
            for (const std::string& l : s.skipped_images) std::printf("  %s\n", l.c_str());
        }
    }
};

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("sdtrain", [&] {
        const sdtrain::CommandLine cl = sdtrain::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
        if (!cl.wrote_config.empty()) {
            std::printf("wrote %s\n", cl.wrote_config.c_str());
            return 0;
        }
        PlainObserver obs;
        train::Session session(cl.config, &obs);
        std::signal(SIGINT, on_sigint);
        const train::RunSummary s = session.run(&g_stop);
        if (s.interrupted) {
            if (!s.resume_hint.empty())
                std::printf("stopped at step %lld; continue with --resume %s\n", (long long)s.steps,
                            s.resume_hint.c_str());
            return 130;
        }
        return 0;
    });
}
