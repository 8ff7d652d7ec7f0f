#include "train/run/validation.h"

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "train/run/runner.h"

namespace train {

namespace {
// The validation draws' stream (its seed is validation_draw_seed's): apart from the training
// noise even when both seeds are the run's.
constexpr uint64_t kValidationNoiseStream = 0x76616c6964617465ull;
constexpr int kValidationTimesteps = 4;  // kohya's NUM_VALIDATION_TIMESTEPS
}  // namespace

std::vector<int32_t> validation_timesteps(int min_timestep, int max_timestep) {
    GL_CHECK(0 <= min_timestep && min_timestep < max_timestep, "validation timesteps: range [", min_timestep, ", ",
             max_timestep, ") is empty");
    // numpy's linspace: start + i * (delta / div) in doubles, then floor for an integer dtype
    // (truncation before numpy 2; the same for these non-negative values).
    const double step = double(max_timestep - min_timestep) / double(kValidationTimesteps + 1);
    std::vector<int32_t> t;
    for (int i = 1; i <= kValidationTimesteps; i++) t.push_back(int32_t(std::floor(double(i) * step + min_timestep)));
    return t;
}

void LossRecorder::add(int64_t epoch, int64_t step, double loss) {
    GL_CHECK(epoch >= 0 && step >= 0, "loss recorder: epoch ", epoch, " and step ", step, " must be >= 0");
    if (epoch == 0) {
        losses_.push_back(loss);
    } else {
        if (losses_.size() <= size_t(step)) losses_.resize(size_t(step) + 1, 0.0);
        total_ -= losses_[size_t(step)];
        losses_[size_t(step)] = loss;
    }
    total_ += loss;
}

double LossRecorder::moving_average() const { return losses_.empty() ? 0.0 : total_ / double(losses_.size()); }

bool validation_due_at_step(const RunConfig& c, int64_t step) {
    return c.validate_every_n_steps && step % *c.validate_every_n_steps == 0;
}

bool validation_due_at_epoch(const RunConfig& c, int64_t epoch) {
    return !c.validate_every_n_epochs || epoch % *c.validate_every_n_epochs == 0;
}

int64_t validation_batches(const RunConfig& c, int64_t available) {
    return c.max_validation_steps ? std::min<int64_t>(*c.max_validation_steps, available) : available;
}

uint64_t validation_draw_seed(const RunConfig& c, uint64_t run_seed) {
    return c.validation_seed ? uint64_t(*c.validation_seed) : run_seed;
}

void Runner::validate(int64_t epoch, bool per_epoch) {
    Validation& v = *val_;
    const ValidationData& vd = *m_.data.validation;
    const optim::EvalWeights eval = eval_weights();
    const auto t0 = std::chrono::steady_clock::now();
    data::LoaderOptions lo;
    lo.seed = v.seed;
    lo.threads = loader_threads();
    lo.prior_loss_weight = c_.prior_loss_weight;
    if (latent_cache_) lo.latents = latent_cache_.get(), lo.latent_keys = &v.latent_keys;
    // A loader of its own each pass: its batches, captions and flips are a function of the seed,
    // and the draws restart from it (kohya reseeds torch at every pass), so each batch meets the
    // same timesteps and noise every time.
    data::Loader loader(vd.dataset, vd.buckets, lo);
    diffusion::NoiseRng rng{v.seed ^ kValidationNoiseStream, 0};
    LossRecorder& recorder = per_epoch ? v.per_epoch : v.per_step;
    ValidationEvent e;
    e.step = trainer_->steps_done();
    e.epoch = epoch;
    e.per_epoch = per_epoch;
    e.timesteps = v.timesteps;
    const int64_t batches = validation_batches(c_, int64_t(loader.batches()));
    double sum = 0;
    int64_t runs = 0;
    while (e.batches < batches) {
        if (stop_ && stop_->load()) return;  // the run stops at its next check: a partial pass reports nothing
        const std::optional<data::Batch> b = loader.next();
        if (!b) break;
        const Micro mi = prepare(*b, /*validation=*/true);
        for (const int32_t t : v.timesteps) {
            const double loss = trainer_->evaluate(mi.input(), t, rng);
            recorder.add(epoch - 1, runs++, loss);  // kohya's epoch counts from 0
            sum += loss;
        }
        e.batches++;
    }
    data::add_skipped(sum_.skipped_images, loader.skipped());
    if (runs == 0) return;  // every validation image failed to load: nothing to report
    e.loss = sum / double(runs);
    e.average = recorder.moving_average();
    e.divergence = e.average - last_loss_mean_;
    e.seconds = seconds_since(t0);
    m_.obs->on_validation(e);
}

}  // namespace train
