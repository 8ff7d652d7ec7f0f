// The training loop of a Session and everything it holds (private to train/run/session_run.cpp,
// run_inputs.cpp and validation.cpp): Session::run builds one Runner and runs it.
#pragma once
#include <chrono>
#include <deque>
#include <future>
#include <optional>

#include "data/loader.h"
#include "train/run/metadata.h"
#include "train/run/save.h"
#include "train/run/session_impl.h"
#include "train/run/validation.h"

namespace train {

// A field of /proc/self/status in bytes ("VmHWM": the peak resident set, file pages of the mapped
// model included; "RssAnon": the process's own memory now).
size_t proc_status_bytes(const char* field);

inline double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One micro-batch ready for the step graph.
struct Micro {
    size_t graph = 0;
    std::vector<float> latents, context;
    std::vector<float> loss_mask;  // [B, h, w] at the latents' size (masked-loss graphs)
    std::vector<float> sample_weights;  // [B] kohya's loss_weights (sample-weighted graphs)
    std::vector<float> token_weights;   // [B, T] kohya's weighted captions (trained text encoder)
    std::vector<int32_t> ids;
    int64_t images = 0;
    // Data parallelism: this rank's images [begin, begin + images) of a global micro-batch of
    // `global` (0: one process). images 0: a stand-in of zeros that joins the reduction.
    int64_t global = 0, begin = 0;

    MicroInput input() const;  // what BucketTrainer takes (views of this micro-batch)
};

class Runner {
public:
    Runner(Session::Impl& m, const std::atomic<bool>* stop) : m_(m), c_(m.cfg), stop_(stop) {}
    RunSummary run();

private:
    // run_inputs.cpp: the caches, the memory and its runtimes, the weights, the batches.
    bool cache();  // false: stopped (the entries cached so far are kept)
    void allocate();
    void init_network();
    gl::Runtime& step_runtime(size_t i);
    int loader_threads() const;
    // A loader's batch as its step graph takes it; validation: a batch of the validation set.
    Micro prepare(const data::Batch& b, bool validation = false);
    // validation.cpp: one validation pass in epoch `epoch` (per_epoch: the epoch's, else the step's).
    void validate(int64_t epoch, bool per_epoch);
    // session_run.cpp: the loop.
    void flush();
    void end_epoch(int64_t epoch);
    bool done() const { return trainer_->steps_done() >= m_.plan.counts.max_train_steps; }
    std::string save_lora(SaveKind kind, int64_t n, int64_t meta_epoch);
    // Schedule-free optimizers: saves, samples and validation passes see the eval weights, as kohya's
    // run between optimizer.eval() and .train() (the state is saved at the training point, y).
    optim::EvalWeights eval_weights() {
        return optim::EvalWeights(m_.graphs->steps()[0].graph->update->optimizer(), *step_rt_[0]);
    }
    std::string save_state(SaveKind kind, int64_t n);
    RunPosition position() const;
    // The LR schedule's factor after `updates` applied updates. kohya builds its schedule for
    // max_train_steps x processes scheduler steps and accelerate steps it once per process at every
    // update, so with N ranks the factor is the N-times-longer schedule's at updates x N (a warm-up
    // given in steps then ends after lr_warmup_steps / N updates, as in kohya).
    double lr_factor(int64_t updates) const { return schedule_.multiplier(updates * m_.world()); }
    // Between updates: whether to stop (Ctrl-C). Several ranks: agreed at the last update's
    // exchange, so every rank stops after the same one.
    bool stop_requested() const { return m_.comm ? stop_agreed_ : stop_ && stop_->load(); }
    // A micro-batch of zeros for a rank that holds no image of a global batch (its bucket's
    // smallest step graph), so that it joins the step's reduction with weight 0.
    Micro stand_in(const data::Batch& b);
    void sample_host() { sum_.peak_host_anon_bytes = std::max(sum_.peak_host_anon_bytes, proc_status_bytes("RssAnon")); }

    Session::Impl& m_;
    const RunConfig& c_;
    const std::atomic<bool>* stop_;
    RunSummary sum_;
    bool cuda_ = false;
    std::unique_ptr<data::LatentCache> latent_cache_, text_cache_;
    data::CacheReport latent_keys_;
    data::TextCacheReport text_keys_;
    std::shared_ptr<gl::SharedMemory> mem_;
    std::vector<std::unique_ptr<gl::Runtime>> step_rt_, text_rt_, vae_rt_;
    std::unique_ptr<BucketTrainer> trainer_;
    std::map<std::string, std::string> run_md_;  // made at the first save
    RunFacts facts_;
    std::future<ModelFileInfo> model_info_, vae_info_;
    optim::LrSchedule schedule_;
    std::vector<Micro> group_;
    int64_t epoch_ = 1, batches_done_ = 0;
    // Where this run's counting began (kohya's --initial_*, or a resumed state's): step, batch.
    int64_t start_step_ = 0, start_batch_ = 0;
    std::deque<double> recent_losses_;
    double loss_sum_ = 0, last_wait_ = 0, last_loss_mean_ = 0;
    int64_t images_trained_ = 0;
    std::chrono::steady_clock::time_point last_step_t_, train_t0_;
    data::Loader* loader_ = nullptr;
    int64_t first_step_ = 0;  // steps done when this run's loop began (a resumed state's)
    // The last step saves: a stop right after one saves no copy (the state only when its position is
    // still the same: an epoch's end since then changes where a resume starts).
    int64_t step_lora_saved_ = -1;
    int64_t step_state_saved_ = -1;
    std::pair<int64_t, int64_t> state_saved_at_;  // its epoch_, batches_done_
    std::vector<std::pair<std::string, double>> timings_;  // the stages before training (RunStart)
    // The validation set's caches and recorders (a run with a validation split).
    struct Validation {
        data::CacheReport latent_keys;
        data::TextCacheReport text_keys;
        std::vector<int32_t> timesteps;
        uint64_t seed = 0;                 // validation_draw_seed
        LossRecorder per_step, per_epoch;  // kohya's val_step_loss_recorder, val_epoch_loss_recorder
    };
    std::optional<Validation> val_;
    bool stop_agreed_ = false;  // several ranks: a rank asked to stop at the last update
};

}  // namespace train
