#include "train/run/initial_step.h"

#include "ggml-lite/core/error.h"

namespace train {

std::optional<KohyaStart> kohya_start(const RunConfig& c, const StepCounts& k) {
    if (!c.initial_step && !c.initial_epoch) return std::nullopt;
    const int64_t u = k.updates_per_epoch;
    const int64_t s = c.initial_step ? *c.initial_step : (int64_t(*c.initial_epoch) - 1) * u;
    const std::string given =
        c.initial_step ? gl::cat("--initial_step ", s) : gl::cat("--initial_epoch ", *c.initial_epoch, " (step ", s, ")");
    if (s <= 0) return std::nullopt;  // kohya starts as without it
    GL_CHECK(k.max_train_steps > s, given, ": max_train_steps should be greater than initial step (kohya's assertion): ",
             k.max_train_steps, " vs ", s);
    KohyaStart st;
    const int64_t skipped_epochs = s / u;
    st.epoch = skipped_epochs + 1;
    if (!c.skip_until_initial_step) {
        st.first_batch = skipped_epochs * k.batches_per_epoch;
        st.note = gl::cat(given, ": the run starts at epoch ", st.epoch, " from its first batch, as kohya's (its data "
                          "order, epoch numbers and saves); the step counter, the lr schedule and the optimizer start "
                          "at 0 and it ends after ", k.max_train_steps, " steps or the last epoch");
        return st;
    }
    const int64_t r = s - skipped_epochs * u;
    st.first_batch = skipped_epochs * k.batches_per_epoch + r * k.accum;
    st.step = r;
    st.note = gl::cat(given, " --skip_until_initial_step: the batches of the first ", s, " steps are skipped (epoch ",
                      st.epoch, ", ", r, " steps into it); the step counter starts at ", r,
                      " as kohya's global_step (the skipped epochs are not counted), the lr schedule and the optimizer "
                      "at 0 (kohya, when not resuming)");
    return st;
}

}  // namespace train
