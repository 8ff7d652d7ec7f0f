// A sampler as a table entry. One file in models/diffusion/samplers/ defines everything about a
// sampler in one SamplerDef: its names (kohya's, its aliases, A1111's with and without Karras),
// what it takes (Karras sigmas, eta, clip_sample), its timestep spacing, and the plan function that
// builds its schedule for a number of steps (diffusers' set_timesteps) and returns the step loop
// that runs on it (step()). A line in sampler_list.inc registers it; sampler.cpp is generic over
// these, and the math several samplers share is in schedule_math.h.
//
// A file defines its entry as
//     constexpr SamplerDef sampler_<id>{...};   // in namespace diffusion
// (declared extern below, so it is constant-initialised and every static link keeps it: the
// registry names it). An application or a test may add a SamplerDef of its own at run time
// through diffusion::SamplerRegistration (sampler.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace diffusion {

enum class TimestepSpacing : uint8_t { leading, linspace, trailing };

struct SamplerOptions;

// Given the model input (the latents scaled for this timestep) and the timestep, writes the model
// output (epsilon or v, as the options' prediction says) for every element.
using ModelFn = std::function<void(std::span<const float> x_in, double timestep, std::span<float> out)>;
// Fills its argument with N(0, 1) values (ancestral and eta > 0 steps).
using NoiseFn = std::function<void(std::span<float> out)>;
// Called after every step() with the call's index and the latents it produced.
using StepFn = std::function<void(int call, std::span<const float> latents)>;

// One sampler's schedule for a number of steps, and its loop over it. Immutable once built: one
// plan runs any number of batches.
struct SamplerPlan {
    virtual ~SamplerPlan() = default;

    std::vector<double> timesteps;   // of every model call, in order
    double init_noise_sigma = 1.0;   // what the initial unit noise is multiplied by
    bool draws_noise = false;        // run() calls the noise function (once per step, every step)

    // Runs every model call on x (the unit noise already scaled by init_noise_sigma); x holds
    // the denoised latents afterwards. The batch is elementwise: x may hold any number of images.
    virtual void run(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const = 0;
};

struct SamplerDef {
    std::string_view name = {};                      // kohya's --sample_sampler / --ss name ("euler_a")
    std::span<const std::string_view> aliases = {};  // kohya's other names for it ("k_euler_a")
    std::string_view a1111_name = {};                // A1111's infotext name ("Euler a")
    std::string_view a1111_karras_name = {};         // with Karras sigmas ("DPM++ 2M Karras"); "" iff !takes_karras
    std::string_view a1111_eta_key = {};             // the infotext key of its eta ("Eta DDIM"); "" iff !takes_eta
    bool takes_karras = false;                       // diffusers' class offers use_karras_sigmas
    bool takes_eta = false;                          // SamplerOptions::eta may be > 0
    bool reads_clip_sample = false;                  // step() clamps x0 when clip_sample is set
    TimestepSpacing spacing = TimestepSpacing::linspace;  // the class's default; both presets keep it
    // The class's default set_alpha_to_one (DDIMScheduler's true, PNDMScheduler's false), which
    // kohya's preset keeps; only the samplers that step past t = 0 read it.
    bool set_alpha_to_one_default = true;
    // The schedule of `steps` steps (1..1000) under validated options; throws gl::Error naming
    // the sampler when the options' schedule does not fit the training schedule.
    std::unique_ptr<const SamplerPlan> (*plan)(const SamplerOptions& o, int steps) = nullptr;
};

#define GL_SAMPLER(id) extern const SamplerDef sampler_##id;
#include "models/diffusion/samplers/sampler_list.inc"
#undef GL_SAMPLER

}  // namespace diffusion
