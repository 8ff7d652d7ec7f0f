#include "models/diffusion/sampler.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "ggml-lite/core/error.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

constexpr int kTrainSteps = schedule::kTrainSteps;

constexpr const SamplerDef* kListed[] = {
#define GL_SAMPLER(id) &sampler_##id,
#include "models/diffusion/samplers/sampler_list.inc"
#undef GL_SAMPLER
};

constexpr std::string_view kKarrasSuffix = "_karras";

// The names parse_sampler_name takes for a definition (without the Karras suffix).
std::vector<std::string_view> kohya_names(const SamplerDef& d) {
    std::vector<std::string_view> names = {d.name};
    names.insert(names.end(), d.aliases.begin(), d.aliases.end());
    return names;
}

std::vector<std::string_view> a1111_names(const SamplerDef& d) {
    std::vector<std::string_view> names = {d.a1111_name};
    if (!d.a1111_karras_name.empty()) names.push_back(d.a1111_karras_name);
    return names;
}

// Throws unless `d` is complete, consistent and shares no name with `others`.
void check_definition(const SamplerDef& d, const std::vector<const SamplerDef*>& others) {
    const std::string what = gl::cat("sampler definition '", d.name, "'");
    GL_CHECK(!d.name.empty() && !d.a1111_name.empty(), what, ": needs a kohya name and an A1111 name");
    GL_CHECK(d.plan, what, ": has no plan function");
    GL_CHECK(d.takes_karras == !d.a1111_karras_name.empty(), what,
             ": takes_karras and an A1111 Karras name go together");
    GL_CHECK(d.takes_eta == !d.a1111_eta_key.empty(), what, ": takes_eta and an A1111 eta key go together");
    for (std::string_view n : kohya_names(d)) {
        GL_CHECK(!n.empty() && !n.ends_with(kKarrasSuffix), what, ": name '", n, "' is empty or ends in ",
                 kKarrasSuffix, " (the suffix that selects Karras sigmas)");
        for (const SamplerDef* o : others)
            for (std::string_view m : kohya_names(*o))
                GL_CHECK(n != m, what, ": name '", n, "' is taken by sampler '", o->name, "'");
    }
    for (std::string_view n : a1111_names(d))
        for (const SamplerDef* o : others)
            for (std::string_view m : a1111_names(*o))
                GL_CHECK(n != m, what, ": A1111 name '", n, "' is taken by sampler '", o->name, "'");
}

// sampler_list.inc's definitions, each checked against those before it.
std::vector<const SamplerDef*> listed_defs() {
    std::vector<const SamplerDef*> defs;
    for (const SamplerDef* d : kListed) {
        check_definition(*d, defs);
        defs.push_back(d);
    }
    return defs;
}

struct Registry {
    std::mutex mutex;
    std::vector<const SamplerDef*> defs = listed_defs();
};

Registry& registry() {
    static Registry r;
    return r;
}

std::vector<const SamplerDef*> registered_defs() {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    return r.defs;
}

// The kohya names of the samplers taking Karras sigmas or eta, comma separated.
std::string names_where(bool SamplerDef::*flag) {
    std::string s;
    for (const SamplerDef* d : registered_defs())
        if (d->*flag) s += gl::cat(s.empty() ? "" : ", ", d->name);
    return s;
}

}  // namespace

// ---- the registry ----

std::vector<SamplerKind> registered_samplers() {
    std::vector<SamplerKind> kinds;
    for (const SamplerDef* d : registered_defs()) kinds.emplace_back(*d);
    return kinds;
}

SamplerRegistration::SamplerRegistration(const SamplerDef& def) : def_(&def) {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    check_definition(def, r.defs);
    r.defs.push_back(def_);
}

SamplerRegistration::~SamplerRegistration() {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    r.defs.erase(std::find(r.defs.begin(), r.defs.end(), def_));
}

// ---- options and names ----

SamplerOptions SamplerOptions::diffusers_sd15(SamplerKind k) {
    SamplerOptions o;
    o.kind = k;
    o.spacing = k.def().spacing;
    o.steps_offset = 1;
    o.clip_sample = false;
    o.set_alpha_to_one = false;
    o.skip_prk_steps = true;
    return o;
}

SamplerOptions SamplerOptions::kohya(SamplerKind k) {
    SamplerOptions o;
    o.kind = k;
    o.spacing = k.def().spacing;
    o.steps_offset = 0;
    // kohya sets config.clip_sample = True on every class whose config has it; only some read it
    // in step() (DDIM and DDPM: already true by default; Heun: false by default).
    o.clip_sample = k.def().reads_clip_sample;
    o.set_alpha_to_one = k.def().set_alpha_to_one_default;
    o.skip_prk_steps = false;
    return o;
}

void SamplerOptions::validate() const {
    const SamplerDef& d = kind.def();
    GL_CHECK(!karras || d.takes_karras, "sampler ", d.name,
             ": Karras sigmas are not offered for it (diffusers' scheduler has none)");
    GL_CHECK(eta == 0.0 || d.takes_eta, "sampler ", d.name, ": eta applies to ", names_where(&SamplerDef::takes_eta),
             " only");
    GL_CHECK(std::isfinite(eta) && eta >= 0.0 && eta <= 1.0, "sampler ", d.name, ": eta ", eta, " must be in [0, 1]");
    GL_CHECK(steps_offset >= 0 && steps_offset < kTrainSteps, "sampler: steps_offset ", steps_offset,
             " must be in [0, ", kTrainSteps, ")");
}

std::string supported_sampler_names() {
    std::string s;
    for (const SamplerDef* d : registered_defs())
        for (std::string_view n : kohya_names(*d)) s += gl::cat(s.empty() ? "" : ", ", n);
    return s + gl::cat(" (and <name>", kKarrasSuffix, " for ", names_where(&SamplerDef::takes_karras), ")");
}

SamplerName parse_sampler_name(const std::string& name) {
    std::string_view base = name;
    const bool karras = base.size() > kKarrasSuffix.size() && base.ends_with(kKarrasSuffix);
    if (karras) base.remove_suffix(kKarrasSuffix.size());
    for (const SamplerDef* d : registered_defs()) {
        const std::vector<std::string_view> names = kohya_names(*d);
        if (std::find(names.begin(), names.end(), base) == names.end()) continue;
        GL_CHECK(!karras || d->takes_karras, "sampler '", name, "': ", base, " has no Karras variant; supported: ",
                 supported_sampler_names());
        return SamplerName{SamplerKind(*d), karras};
    }
    gl::fail("unknown sampler '", name, "'; supported: ", supported_sampler_names());
}

std::string a1111_sampler_name(SamplerKind k, bool karras) {
    const SamplerDef& d = k.def();
    GL_CHECK(!karras || d.takes_karras, "sampler ", d.name, ": has no Karras variant");
    return std::string(karras ? d.a1111_karras_name : d.a1111_name);
}

// ---- the sampler ----

Sampler::Sampler(const SamplerOptions& opt, int steps) : opt_(opt), steps_(steps) {
    opt_.validate();
    GL_CHECK(steps >= 1 && steps <= kTrainSteps, "sampler ", opt.kind.name(), ": steps ", steps, " must be in [1, ",
             kTrainSteps, "]");
    plan_ = opt_.kind.def().plan(opt_, steps);
}

void Sampler::run(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const {
    GL_CHECK(model, "sampler: no model function");
    GL_CHECK(!plan_->draws_noise || noise, "sampler ", opt_.kind.name(), ": needs a noise function");
    for (float& v : x) v = float(double(v) * plan_->init_noise_sigma);
    plan_->run(x, model, noise, on_step);
}

}  // namespace diffusion
