#include "models/diffusion/sampler.h"

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace diffusion {

namespace {

constexpr int kTrainSteps = 1000;

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

// ((1 - ac) / ac) ** 0.5 as a torch f32 tensor.
std::vector<double> sigma_table(const std::vector<double>& ac) {
    std::vector<double> s(ac.size());
    for (size_t i = 0; i < ac.size(); i++) {
        const float a = float(ac[i]);
        s[i] = double(std::sqrt((1.0f - a) / a));
    }
    return s;
}

// np.linspace(start, stop, n) in float64 (the last value set to stop exactly).
std::vector<double> np_linspace(double start, double stop, int n) {
    std::vector<double> v(size_t(std::max(n, 0)));
    if (n == 1) v[0] = start;
    if (n <= 1) return v;
    const double step = (stop - start) / double(n - 1);
    for (int i = 0; i < n; i++) v[size_t(i)] = double(i) * step + start;
    v.back() = stop;
    return v;
}

// np.interp(x, arange(len(fp)), fp).
double np_interp(double x, const std::vector<double>& fp) {
    if (x <= 0) return fp.front();
    const double last = double(fp.size() - 1);
    if (x >= last) return fp.back();
    const auto j = size_t(std::floor(x));
    return (fp[j + 1] - fp[j]) * (x - double(j)) + fp[j];
}

// diffusers' _sigma_to_t: the fractional timestep whose log-sigma a sigma has, interpolated in the
// log-sigma table (NumPy float64).
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

// _convert_to_karras with rho 7 between the ends of `sigmas`.
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, int n) {
    constexpr double rho = 7.0;
    const double min_inv = std::pow(sigma_min, 1 / rho), max_inv = std::pow(sigma_max, 1 / rho);
    std::vector<double> ramp = np_linspace(0, 1, n), s(static_cast<size_t>(n));
    for (size_t i = 0; i < s.size(); i++) s[i] = std::pow(max_inv + ramp[i] * (min_inv - max_inv), rho);
    return s;
}

double f32(double v) { return double(float(v)); }

// The "leading" timesteps: arange(n) * (1000 // n) reversed, plus the offset.
std::vector<double> leading(int n, int denominator, int offset) {
    std::vector<double> t(static_cast<size_t>(n));
    const int ratio = kTrainSteps / denominator;
    for (int i = 0; i < n; i++) t[size_t(i)] = double((n - 1 - i) * ratio + offset);
    return t;
}

// The discrete timesteps of the sigma-parameterised samplers before Karras (f32 values).
std::vector<double> sigma_timesteps(const SamplerOptions& o, int n) {
    if (o.spacing == TimestepSpacing::leading) return leading(n, n, o.steps_offset);
    std::vector<double> t = np_linspace(0, kTrainSteps - 1, n);
    std::reverse(t.begin(), t.end());
    for (double& v : t) v = f32(v);
    return t;
}

// x0 predicted from the model output at noise level sigma (latents x = x0 + sigma * eps).
double x0_of(double x, double out, double sigma, Prediction p) {
    if (p == Prediction::epsilon) return x - sigma * out;
    return out * (-sigma / std::sqrt(sigma * sigma + 1)) + x / (sigma * sigma + 1);
}

}  // namespace

// ---- options and names ----

SamplerOptions SamplerOptions::diffusers_sd15(SamplerKind k) {
    SamplerOptions o;
    o.kind = k;
    o.spacing = k == SamplerKind::ddim ? TimestepSpacing::leading : TimestepSpacing::linspace;
    o.steps_offset = 1;
    o.clip_sample = false;
    o.set_alpha_to_one = false;
    return o;
}

SamplerOptions SamplerOptions::kohya(SamplerKind k) {
    SamplerOptions o;
    o.kind = k;
    o.spacing = k == SamplerKind::ddim ? TimestepSpacing::leading : TimestepSpacing::linspace;
    o.steps_offset = 0;
    // kohya sets config.clip_sample = True on every class whose config has it (DDIM: already
    // true by default; Heun: false by default), and both read it in step().
    o.clip_sample = k == SamplerKind::ddim || k == SamplerKind::heun;
    o.set_alpha_to_one = true;
    return o;
}

