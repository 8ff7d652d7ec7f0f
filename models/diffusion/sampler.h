// Samplers for SD1.5 inference, computed as diffusers' schedulers compute them: the timesteps and
// sigmas of set_timesteps() and the update of step(), for DDIMScheduler (eta 0 and > 0),
// EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler (DPM++ 2M:
// solver_order 2, dpmsolver++, midpoint, lower_order_final), HeunDiscreteScheduler and
// KDPM2DiscreteScheduler, each optionally with Karras sigmas where diffusers offers them.
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
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "models/diffusion/noise.h"

namespace diffusion {

enum class SamplerKind : uint8_t {
    ddim,             // DDIMScheduler
    euler,            // EulerDiscreteScheduler
    euler_ancestral,  // EulerAncestralDiscreteScheduler (draws noise every step)
    dpmpp_2m,         // DPMSolverMultistepScheduler, algorithm dpmsolver++, order 2
    heun,             // HeunDiscreteScheduler (two model calls per step but the last)
    dpm2,             // KDPM2DiscreteScheduler (two model calls per step but the last)
};

enum class TimestepSpacing : uint8_t { leading, linspace, trailing };

struct SamplerOptions {
    SamplerKind kind = SamplerKind::euler;
    TimestepSpacing spacing = TimestepSpacing::linspace;
    int steps_offset = 0;           // added to "leading" timesteps
    bool clip_sample = false;       // DDIM, Heun: predicted x0 clamped to [-1, 1]
    bool set_alpha_to_one = true;   // DDIM: the step past t = 0 goes to alpha 1 (else alphas_cumprod[0])
    bool karras = false;            // Karras et al. sigmas (euler, heun, dpm2, dpmpp_2m)
    double eta = 0.0;               // DDIM: the share of fresh noise (0 deterministic, 1 DDPM-like)
    Prediction prediction = Prediction::epsilon;

    // The scheduler class built from SD1.5's scheduler_config.json (steps_offset 1,
    // set_alpha_to_one false, clip_sample false; each class's default timestep spacing).
    static SamplerOptions diffusers_sd15(SamplerKind k);
    // kohya sd-scripts' sample images: the class with its constructor defaults (steps_offset 0,
    // set_alpha_to_one true) and clip_sample forced on, which DDIM and Heun honour.
    static SamplerOptions kohya(SamplerKind k);

    // Throws gl::Error for a combination diffusers does not offer (Karras sigmas with DDIM or
    // Euler ancestral, eta with another sampler, eta outside [0, 1]).
    void validate() const;
};

// Sampler names as kohya's --sample_sampler and the prompt file's --ss take them: ddim, euler
// (k_euler), euler_a (k_euler_a), dpmsolver++, heun, dpm_2 (k_dpm_2); a "_karras" suffix (ours)
// turns Karras sigmas on where diffusers offers them. kohya's other names (ddpm, pndm, lms, k_lms,
// dpmsolver, dpmsingle, dpm_2_a, k_dpm_2_a) and unknown names throw gl::Error naming them and
// listing the supported ones.
struct SamplerName {
    SamplerKind kind = SamplerKind::euler;
    bool karras = false;
};
SamplerName parse_sampler_name(const std::string& name);
const char* sampler_kind_name(SamplerKind k);  // kohya's name: "euler_a", "dpmsolver++", ...
// The name A1111's infotext uses ("Euler a", "DPM++ 2M Karras", "DDIM", ...).
std::string a1111_sampler_name(SamplerKind k, bool karras);
// The supported names, comma separated (for help texts).
std::string supported_sampler_names();

// Given the model input (the latents scaled for this timestep) and the timestep, writes the model
// output (epsilon or v, as the options' prediction says) for every element.
using ModelFn = std::function<void(std::span<const float> x_in, double timestep, std::span<float> out)>;
// Fills its argument with N(0, 1) values (ancestral and eta > 0 steps).
using NoiseFn = std::function<void(std::span<float> out)>;
// Called after every step() with the call's index and the latents it produced.
using StepFn = std::function<void(int call, std::span<const float> latents)>;

class Sampler {
public:
    // The schedule of `steps` inference steps (1..1000) on SD1.5's training schedule
    // (scaled_linear 0.00085..0.012 over 1000 steps). Throws gl::Error for bad options or steps.
    Sampler(const SamplerOptions& opt, int steps);

    const SamplerOptions& options() const { return opt_; }
    int steps() const { return steps_; }
    // The timestep of every model call, in order (Heun and DPM2 call the model 2 * steps - 1 times).
    const std::vector<double>& timesteps() const { return timesteps_; }
    int model_calls() const { return int(timesteps_.size()); }
    // What the initial unit noise is multiplied by (diffusers' init_noise_sigma).
    double init_noise_sigma() const { return init_sigma_; }

    // Runs the whole loop on x: in, unit Gaussian noise (any number of elements; the batch is
    // elementwise to the sampler); out, the denoised latents. `noise` is needed by Euler
    // ancestral and DDIM with eta > 0 (called once per step, every step). The sampler keeps no
    // state between calls: one Sampler can run many batches.
    void run(std::span<float> x, const ModelFn& model, const NoiseFn& noise = {}, const StepFn& on_step = {}) const;

private:
    struct Tables;
    SamplerOptions opt_;
    int steps_ = 0;
    std::vector<double> timesteps_;
    // Sigma-parameterised samplers: diffusers' self.sigmas (f32 values) and, for DPM2, its
    // interpolated sigmas. DDIM: the alphas_cumprod table and the step's stride.
    std::vector<double> sigmas_, sigmas_interpol_;
    std::vector<double> alphas_cumprod_;
    double init_sigma_ = 1.0;

    void run_ddim(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const;
    void run_dpmpp(std::span<float> x, const ModelFn& model, const StepFn& on_step) const;
    void run_euler(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const;
    void run_two_stage(std::span<float> x, const ModelFn& model, const StepFn& on_step) const;
};

}  // namespace diffusion
