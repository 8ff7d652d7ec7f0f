// One sdtrain run, the engine behind the binary: dataset -> plan -> caches -> multi-bucket
// training on one shared device memory -> saves, states, resume and sample hooks.
//
//   train::Session s(config, &observer);
//   const train::RunPlan& plan = s.prepare();  // dataset, steps, graphs and memory: no weights read
//   train::RunSummary r = s.run(&stop_flag);   // caches, weights, training, saves
//
// prepare() refuses a run whose memory plan exceeds the device (or --vram_limit) with PlanRefused,
// listing the changes that would fit, before any weight is loaded; nothing in run() allocates
// device memory beyond the plan. A stop flag (Ctrl-C) ends the run after the current step with a
// LoRA and a state folder to --resume from.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/shared_memory.h"
#include "ggml-lite/dist/communicator.h"
#include "train/run/config.h"
#include "train/run/config_view.h"
#include "train/run/data_plan.h"
#include "train/run/observer.h"

namespace train {

class Runner;

// The device a run is planned for: by default the backend's own (CUDA: its free memory, the
// context it holds, its workspace / graph-executable rules; the CPU: the host's available memory).
// Session::plan_for replaces it to plan for a device this machine does not have (tests simulate
// a GPU on the CPU); such a session plans and refuses as it would there, but does not run.
struct DeviceModel {
    std::string backend = "cpu";            // "cpu" | "cuda": whose memory the layout describes
    size_t free_bytes = 0, total_bytes = 0;  // after the context exists; 0: unknown (no limit)
    size_t context_bytes = 0;               // held outside the plans (the CUDA context)
    std::string context_note;               // how context_bytes was found, for the plan
    gl::LayoutRules rules;                  // the backend's bytes beside the plans
};

// The memory of a run before it starts.
struct MemoryPlan {
    std::string backend;          // "cpu" | "cuda"
    size_t free_bytes = 0, total_bytes = 0;  // the device's (CUDA), after its context exists
    size_t limit = 0;             // what the run must fit: --vram_limit, else the free memory; 0: none
    size_t context_bytes = 0;     // the CUDA context (outside the plans; counted against --vram_limit)
    size_t planned_bytes = 0;     // every graph's memory, shared (weights once, activations of the largest)
    size_t predicted_peak = 0;    // planned + context
    std::string by_category;      // the table the user reads
    std::string choice;           // auto-fit: what was chosen and the alternatives; else empty
    double predicted_seconds = 0; // auto-fit: the choice's predicted time per optimizer update; else 0
    std::string largest_step;     // "512x768 batch 2": the step graph with the largest activations
    std::string largest_step_report;  // its gl::Plan::report()
    std::string largest_step_timeline_svg;  // gl::timeline_svg of its plan
};

struct RunPlan {
    std::string dataset;     // images, subsets, repeats, buckets
    StepCounts counts;       // the steps arithmetic
    std::string configuration;  // micro-batch x accumulation, recompute, optimizer, precision, text encoder
    MemoryPlan memory;
    std::vector<std::string> notes;     // kohya options accepted but not needed, silent fixes
    std::vector<std::string> warnings;  // dataset warnings
    std::vector<data::SkippedImage> skipped;  // files the dataset read and the buckets dropped
    std::vector<ConfigSection> config;  // every option's effective value, by group
    std::string text() const;           // the whole plan as printed before a run
};

// The plan does not fit: what() holds the plan's figures and the changes that would fit, each with
// its predicted peak.
class PlanRefused : public gl::Error {
public:
    using gl::Error::Error;
};

class Session {
public:
    // Validates the configuration (gl::Error naming the option).
    explicit Session(RunConfig config, RunObserver* observer = nullptr);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    const RunConfig& config() const;
    // Data parallelism (before prepare(); not owned): this process is comm's rank, and every rank
    // runs a Session of the same configuration. The ranks take rank 0's seed, check that they
    // agree on the configuration, the plan and the LoRA (gl::Error naming the rank otherwise),
    // shard every global batch (world x the micro-batch) and reduce the gradients in the step
    // graphs; only rank 0 writes (LoRA files, states, samples) and its observer alone should
    // record. A world of one is a plain run.
    void set_communicator(gl::dist::Communicator* comm);
    // Plan for this device instead of the backend's (before prepare()); run() then refuses.
    void plan_for(DeviceModel device);
    // Output folder check, resume state read, model headers, dataset, buckets, steps, graphs and
    // memory plan. Throws gl::Error naming the culprit, PlanRefused when the memory does not fit.
    const RunPlan& prepare();
    // prepare() when not done, then (unless --dry_run) the whole run. stop: checked between steps.
    RunSummary run(const std::atomic<bool>* stop = nullptr);

private:
    struct Impl;
    friend class Runner;  // the training loop (session_run.cpp)
    std::unique_ptr<Impl> impl_;
};

}  // namespace train