void SamplerOptions::validate() const {
    GL_CHECK(!karras || (kind != SamplerKind::ddim && kind != SamplerKind::euler_ancestral), "sampler ",
             sampler_kind_name(kind), ": Karras sigmas are not offered for it (diffusers' scheduler has none)");
    GL_CHECK(eta == 0.0 || kind == SamplerKind::ddim, "sampler ", sampler_kind_name(kind),
             ": eta applies to ddim only");
    GL_CHECK(std::isfinite(eta) && eta >= 0.0 && eta <= 1.0, "sampler ddim: eta ", eta, " must be in [0, 1]");
    GL_CHECK(steps_offset >= 0 && steps_offset < kTrainSteps, "sampler: steps_offset ", steps_offset,
             " must be in [0, ", kTrainSteps, ")");
}

namespace {
struct NameEntry {
    const char* name;
    SamplerKind kind;
};
constexpr NameEntry kNames[] = {
    {"ddim", SamplerKind::ddim},     {"euler", SamplerKind::euler},         {"k_euler", SamplerKind::euler},
    {"euler_a", SamplerKind::euler_ancestral}, {"k_euler_a", SamplerKind::euler_ancestral},
    {"dpmsolver++", SamplerKind::dpmpp_2m}, {"heun", SamplerKind::heun}, {"dpm_2", SamplerKind::dpm2},
    {"k_dpm_2", SamplerKind::dpm2},
};
// kohya's --sample_sampler choices we do not run.
constexpr const char* kRefused[] = {"ddpm", "pndm", "lms", "k_lms", "dpmsolver", "dpmsingle", "dpm_2_a", "k_dpm_2_a"};
}  // namespace

std::string supported_sampler_names() {
    std::string s;
    for (const NameEntry& e : kNames) s += (s.empty() ? "" : ", ") + std::string(e.name);
    return s + " (and <name>_karras for euler, heun, dpm_2, dpmsolver++)";
}

SamplerName parse_sampler_name(const std::string& name) {
    std::string base = name;
    bool karras = false;
    const std::string suffix = "_karras";
    if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
        base.resize(base.size() - suffix.size());
        karras = true;
    }
    for (const char* r : kRefused)
        GL_CHECK(base != r, "sampler '", name, "' (kohya's ", r, ") is not supported; supported: ",
                 supported_sampler_names());
    for (const NameEntry& e : kNames) {
        if (base != e.name) continue;
        SamplerName out{e.kind, karras};
        GL_CHECK(!karras || (e.kind != SamplerKind::ddim && e.kind != SamplerKind::euler_ancestral), "sampler '",
                 name, "': ", e.name, " has no Karras variant; supported: ", supported_sampler_names());
        return out;
    }
    gl::fail("unknown sampler '", name, "'; supported: ", supported_sampler_names());
}

const char* sampler_kind_name(SamplerKind k) {
    switch (k) {
        case SamplerKind::ddim: return "ddim";
        case SamplerKind::euler: return "euler";
        case SamplerKind::euler_ancestral: return "euler_a";
        case SamplerKind::dpmpp_2m: return "dpmsolver++";
        case SamplerKind::heun: return "heun";
        case SamplerKind::dpm2: return "dpm_2";
    }
    return "?";
}

std::string a1111_sampler_name(SamplerKind k, bool karras) {
    std::string s;
    switch (k) {
        case SamplerKind::ddim: s = "DDIM"; break;
        case SamplerKind::euler: s = "Euler"; break;
        case SamplerKind::euler_ancestral: s = "Euler a"; break;
        case SamplerKind::dpmpp_2m: s = "DPM++ 2M"; break;
        case SamplerKind::heun: s = "Heun"; break;
        case SamplerKind::dpm2: s = "DPM2"; break;
    }
    return karras ? s + " Karras" : s;
}

// ---- schedules (set_timesteps) ----

