// kohya's --initial_epoch / --initial_step / --skip_until_initial_step, as train_network.py
// computes its start from them (ga: --gradient_accumulation_steps, U: updates per epoch):
//   S = --initial_step, else (--initial_epoch - 1) * U; --max_train_steps must exceed it.
//   Without --skip_until_initial_step the run starts at epoch S // U + 1 from its first batch,
//   "for informative purpose": the epoch numbers, epoch saves, data order and sampling of that
//   epoch on; the step counter (step saves' names, the progress bar), the lr schedule and the
//   optimizer start at 0, and the run ends after max_train_steps steps or the last epoch.
//   With it, the first S updates' batches are skipped (epoch S // U + 1, r = S mod U updates into
//   it), and the step counter starts at r, kohya's global_step after it subtracts the skipped
//   epochs' batches (so r, not S, once S passes an epoch); the lr schedule and the optimizer start
//   at 0 (kohya: "lr scheduler will be started from the beginning" when not resuming).
// Refused where kohya's own arithmetic breaks or ours already does better: with --resume (kohya
// overrides the state's step; sdtrain's resume continues exactly, data order included) and
// --skip_until_initial_step with gradient accumulation (kohya counts the skip in batches and the
// epochs in updates: its step counter would start wrong, even negative).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "train/run/config.h"
#include "train/run/data_plan.h"

namespace train {

struct KohyaStart {
    int64_t epoch = 1;        // the first epoch trained (1-based)
    int64_t first_batch = 0;  // loader batches before the first one trained
    int64_t step = 0;         // the step counter's start (kohya's global_step)
    std::string note;         // the plan's line about it
};

// The run's start, or nullopt without --initial_epoch / --initial_step (or for a start at 0).
// Throws gl::Error for kohya's assertion (max_train_steps > the initial step).
std::optional<KohyaStart> kohya_start(const RunConfig& c, const StepCounts& k);

}  // namespace train
