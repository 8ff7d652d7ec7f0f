// The schedule math the samplers share, computed as diffusers computes it: SD1.5's training tables
// (betas, alphas_cumprod, sigmas), NumPy's linspace and interp, the timestep spacings, Karras
// sigmas and the sigma-to-timestep map, the discrete timesteps of DDIM, DDPM and PNDM, the
// interpolated sigma schedule of the sigma-parameterised samplers (Euler, Euler ancestral, Heun,
// DPM2, DPM2 ancestral, LMS), DPM-Solver's schedule and variables, and the integral of a Lagrange
// basis polynomial (LMS). Tables hold f32 values in doubles where diffusers holds f32 tensors;
// NumPy's float64 steps stay in double.
#pragma once
#include <span>
#include <vector>

#include "models/diffusion/noise.h"
#include "models/diffusion/samplers/sampler_def.h"

namespace diffusion::schedule {

constexpr int kTrainSteps = 1000;

// SD1.5's training schedule as diffusers' schedulers hold it (scaled_linear 0.00085..0.012 over
// 1000 steps): alphas_cumprod, the sigma table ((1 - ac) / ac) ** 0.5 and its logarithms.
struct TrainTables {
    std::vector<double> alphas_cumprod, sigmas, log_sigmas;
};
const TrainTables& sd15_tables();

double f32(double v);  // the value rounded to f32, as a torch f32 tensor holds it

// np.linspace(start, stop, n) in float64 (the last value set to stop exactly).
std::vector<double> np_linspace(double start, double stop, int n);
// np.linspace(0, 999, n) reversed: "linspace" spacing before each class's own rounding.
std::vector<double> linspace_descending(int n);
// np.interp(x, arange(len(fp)), fp).
double np_interp(double x, const std::vector<double>& fp);
// The "leading" timesteps: arange(n) * (1000 // n) reversed, plus the offset.
std::vector<double> leading(int n, int offset);
// diffusers' _sigma_to_t: the fractional timestep whose log-sigma a sigma has, interpolated in the
// log-sigma table (NumPy float64).
double sigma_to_t(double sigma, const std::vector<double>& log_sigmas);
// _convert_to_karras with rho 7: n sigmas from sigma_max down to sigma_min.
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int n);

// Throws gl::Error naming the sampler when the first timestep is past the training schedule
// (a "leading" steps_offset can push it there).
void check_first_timestep(const SamplerOptions& o, int steps, double first);

// The integer timesteps of the samplers on the discrete training schedule (DDIM, DDPM, PNDM), in
// descending order: "leading" with the offset, else NumPy's linspace rounded half to even;
// checked with check_first_timestep.
std::vector<double> discrete_timesteps(const SamplerOptions& o, int steps);

// The schedule of the sigma-parameterised samplers: `timesteps` (one per step) and `sigmas`
// (one per step, then 0; f32 values) interpolated from the sigma table at the spaced timesteps,
// or, with Karras sigmas, Karras sigmas between the same ends and their fractional timesteps
// (rounded to integers where the class rounds them, else held as f32, or in float64 where the class
// keeps NumPy's values).
struct SigmaSchedule {
    std::vector<double> timesteps, sigmas;
};
enum class KarrasTimesteps { f32, rounded, f64 };
SigmaSchedule sigma_schedule(const SamplerOptions& o, int steps, KarrasTimesteps karras_timesteps);
// init_noise_sigma of the sigma-parameterised samplers: the largest sigma, or for "leading"
// spacing sqrt(max^2 + 1) (f32).
double init_noise_sigma(const SamplerOptions& o, std::span<const double> sigmas);

// DPM-Solver's schedule (DPMSolverMultistepScheduler, DPMSolverSinglestepScheduler): steps + 1
// timesteps spaced ("leading" with the offset, else linspace rounded) with the last dropped, sigmas
// interpolated at them, or Karras sigmas over the whole table with rounded timesteps; then
// `final_sigma` (0 for final_sigmas_type "zero", the table's first sigma for "sigma_min").
SigmaSchedule dpm_solver_schedule(const SamplerOptions& o, int steps, double final_sigma);

// DPM-Solver's variables at noise level sigma (diffusers' _sigma_to_alpha_sigma_t): alpha_t =
// 1 / sqrt(sigma^2 + 1), sigma_t = sigma alpha_t and the half log-SNR lambda = log alpha_t -
// log sigma_t (+inf at sigma 0).
struct VpPoint {
    double alpha, sigma, lambda;
};
VpPoint vp_point(double sigma);

// The integral over [a, b] of the Lagrange basis polynomial that is 1 at nodes[j] and 0 at the other
// nodes (at most 8; distinct), exactly: the polynomial has degree nodes.size() - 1, which a
// 4-point Gauss-Legendre rule integrates without error.
double lagrange_basis_integral(std::span<const double> nodes, size_t j, double a, double b);

// x0 predicted from the model output at noise level sigma (latents x = x0 + sigma * eps).
double x0_of(double x, double out, double sigma, Prediction p);
// The model input at noise level sigma: x / sqrt(sigma^2 + 1) (diffusers' scale_model_input).
void scale_model_input(std::span<const float> x, double sigma, std::span<float> in);

}  // namespace diffusion::schedule