Sampler::Sampler(const SamplerOptions& opt, int steps) : opt_(opt), steps_(steps) {
    opt_.validate();
    GL_CHECK(steps >= 1 && steps <= kTrainSteps, "sampler ", sampler_kind_name(opt.kind), ": steps ", steps,
             " must be in [1, ", kTrainSteps, "]");
    alphas_cumprod_ = diffusers_alphas_cumprod();
    const std::vector<double> table = sigma_table(alphas_cumprod_);
    std::vector<double> log_sigmas(table.size());
    for (size_t i = 0; i < table.size(); i++) log_sigmas[i] = std::log(table[i]);
    const bool lead = opt_.spacing == TimestepSpacing::leading;
    const int n = steps;

    if (opt_.kind == SamplerKind::ddim) {
        if (lead) {
            timesteps_ = leading(n, n, opt_.steps_offset);
        } else {
            timesteps_ = np_linspace(0, kTrainSteps - 1, n);
            std::reverse(timesteps_.begin(), timesteps_.end());
            for (double& t : timesteps_) t = std::nearbyint(t);  // NumPy rounds half to even
        }
        GL_CHECK(timesteps_.front() < kTrainSteps, "sampler ddim: ", n, " steps with steps_offset ",
                 opt_.steps_offset, " reach timestep ", timesteps_.front(), ", past the schedule's ", kTrainSteps - 1);
        return;
    }

    if (opt_.kind == SamplerKind::dpmpp_2m) {
        if (lead) {
            timesteps_ = leading(n + 1, n + 1, opt_.steps_offset);
        } else {
            timesteps_ = np_linspace(0, kTrainSteps - 1, n + 1);
            std::reverse(timesteps_.begin(), timesteps_.end());
            for (double& t : timesteps_) t = std::nearbyint(t);
        }
        timesteps_.pop_back();
        if (opt_.karras) {
            sigmas_ = karras_sigmas(table.front(), table.back(), n);
            for (size_t i = 0; i < sigmas_.size(); i++) timesteps_[i] = std::nearbyint(sigma_to_t(sigmas_[i], log_sigmas));
        } else {
            sigmas_.resize(size_t(n));
            for (size_t i = 0; i < sigmas_.size(); i++) sigmas_[i] = np_interp(timesteps_[i], table);
        }
        sigmas_.push_back(0.0);
        for (double& s : sigmas_) s = f32(s);
        GL_CHECK(timesteps_.front() < kTrainSteps, "sampler dpmsolver++: ", n, " steps with steps_offset ",
                 opt_.steps_offset, " reach timestep ", timesteps_.front(), ", past the schedule's ", kTrainSteps - 1);
        return;
    }

    // Euler, Euler ancestral, Heun, DPM2: sigmas interpolated at the timesteps, or Karras sigmas
    // between the same ends with their fractional timesteps.
    std::vector<double> t = sigma_timesteps(opt_, n);
    std::vector<double> s(static_cast<size_t>(n));
    for (size_t i = 0; i < s.size(); i++) s[i] = np_interp(t[i], table);
    if (opt_.karras) {
        s = karras_sigmas(s.back(), s.front(), n);
        for (size_t i = 0; i < s.size(); i++) {
            t[i] = sigma_to_t(s[i], log_sigmas);
            // DPM2 rounds them (and then keeps the interpolated timesteps in float64 too).
            t[i] = opt_.kind == SamplerKind::dpm2 ? std::nearbyint(t[i]) : f32(t[i]);
        }
    }
    GL_CHECK(t.front() < kTrainSteps, "sampler ", sampler_kind_name(opt_.kind), ": ", n, " steps with steps_offset ",
             opt_.steps_offset, " reach timestep ", t.front(), ", past the schedule's ", kTrainSteps - 1);
    s.push_back(0.0);
    for (double& v : s) v = f32(v);

    if (opt_.kind == SamplerKind::euler || opt_.kind == SamplerKind::euler_ancestral) {
        timesteps_ = t;
        sigmas_ = s;
    } else if (opt_.kind == SamplerKind::heun) {
        // [s0, s1, s1, ..., s_{n-1}, s_{n-1}, 0] and [t0, t1, t1, ..., t_{n-1}, t_{n-1}].
        sigmas_ = {s.front()};
        timesteps_ = {t.front()};
        for (int i = 1; i < n; i++) {
            sigmas_.insert(sigmas_.end(), 2, s[size_t(i)]);
            timesteps_.insert(timesteps_.end(), 2, t[size_t(i)]);
        }
        sigmas_.push_back(0.0);
    } else {
        // DPM2: interpolated sigmas halfway in log space between neighbours (f32), their
        // timesteps, and both tables interleaved as diffusers lays them out.
        std::vector<double> interp(s.size());
        for (size_t i = 0; i < s.size(); i++) {
            const double prev = s[(i + s.size() - 1) % s.size()];
            interp[i] = f32(std::exp(0.5 * (std::log(s[i]) + std::log(prev))));
        }
        sigmas_ = {s.front()};
        sigmas_interpol_ = {interp.front()};
        for (size_t i = 1; i < s.size(); i++) {
            sigmas_.insert(sigmas_.end(), 2, s[i]);
            sigmas_interpol_.insert(sigmas_interpol_.end(), 2, interp[i]);
        }
        sigmas_.push_back(s.back());
        sigmas_interpol_.push_back(interp.back());
        timesteps_ = {t.front()};
        for (int i = 1; i < n; i++) {
            const double ti = sigma_to_t(interp[size_t(i)], log_sigmas);
            timesteps_.push_back(opt_.karras ? ti : f32(ti));
            timesteps_.push_back(t[size_t(i)]);
        }
    }
    const double max_sigma = *std::max_element(sigmas_.begin(), sigmas_.end());
    init_sigma_ = lead ? f32(std::sqrt(max_sigma * max_sigma + 1)) : max_sigma;
}

