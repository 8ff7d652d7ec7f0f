// kohya's validation loss (train_network.py since PR #1903, docs/validation.md), the rules of it:
// a pass runs every validation batch (up to --max_validation_steps) at each of four fixed
// timesteps, evaluating the loss as a training step would without the update (network dropouts
// off); each pass reseeds the draws with --validation_seed (else --seed), so a batch meets the same
// noise at every pass and the curve moves only with the weights. Passes run after every
// --validate_every_n_steps-th optimizer step and at the end of every epoch (every
// --validate_every_n_epochs-th with the option). The losses go into kohya's LossRecorder, one for
// the step passes and one for the epoch passes; what TensorBoard shows as
// loss/validation/{step,epoch}_average is that recorder's moving average.
//
// Where we differ: our noise generator is not torch's, so the noise values (not their rules)
// differ from kohya's; a validation batch is a micro-batch of the run (the train batch size unless
// auto-fit split it into accumulation steps). The pass itself is Runner::validate
// (train/run/validation.cpp), on the run's own step graphs (BucketTrainer::evaluate).
#pragma once
#include <cstdint>
#include <vector>

#include "train/run/config.h"

namespace train {

// np.linspace(min_timestep, max_timestep, 6, dtype=int)[1:-1]: 200, 400, 600, 800 by default.
std::vector<int32_t> validation_timesteps(int min_timestep, int max_timestep);

// kohya's train_util.LossRecorder: during the first epoch (0) every loss is appended; in a later
// epoch the loss at `step` replaces the one held at that index (the list grows when it is
// shorter). moving_average is the held losses' total over their count, the total kept by adding
// and subtracting as kohya keeps it.
class LossRecorder {
public:
    void add(int64_t epoch, int64_t step, double loss);
    double moving_average() const;

private:
    std::vector<double> losses_;
    double total_ = 0;
};

// Whether a pass runs after optimizer step `step` (1-based), and at the end of epoch `epoch`
// (1-based).
bool validation_due_at_step(const RunConfig& c, int64_t step);
bool validation_due_at_epoch(const RunConfig& c, int64_t epoch);
// The batches a pass runs of the `available` ones: all, or --max_validation_steps of them.
int64_t validation_batches(const RunConfig& c, int64_t available);
// The seed each pass starts its draws from: --validation_seed, else the run's seed (kohya's
// args.validation_seed or args.seed; the dataset config's validation_seed orders the split only).
uint64_t validation_draw_seed(const RunConfig& c, uint64_t run_seed);

}  // namespace train
