#include "models/diffusion/samplers/schedule_math.h"

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "models/diffusion/sampler.h"

namespace diffusion::schedule {

namespace {

// diffusers' alphas_cumprod for scaled_linear 0.00085..0.012: betas = torch.linspace(sqrt(start),
// sqrt(end), 1000, f32) ** 2 (torch's CPU linspace: start + step * i from the front half, end -
// step * (n - 1 - i) from the back, each one rounding), then torch.cumprod(1 - betas), which
// accumulates in double and rounds every entry to f32.
std::vector<double> diffusers_alphas_cumprod() {
    const float lo = float(std::sqrt(0.00085)), hi = float(std::sqrt(0.012));
    const float step = (hi - lo) / float(kTrainSteps - 1);
    std::vector<double> ac(kTrainSteps);
    double prod = 1.0;
    for (int i = 0; i < kTrainSteps; i++) {
        const float r = i < kTrainSteps / 2 ? std::fma(step, float(i), lo) : std::fma(-step, float(kTrainSteps - 1 - i), hi);
        const float beta = r * r;
        prod *= double(1.0f - beta);
        ac[size_t(i)] = double(float(prod));
    }
    return ac;
}

TrainTables make_tables() {
    TrainTables t;
    t.alphas_cumprod = diffusers_alphas_cumprod();
    // ((1 - ac) / ac) ** 0.5 as a torch f32 tensor.
    t.sigmas.resize(t.alphas_cumprod.size());
    t.log_sigmas.resize(t.alphas_cumprod.size());
    for (size_t i = 0; i < t.sigmas.size(); i++) {
        const float a = float(t.alphas_cumprod[i]);
        t.sigmas[i] = double(std::sqrt((1.0f - a) / a));
        t.log_sigmas[i] = std::log(t.sigmas[i]);
    }
    return t;
}

}  // namespace

const TrainTables& sd15_tables() {
    static const TrainTables tables = make_tables();
    return tables;
}

double f32(double v) { return double(float(v)); }

std::vector<double> np_linspace(double start, double stop, int n) {
    std::vector<double> v(size_t(std::max(n, 0)));
    if (n == 1) v[0] = start;
    if (n <= 1) return v;
    const double step = (stop - start) / double(n - 1);
    for (int i = 0; i < n; i++) v[size_t(i)] = double(i) * step + start;
    v.back() = stop;
    return v;
}

std::vector<double> linspace_descending(int n) {
    std::vector<double> t = np_linspace(0, kTrainSteps - 1, n);
    std::reverse(t.begin(), t.end());
    return t;
}

double np_interp(double x, const std::vector<double>& fp) {
    if (x <= 0) return fp.front();
    const double last = double(fp.size() - 1);
    if (x >= last) return fp.back();
    const auto j = size_t(std::floor(x));
    return (fp[j + 1] - fp[j]) * (x - double(j)) + fp[j];
}

std::vector<double> leading(int n, int offset) {
    std::vector<double> t(static_cast<size_t>(n));
    const int ratio = kTrainSteps / n;
    for (int i = 0; i < n; i++) t[size_t(i)] = double((n - 1 - i) * ratio + offset);
    return t;
}

double sigma_to_t(double sigma, const std::vector<double>& log_sigmas) {
    const double ls = std::log(std::max(sigma, 1e-10));
    // The last index whose log-sigma is <= ls (0 when none), at most n - 2.
    size_t low = 0;
    for (size_t i = 0; i < log_sigmas.size(); i++)
        if (ls - log_sigmas[i] >= 0) low = i;
    low = std::min(low, log_sigmas.size() - 2);
    const double l = log_sigmas[low], h = log_sigmas[low + 1];
    const double w = std::clamp((l - ls) / (l - h), 0.0, 1.0);
    return (1 - w) * double(low) + w * double(low + 1);
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int n) {
    constexpr double rho = 7.0;
    const double min_inv = std::pow(sigma_min, 1 / rho), max_inv = std::pow(sigma_max, 1 / rho);
    std::vector<double> ramp = np_linspace(0, 1, n), s(static_cast<size_t>(n));
    for (size_t i = 0; i < s.size(); i++) s[i] = std::pow(max_inv + ramp[i] * (min_inv - max_inv), rho);
    return s;
}

void check_first_timestep(const SamplerOptions& o, int steps, double first) {
    GL_CHECK(first < kTrainSteps, "sampler ", o.kind.name(), ": ", steps, " steps with steps_offset ", o.steps_offset,
             " reach timestep ", first, ", past the schedule's ", kTrainSteps - 1);
}

std::vector<double> discrete_timesteps(const SamplerOptions& o, int n) {
    std::vector<double> t;
    if (o.spacing == TimestepSpacing::leading) {
        t = leading(n, o.steps_offset);
    } else {
        t = linspace_descending(n);
        for (double& v : t) v = std::nearbyint(v);  // NumPy rounds half to even
    }
    check_first_timestep(o, n, t.front());
    return t;
}

SigmaSchedule sigma_schedule(const SamplerOptions& o, int n, KarrasTimesteps karras_timesteps) {
    const TrainTables& tables = sd15_tables();
    SigmaSchedule r;
    std::vector<double>& t = r.timesteps;
    std::vector<double>& s = r.sigmas;
    if (o.spacing == TimestepSpacing::leading) {
        t = leading(n, o.steps_offset);
    } else {
        t = linspace_descending(n);
        for (double& v : t) v = f32(v);
    }
    s.resize(size_t(n));
    for (size_t i = 0; i < s.size(); i++) s[i] = np_interp(t[i], tables.sigmas);
    if (o.karras) {
        s = karras_sigmas(s.back(), s.front(), n);
        for (size_t i = 0; i < s.size(); i++) {
            t[i] = sigma_to_t(s[i], tables.log_sigmas);
            if (karras_timesteps == KarrasTimesteps::rounded) t[i] = std::nearbyint(t[i]);
            else if (karras_timesteps == KarrasTimesteps::f32) t[i] = f32(t[i]);
        }
    }
    check_first_timestep(o, n, t.front());
    s.push_back(0.0);
    for (double& v : s) v = f32(v);
    return r;
}

SigmaSchedule dpm_solver_schedule(const SamplerOptions& o, int n, double final_sigma) {
    const TrainTables& tables = sd15_tables();
    SigmaSchedule r;
    std::vector<double>& t = r.timesteps;
    if (o.spacing == TimestepSpacing::leading) {
        t = leading(n + 1, o.steps_offset);
    } else {
        t = linspace_descending(n + 1);
        for (double& v : t) v = std::nearbyint(v);
    }
    t.pop_back();
    std::vector<double>& s = r.sigmas;
    if (o.karras) {
        s = karras_sigmas(tables.sigmas.front(), tables.sigmas.back(), n);
        for (size_t i = 0; i < s.size(); i++) t[i] = std::nearbyint(sigma_to_t(s[i], tables.log_sigmas));
    } else {
        s.resize(size_t(n));
        for (size_t i = 0; i < s.size(); i++) s[i] = np_interp(t[i], tables.sigmas);
    }
    s.push_back(final_sigma);
    for (double& v : s) v = f32(v);
    check_first_timestep(o, n, t.front());
    return r;
}

VpPoint vp_point(double sigma) {
    const double alpha = 1 / std::sqrt(sigma * sigma + 1);
    return {alpha, sigma * alpha, std::log(alpha) - std::log(sigma * alpha)};
}

double lagrange_basis_integral(std::span<const double> nodes, size_t j, double a, double b) {
    GL_CHECK(j < nodes.size() && nodes.size() <= 8, "lagrange_basis_integral: basis ", j, " of ", nodes.size(),
             " nodes (at most 8)");
    // Gauss-Legendre on [-1, 1] with 4 points: exact for polynomials up to degree 7.
    constexpr double x[] = {-0.8611363115940526, -0.3399810435848563, 0.3399810435848563, 0.8611363115940526};
    constexpr double w[] = {0.3478548451374538, 0.6521451548625461, 0.6521451548625461, 0.3478548451374538};
    const double half = (b - a) / 2, mid = (a + b) / 2;
    double sum = 0;
    for (size_t q = 0; q < 4; q++) {
        const double tau = mid + half * x[q];
        double p = 1;
        for (size_t k = 0; k < nodes.size(); k++)
            if (k != j) p *= (tau - nodes[k]) / (nodes[j] - nodes[k]);
        sum += w[q] * p;
    }
    return half * sum;
}

double init_noise_sigma(const SamplerOptions& o, std::span<const double> sigmas) {
    const double max_sigma = *std::max_element(sigmas.begin(), sigmas.end());
    return o.spacing == TimestepSpacing::leading ? f32(std::sqrt(max_sigma * max_sigma + 1)) : max_sigma;
}

double x0_of(double x, double out, double sigma, Prediction p) {
    if (p == Prediction::epsilon) return x - sigma * out;
    return out * (-sigma / std::sqrt(sigma * sigma + 1)) + x / (sigma * sigma + 1);
}

void scale_model_input(std::span<const float> x, double sigma, std::span<float> in) {
    const double scale = 1 / std::sqrt(sigma * sigma + 1);
    for (size_t i = 0; i < x.size(); i++) in[i] = float(x[i] * scale);
}

}  // namespace diffusion::schedule
