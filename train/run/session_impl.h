// The state a Session carries from prepare() to run() (private to train/run/session*.cpp).
#pragma once
#include <chrono>
#include <ctime>
#include <map>
#include <memory>
#include <optional>

#include "data/latent_cache.h"
#include "data/text_cache.h"
#include "ggml-lite/dist/communicator.h"
#include "models/model_files.h"
#include "pipelines/cache_encoders.h"
#include "train/autofit.h"
#include "train/run/graphs.h"
#include "train/run/sampling.h"
#include "train/run/session.h"
#include "train/run/state.h"

namespace train {

struct Session::Impl {
    RunConfig cfg;
    RunObserver* obs = nullptr;
    RunObserver quiet;  // when no observer is given
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    std::time_t started_at = std::time(nullptr);  // names the TensorBoard folder, as kohya's start time

    bool prepared = false;
    RunPlan plan;
    std::optional<RunPosition> resume;  // --resume's train_state.json
    models::ModelFiles model;
    RunData data;
    gl::Backend backend = gl::Backend::cpu;
    StepOptions step;            // the configuration the graphs are built with
    bool cache_text = false;     // frozen text encoder outputs cached before training
    std::optional<DeviceModel> device;  // plan_for's; else the backend's (memory_plan.cpp)
    std::unique_ptr<GraphSet> graphs;
    std::shared_ptr<RunSampler> sampler;  // --sample_prompts: in the same memory
    uint64_t seed = 0;
    // Data parallelism (Session::set_communicator): this process' rank; none: a world of one.
    gl::dist::Communicator* comm = nullptr;
    int world() const { return comm ? comm->world_size() : 1; }
    int rank() const { return comm ? comm->rank() : 0; }
    bool leader() const { return rank() == 0; }  // saves, samples, reports
    std::vector<std::filesystem::path> created_dirs;  // by check_output_dir: removed again when refused

    void message(const std::string& m) { obs->on_message(m); }
    // prepare()'s parts (session.cpp).
    void prepare();
    StepOptions base_step() const;
    RunShape resume_shape() const;  // what a resumed position is checked against
    // memory_plan.cpp: the graphs of the run and their memory (auto-fit under --vram_limit), and
    // the refusal of a plan that does not fit, with what would.
    void plan_memory();
    std::string advice(const GraphSetOptions& base, size_t extra);
    // run()'s parts (session_run.cpp).
    RunSummary train_loop(const std::atomic<bool>* stop);
};

// The identity of a run's data order, stored in states: a resume must see the same. The dataset
// counts by content (each image's path within its subset folder, size and modification time,
// repeats, regularisation flag; the bucket table); `version` 1 gives the identity states of format
// 1 hold (the image paths as spelled).
std::string run_identity(const RunData& d, uint64_t seed, int64_t micro_batch, int accum,
                         int version = kStateVersion);

}  // namespace train