// ---- the loop (step) ----

void Sampler::run(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const {
    GL_CHECK(model, "sampler: no model function");
    const bool needs_noise =
        opt_.kind == SamplerKind::euler_ancestral || (opt_.kind == SamplerKind::ddim && opt_.eta > 0);
    GL_CHECK(!needs_noise || noise, "sampler ", sampler_kind_name(opt_.kind), ": needs a noise function");
    for (float& v : x) v = float(double(v) * init_sigma_);
    switch (opt_.kind) {
        case SamplerKind::ddim: run_ddim(x, model, noise, on_step); break;
        case SamplerKind::dpmpp_2m: run_dpmpp(x, model, on_step); break;
        case SamplerKind::euler:
        case SamplerKind::euler_ancestral: run_euler(x, model, noise, on_step); break;
        case SamplerKind::heun:
        case SamplerKind::dpm2: run_two_stage(x, model, on_step); break;
    }
}

void Sampler::run_ddim(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const {
    const size_t n = x.size();
    std::vector<float> out(n), z(opt_.eta > 0 ? n : 0);
    const int stride = kTrainSteps / steps_;
    const double final_ac = opt_.set_alpha_to_one ? 1.0 : alphas_cumprod_.front();
    for (int k = 0; k < model_calls(); k++) {
        const int t = int(timesteps_[size_t(k)]), prev = t - stride;
        model(x, double(t), out);
        const double a = alphas_cumprod_[size_t(t)], a_prev = prev >= 0 ? alphas_cumprod_[size_t(prev)] : final_ac;
        const double sa = std::sqrt(a), sb = std::sqrt(1 - a);
        const double variance = (1 - a_prev) / (1 - a) * (1 - a / a_prev);
        const double std_dev = opt_.eta * std::sqrt(variance);
        const double dir = std::sqrt(1 - a_prev - std_dev * std_dev), sa_prev = std::sqrt(a_prev);
        if (opt_.eta > 0) noise(z);
        for (size_t i = 0; i < n; i++) {
            const double xi = x[i], oi = out[i];
            double x0, eps;
            if (opt_.prediction == Prediction::epsilon) x0 = (xi - sb * oi) / sa, eps = oi;
            else x0 = sa * xi - sb * oi, eps = sa * oi + sb * xi;
            if (opt_.clip_sample) x0 = std::clamp(x0, -1.0, 1.0);
            double v = sa_prev * x0 + dir * eps;
            if (opt_.eta > 0) v += std_dev * double(z[i]);
            x[i] = float(v);
        }
        if (on_step) on_step(k, x);
    }
}

void Sampler::run_dpmpp(std::span<float> x, const ModelFn& model, const StepFn& on_step) const {
    const size_t n = x.size();
    std::vector<float> out(n);
    std::vector<double> x0(n), x0_prev(n);
    // alpha_t = 1 / sqrt(sigma^2 + 1), sigma_t = sigma alpha_t, lambda = log alpha_t - log sigma_t.
    auto alpha_of = [](double s) { return 1 / std::sqrt(s * s + 1); };
    auto lambda_of = [&](double s) { return std::log(alpha_of(s)) - std::log(s * alpha_of(s)); };
    const int calls = model_calls();
    for (int k = 0; k < calls; k++) {
        model(x, timesteps_[size_t(k)], out);
        const double s0 = sigmas_[size_t(k)], st = sigmas_[size_t(k) + 1];
        const double a0 = alpha_of(s0), sig0 = s0 * a0, at = alpha_of(st), sigt = st * at;
        x0_prev.swap(x0);
        for (size_t i = 0; i < n; i++)
            x0[i] = opt_.prediction == Prediction::epsilon ? (double(x[i]) - sig0 * out[i]) / a0
                                                           : a0 * double(x[i]) - sig0 * out[i];
        // The last step is first order (diffusers: final sigma zero), and so is the first.
        const double h = lambda_of(st) - lambda_of(s0);
        const double c_x = sigt / sig0, c_d0 = -at * (std::exp(-h) - 1.0);
        if (k == 0 || k == calls - 1) {
            for (size_t i = 0; i < n; i++) x[i] = float(c_x * x[i] + c_d0 * x0[i]);
        } else {
            const double h0 = lambda_of(s0) - lambda_of(sigmas_[size_t(k) - 1]);
            const double r0 = h0 / h;
            for (size_t i = 0; i < n; i++) {
                const double d1 = (x0[i] - x0_prev[i]) / r0;
                x[i] = float(c_x * x[i] + c_d0 * x0[i] + 0.5 * c_d0 * d1);
            }
        }
        if (on_step) on_step(k, x);
    }
}

void Sampler::run_euler(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const {
    const size_t n = x.size();
    const bool ancestral = opt_.kind == SamplerKind::euler_ancestral;
    std::vector<float> in(n), out(n), z(ancestral ? n : 0);
    for (int k = 0; k < model_calls(); k++) {
        const double sigma = sigmas_[size_t(k)], next = sigmas_[size_t(k) + 1];
        const double scale = 1 / std::sqrt(sigma * sigma + 1);
        for (size_t i = 0; i < n; i++) in[i] = float(x[i] * scale);
        model(in, timesteps_[size_t(k)], out);
        // Euler ancestral steps down to sigma_down and adds fresh noise of sigma_up.
        double to = next, up = 0;
        if (ancestral) {
            up = std::sqrt(next * next * (sigma * sigma - next * next) / (sigma * sigma));
            to = std::sqrt(next * next - up * up);
            noise(z);
        }
        for (size_t i = 0; i < n; i++) {
            const double xi = x[i];
            const double d = (xi - x0_of(xi, out[i], sigma, opt_.prediction)) / sigma;
            x[i] = float(xi + d * (to - sigma) + (ancestral ? double(z[i]) * up : 0.0));
        }
        if (on_step) on_step(k, x);
    }
}

// Heun and DPM2: a first-order step to the next sigma (Heun) or to the interpolated sigma (DPM2),
// a second model call there, and the corrected step from the saved sample; the last step is
// first order only.
void Sampler::run_two_stage(std::span<float> x, const ModelFn& model, const StepFn& on_step) const {
    const size_t n = x.size();
    const bool heun = opt_.kind == SamplerKind::heun;
    std::vector<float> in(n), out(n);
    std::vector<double> saved(n), d_first(n);
    for (int k = 0; k < model_calls(); k++) {
        const bool first = k % 2 == 0;
        const auto K = size_t(k);
        const double scale_sigma = first || heun ? sigmas_[K] : sigmas_interpol_[K];
        const double scale = 1 / std::sqrt(scale_sigma * scale_sigma + 1);
        for (size_t i = 0; i < n; i++) in[i] = float(x[i] * scale);
        model(in, timesteps_[K], out);
        const double sigma = first ? sigmas_[K] : sigmas_[K - 1];
        const double next = first ? sigmas_[K + 1] : sigmas_[K];
        // Where this call's model input sat, and the first stage's target.
        const double mid = heun ? next : (first ? sigmas_interpol_[K + 1] : sigmas_interpol_[K]);
        const double at = first ? sigma : mid;
        for (size_t i = 0; i < n; i++) {
            const double xi = x[i];
            double x0 = x0_of(xi, out[i], at, opt_.prediction);
            if (heun && opt_.clip_sample) x0 = std::clamp(x0, -1.0, 1.0);
            const double d = (xi - x0) / at;
            double v;
            if (first) {
                saved[i] = xi;
                d_first[i] = d;
                v = xi + d * ((heun ? next : mid) - sigma);
            } else if (heun) {
                v = saved[i] + (d_first[i] + d) / 2 * (next - sigma);
            } else {
                v = saved[i] + d * (next - sigma);
            }
            x[i] = float(v);
        }
        if (on_step) on_step(k, x);
    }
}

}  // namespace diffusion
