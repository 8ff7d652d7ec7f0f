// Samplers for SD1.5 inference, computed as diffusers' schedulers compute them: the timesteps and
// sigmas of set_timesteps() and the update of step(), for DDIMScheduler (eta 0 and > 0),
// EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler (DPM++ 2M:
// solver_order 2, dpmsolver++, midpoint, lower_order_final; and DPM-Solver 2M, algorithm
// dpmsolver), HeunDiscreteScheduler, KDPM2DiscreteScheduler, PNDMScheduler (PLMS, with or without
// its Runge-Kutta warm-up), LMSDiscreteScheduler, KDPM2AncestralDiscreteScheduler,
// DPMSolverSinglestepScheduler (DPM++ 2S) and DDPMScheduler, each optionally with Karras sigmas
// where diffusers offers them.
//
// Everything here is host math over latents held as f32 buffers; the model is a callback, so the
// same code drives the UNet on any backend and the tests' fake model. The schedule tables are
// built as diffusers builds them (betas as an f32 torch.linspace squared, alphas_cumprod rounded
// to f32, sigmas in f32, NumPy's float64 interpolation); per-element updates run in double and
// are rounded to f32 once per step, where diffusers rounds after every f32 tensor op (the two
// agree to about 1e-6 relative; the golden tests allow 1e-4).
//
// The configuration is what a diffusers scheduler class takes; two presets give what users get:
// diffusers_sd15() (the class built from SD1.5's scheduler_config.json, as StableDiffusionPipeline
// users swap samplers) and kohya() (kohya sd-scripts' get_my_scheduler for --sample_sampler).
//
// Each sampler is one file in samplers/ (its SamplerDef, samplers/sampler_def.h) and one line in
// samplers/sampler_list.inc; sampler.cpp (names, presets, validation, the loop's driver) is generic
// over those definitions and names none of them.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/diffusion/noise.h"
#include "models/diffusion/samplers/sampler_def.h"

namespace diffusion {

// Which sampler: a handle on its definition, SamplerKind::<id> for each line of sampler_list.inc
// (SamplerKind::euler_ancestral, ...), or any registered definition (registered_samplers()).
class SamplerKind {
public:
    constexpr explicit SamplerKind(const SamplerDef& def) : def_(&def) {}
#define GL_SAMPLER(id) static const SamplerKind id;
#include "models/diffusion/samplers/sampler_list.inc"
#undef GL_SAMPLER

    const SamplerDef& def() const { return *def_; }
    std::string_view name() const { return def_->name; }  // kohya's: "euler_a", "dpmsolver++", ...
    friend bool operator==(SamplerKind a, SamplerKind b) { return a.def_ == b.def_; }

private:
    const SamplerDef* def_;
};
#define GL_SAMPLER(id) inline constexpr SamplerKind SamplerKind::id{sampler_##id};
#include "models/diffusion/samplers/sampler_list.inc"
#undef GL_SAMPLER

struct SamplerOptions {
    SamplerKind kind = SamplerKind::euler;
    TimestepSpacing spacing = TimestepSpacing::linspace;
    int steps_offset = 0;           // added to "leading" timesteps
    bool clip_sample = false;       // predicted x0 clamped to [-1, 1] (where the sampler reads it)
    bool set_alpha_to_one = true;   // DDIM, PNDM: the step past t = 0 goes to alpha 1 (else alphas_cumprod[0])
    bool skip_prk_steps = true;     // PNDM: PLMS steps only (else the Runge-Kutta warm-up first)
    bool karras = false;            // Karras et al. sigmas (where the sampler takes them)
    double eta = 0.0;               // DDIM: the share of fresh noise (0 deterministic, 1 DDPM-like)
    Prediction prediction = Prediction::epsilon;

