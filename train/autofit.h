// Auto-fit for the SD1.5 LoRA step: given the device memory and the user's configuration, pick
// the fastest step that fits, for every dataset bucket: the recompute budget, the micro-batch with
// gradient accumulation keeping the user's effective batch, and, only where the user allows them,
// 8-bit AdamW state, cached text-encoder outputs and UNet-only training (gl::auto_fit does the
// planning; this file builds the configurations). One step graph per bucket and the frozen text
// encoder beside it share one memory; sdtrain fits its whole run (every batch shape, sampling)
// with the same configurations (train/run/graphs.h).
#pragma once
#include <functional>

#include "ggml-lite/core/autofit.h"
#include "train/step.h"

namespace train {

struct FitBucket {
    int64_t latent_h = 64, latent_w = 64;  // pixels / 8
    double images = 1;                     // its share of the updates
};

struct AutoFitRequest {
    StepOptions step;  // the user's configuration; effective batch = step.batch * step.grad_accum
    std::vector<FitBucket> buckets;  // empty: step's latent size alone
    size_t vram = 0;     // device bytes the run may use (the whole GPU, or a user's limit)
    size_t reserve = 0;  // of which held outside the plans: the CUDA context (549 MiB measured on the
                         // H200 with CUDA 13) and other processes; 0 when vram is what is free after
                         // the context exists
    // What the backend holds beside the plans (gl::layout_rules("cuda") when training on CUDA:
    // workspace, graph executables, allocation page; or a simulated device). Default: the CPU's.
    gl::LayoutRules rules;
    std::vector<int64_t> micro_batches;  // to try; empty: every divisor of the effective batch
    bool allow_8bit_optimizer = false;     // AdamW may become AdamW8bit
    bool allow_cached_text_encoder = false;  // a frozen text encoder's outputs may be cached (not on the device)
    bool allow_unet_only = false;          // a trained text encoder may be left frozen
    bool cache_text_encoder = false;       // the user caches the frozen text encoder's outputs anyway
    // Advice for a refused run: every change, allowed or not, each row naming the flags it needs.
    bool advice = false;
    gl::CostModel cost;

    void validate() const;  // throws gl::Error naming the field
};

// One configuration auto-fit may choose: how the user's step changes.
struct FitConfig {
    int64_t micro = 1;     // micro-batch; accumulation makes up the effective batch
    bool adam8 = false;    // AdamW became AdamW8bit
    bool train_te = false, cache_te = false;
    std::string label;     // "batch 4 x 2 accumulated, AdamW8bit, TE cached"
    std::string needs;     // the flags that would allow it ("" when allowed)

    StepOptions step(const StepOptions& user) const;  // the user's step with this configuration
};

// The configurations of a request, in the order tried: micro-batches as given (or every divisor of
// the effective batch, largest first), then the optimizer and text-encoder changes allowed (with
// r.advice, every change, each with the flags it needs).
std::vector<FitConfig> fit_configs(const AutoFitRequest& r);

struct AutoFitChoice {
    StepOptions step;          // batch, grad_accum, optimizer, train_text_encoder as chosen
    bool cache_text_encoder = false;
    gl::Recompute recompute = gl::Recompute::none;  // none when every bucket fits without, else budget
    std::vector<size_t> budgets;  // per bucket: the bytes its step plan may take
    gl::CostModel cost;
    gl::FitResult result;  // every configuration tried, with predicted peaks and times (table()); the
                           // choice's plans: one step per bucket, then the text encoder when it runs

    gl::PlanOptions plan_options(size_t bucket) const;  // what to plan bucket's step graph with
};

// Throws gl::Error when nothing fits, with the table of what was tried in the message.
AutoFitChoice auto_fit_step(const AutoFitRequest& r);

// The largest micro-batch, without gradient accumulation, whose step fits r.vram: within a predicted
// slowdown over the same batch planned without recompute, and with any recompute at all. r's batch,
// accumulation and micro_batches are ignored (each batch b is fitted as micro-batch b alone, by
// auto_fit_step). The search gallops from a guess (the step planned at batches 2 and 4: memory
// affine in the batch, the recompute frontier's shape alike at every batch) and then bisects, so
// it fits a handful of batches. The greedy recompute search's smallest plan is not quite monotone
// in the batch (a few % either way), so what is found is a batch that fits whose next does not;
// near that edge a larger batch may fit again.
struct BatchSearch {
    double max_slowdown = 1.05;  // predicted step time over the same batch's without recompute
    int64_t max_batch = 4096;    // the search stops here
    bool any_recompute = true;   // also search the largest batch that fits with any recompute
};

struct BatchFit {
    int64_t batch = 0;  // the largest within max_slowdown; 0: not even batch 1
    AutoFitChoice choice;  // batch's configuration (when batch > 0)
    double seconds = 0, none_seconds = 0;  // batch's predicted step: as fitted, and without recompute
    int64_t any_batch = 0;  // the largest that fits with any recompute (0: none, or not searched)
    double any_seconds = 0, any_none_seconds = 0;
    bool batch1_needs_recompute = false;  // even batch 1 does not fit without recompute
    int probes = 0;  // batches fitted to find these
};

// Throws gl::Error for a request that does not validate or a failing builder.
BatchFit largest_batch(const AutoFitRequest& r, const BatchSearch& s = {});

}  // namespace train