    // The scheduler class built from SD1.5's scheduler_config.json (steps_offset 1,
    // set_alpha_to_one false, clip_sample false, skip_prk_steps; each class's default timestep
    // spacing).
    static SamplerOptions diffusers_sd15(SamplerKind k);
    // kohya sd-scripts' sample images: the class with its constructor defaults (steps_offset 0,
    // the class's set_alpha_to_one, no skip_prk_steps) and clip_sample forced on, which only some
    // classes read.
    static SamplerOptions kohya(SamplerKind k);

    // Throws gl::Error for a combination diffusers does not offer (Karras sigmas or eta with a
    // sampler that takes none, eta outside [0, 1]).
    void validate() const;
};

// Sampler names as kohya's --sample_sampler and the prompt file's --ss take them: each registered
// sampler's name and aliases (ddim, euler / k_euler, euler_a / k_euler_a, dpmsolver++, heun,
// dpm_2 / k_dpm_2, pndm, lms / k_lms, dpm_2_a / k_dpm_2_a, dpmsolver, dpmsingle, ddpm: every name
// kohya's get_my_scheduler knows); a "_karras" suffix (ours) turns Karras sigmas on where
// diffusers offers them. Unknown names throw gl::Error naming them and listing the supported ones
// (kohya falls back to DDIM).
struct SamplerName {
    SamplerKind kind = SamplerKind::euler;
    bool karras = false;
};
SamplerName parse_sampler_name(const std::string& name);
// The name A1111's infotext uses ("Euler a", "DPM++ 2M Karras", "DDIM", ...).
std::string a1111_sampler_name(SamplerKind k, bool karras);
// The supported names, comma separated (for help texts).
std::string supported_sampler_names();

// Every registered sampler: sampler_list.inc's in its order, then those registered at run time.
std::vector<SamplerKind> registered_samplers();

// Adds a sampler defined outside sampler_list.inc (an application's own, a test's) to the names
// parse_sampler_name knows, for the registration's lifetime; `def` must outlive it. Throws
// gl::Error naming the definition when it is incomplete or inconsistent (a takes_* flag without
// its A1111 name, no plan) or when one of its kohya or A1111 names is taken already.
class SamplerRegistration {
public:
    explicit SamplerRegistration(const SamplerDef& def);
    ~SamplerRegistration();
    SamplerRegistration(const SamplerRegistration&) = delete;
    SamplerRegistration& operator=(const SamplerRegistration&) = delete;

private:
    const SamplerDef* def_;
};

class Sampler {
public:
    // The schedule of `steps` inference steps (1..1000) on SD1.5's training schedule
    // (scaled_linear 0.00085..0.012 over 1000 steps). Throws gl::Error for bad options or steps
    // (also where the class itself cannot build the schedule: PNDM's Runge-Kutta warm-up below 4
    // steps, a "leading" offset past the training schedule).
    Sampler(const SamplerOptions& opt, int steps);

    const SamplerOptions& options() const { return opt_; }
    int steps() const { return steps_; }
    // The timestep of every model call, in order (Heun, DPM2 and DPM2 a call the model 2 * steps - 1
    // times, PNDM steps + 1 or steps + 9).
    const std::vector<double>& timesteps() const { return plan_->timesteps; }
    int model_calls() const { return int(plan_->timesteps.size()); }
    // What the initial unit noise is multiplied by (diffusers' init_noise_sigma).
    double init_noise_sigma() const { return plan_->init_noise_sigma; }

    // Runs the whole loop on x: in, unit Gaussian noise (any number of elements; the batch is
    // elementwise to the sampler); out, the denoised latents. `noise` is needed by samplers that
    // draw noise (Euler ancestral, DPM2 ancestral, DDPM, DDIM with eta > 0; called once per model
    // call, every call). The sampler keeps no state between calls: one Sampler can run many batches.
    void run(std::span<float> x, const ModelFn& model, const NoiseFn& noise = {}, const StepFn& on_step = {}) const;

private:
    SamplerOptions opt_;
    int steps_ = 0;
    std::shared_ptr<const SamplerPlan> plan_;
};

}  // namespace diffusion
