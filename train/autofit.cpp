// The SD1.5 step's configurations for gl::auto_fit.
#include "train/autofit.h"

#include <algorithm>
#include <map>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/recompute_budget.h"

namespace train {

void AutoFitRequest::validate() const {
    step.validate();
    GL_CHECK(vram > 0, "auto-fit: vram is 0");
    GL_CHECK(reserve < vram, "auto-fit: the reserve (", gl::format_bytes(reserve), ") leaves nothing of vram (",
             gl::format_bytes(vram), ")");
    const int64_t effective = step.batch * step.grad_accum;
    for (int64_t b : micro_batches)
        GL_CHECK(b >= 1 && effective % b == 0, "auto-fit: micro-batch ", b, " does not divide the effective batch ",
                 effective, " (batch ", step.batch, " x accumulation ", step.grad_accum, ")");
    for (const FitBucket& k : buckets) {
        StepOptions o = step;
        o.latent_h = k.latent_h;
        o.latent_w = k.latent_w;
        o.validate();
        GL_CHECK(k.images > 0, "auto-fit: bucket ", k.latent_h * 8, "x", k.latent_w * 8, " has no images");
    }
}

gl::PlanOptions AutoFitChoice::plan_options(size_t bucket) const {
    GL_CHECK(bucket < budgets.size(), "auto-fit: bucket ", bucket, " of ", budgets.size());
    gl::PlanOptions o;
    o.recompute = budgets[bucket] ? gl::Recompute::budget : gl::Recompute::none;
    o.budget = budgets[bucket];
    o.cost = cost;
    return o;
}

StepOptions FitConfig::step(const StepOptions& user) const {
    StepOptions o = user;
    const int64_t effective = user.batch * user.grad_accum;
    o.batch = micro;
    o.grad_accum = int(effective / micro);
    o.train_text_encoder = train_te;
    if (adam8) o.optimizer = optim::parse_optimizer("AdamW8bit", user.optimizer.args);  // same args
    return o;
}

std::vector<FitConfig> fit_configs(const AutoFitRequest& r) {
    const int64_t effective = r.step.batch * r.step.grad_accum;
    std::vector<int64_t> micro = r.micro_batches;
    if (micro.empty())
        for (int64_t b = effective; b >= 1; b--)
            if (effective % b == 0) micro.push_back(b);
    const bool adam = std::string(r.step.optimizer.name()) == "AdamW";
    auto needs = [](std::initializer_list<std::pair<bool, const char*>> flags) {
        std::string s;
        for (const auto& [need, flag] : flags) {
            if (!need) continue;
            if (!s.empty()) s += ' ';
            s += flag;
        }
        return s;
    };
    std::vector<FitConfig> out;
    for (int64_t m : micro)
        for (bool a8 : {false, true}) {
            if (a8 && !adam) continue;
            std::vector<FitConfig> te;
            if (r.step.train_text_encoder) te.push_back(FitConfig{m, a8, true, false, {}, {}});
            te.push_back(FitConfig{m, a8, false, r.cache_text_encoder, {}, {}});
            if (!r.cache_text_encoder) te.push_back(FitConfig{m, a8, false, true, {}, {}});
            for (FitConfig& c : te) {
                const bool unet_only = r.step.train_text_encoder && !c.train_te;
                const bool cached = !c.train_te && c.cache_te && !r.cache_text_encoder;
                c.needs = needs({{a8 && !r.allow_8bit_optimizer, "--allow_8bit_optimizer"},
                                 {unet_only && !r.allow_unet_only, "--allow_unet_only"},
                                 {cached && !r.allow_cached_text_encoder, "--allow_cached_text_encoder"}});
                if (!c.needs.empty() && !r.advice) continue;
                const int64_t accum = effective / m;
                c.label = accum == 1 ? gl::cat("batch ", m) : gl::cat("batch ", m, " x ", accum, " accumulated");
                if (a8) c.label += ", AdamW8bit";
                if (unet_only) c.label += ", UNet only";
                if (!c.train_te) c.label += c.cache_te ? ", TE cached" : ", TE on device";
                out.push_back(std::move(c));
            }
        }
    return out;
}

namespace {

// The graphs of one configuration: a step per bucket (recomputable), the frozen text encoder
// beside them when it runs on the device.
struct StepGraphs {
    std::vector<std::unique_ptr<StepGraph>> steps;
    std::unique_ptr<TextEncoderGraph> text;
};

// auto_fit_step without the refusal: the result always, the choice only when something fits.
AutoFitChoice fit_step(const AutoFitRequest& r) {
    r.validate();
    std::vector<FitBucket> buckets = r.buckets;
    if (buckets.empty()) buckets.push_back({r.step.latent_h, r.step.latent_w, 1});
    double images = 0;
    for (const FitBucket& k : buckets) images += k.images;

    const std::vector<FitConfig> configs = fit_configs(r);
    std::vector<gl::FitOption> options;
    for (const FitConfig& c : configs) {
        gl::FitOption o;
        o.label = c.label;
        o.needs = c.needs;
        o.build = [&, c] {
            auto owned = std::make_shared<StepGraphs>();
            const StepOptions so = c.step(r.step);
            owned->steps.resize(buckets.size());
            gl::parallel_for(int64_t(buckets.size()), 1, [&](int64_t lo, int64_t hi) {
                for (int64_t k = lo; k < hi; k++) {
                    StepOptions o = so;
                    o.latent_h = buckets[size_t(k)].latent_h;
                    o.latent_w = buckets[size_t(k)].latent_w;
                    owned->steps[size_t(k)] = build_step(o);
                }
            });
            gl::FitBuild b;
            b.extra_bytes = r.reserve;
            for (size_t k = 0; k < buckets.size(); k++)
                b.graphs.push_back({&owned->steps[k]->g,
                                    gl::cat("step ", buckets[k].latent_w * 8, "x", buckets[k].latent_h * 8, " batch ", so.batch),
                                    true, so.grad_accum * buckets[k].images / images, -1});
            if (!c.train_te && !c.cache_te) {  // the frozen text encoder runs beside the step
                owned->text = build_text_encoder(*r.step.config, r.step.precision, c.micro, r.step.clip_chunks,
                                                 r.step.clip_skip, r.step.text_encoder_format);
                b.graphs.push_back({&owned->text->g, "text encoder", false, double(so.grad_accum), -1});
            }
            b.owner = owned;
            return b;
        };
        options.push_back(std::move(o));
    }
    gl::FitSettings st;
    st.limit = r.vram;
    st.plan.cost = r.cost;
    st.rules = r.rules;

    AutoFitChoice ch;
    ch.result = gl::auto_fit(options, st);
    const gl::FitRow* best = ch.result.chosen();
    if (!best) return ch;
    const FitConfig& c = configs[best->option];
    ch.step = c.step(r.step);
    ch.cache_text_encoder = c.cache_te;
    ch.recompute = best->recompute;
    for (size_t k = 0; k < buckets.size(); k++) {
        const gl::Plan& p = ch.result.choice.plans[k];
        ch.budgets.push_back(p.options.recompute == gl::Recompute::budget ? p.options.budget : 0);
    }
    ch.cost = r.cost;
    return ch;
}

// The largest b in [1, cap] with ok(b) (0: not even 1), galloping from a guess and then bisecting;
// it assumes ok holds up to some batch and not after.
int64_t largest_true(int64_t guess, int64_t cap, const std::function<bool(int64_t)>& ok) {
    int64_t lo = 0, hi = cap + 1;  // ok(lo) (0: vacuously), not ok(hi) (cap + 1: vacuously)
    guess = std::clamp<int64_t>(guess, 1, cap);
    if (ok(guess)) {
        lo = guess;
        for (int64_t step = 1; lo < cap; step *= 2) {
            const int64_t b = std::min(cap, lo + step);
            if (!ok(b)) {
                hi = b;
                break;
            }
            lo = b;
        }
    } else {
        hi = guess;
        for (int64_t step = 1; hi > 1; step *= 2) {
            const int64_t b = std::max<int64_t>(1, hi - step);
            if (ok(b)) {
                lo = b;
                break;
            }
            hi = b;
        }
    }
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (ok(mid) ? lo : hi) = mid;
    }
    return lo;
}

}  // namespace

AutoFitChoice auto_fit_step(const AutoFitRequest& r) {
    AutoFitChoice ch = fit_step(r);
    GL_CHECK(ch.result.chosen(), "auto-fit: no configuration fits ", gl::format_bytes(r.vram), "\n", ch.result.table());
    return ch;
}

BatchFit largest_batch(const AutoFitRequest& r, const BatchSearch& s) {
    GL_CHECK(s.max_slowdown >= 1, "largest batch: the slowdown allowed is ", s.max_slowdown, " (at least 1)");
    GL_CHECK(s.max_batch >= 1, "largest batch: the largest batch to try is ", s.max_batch);
    AutoFitRequest base = r;
    base.step.batch = 1;
    base.step.grad_accum = 1;
    base.micro_batches.clear();
    base.validate();

    struct Probe {
        AutoFitChoice choice;
        double seconds = 0, none_seconds = 0;
        bool fits() const { return choice.result.chosen() != nullptr; }
        double slowdown() const { return seconds / none_seconds; }
    };
    std::map<int64_t, Probe> probes;
    auto probe = [&](int64_t b) -> const Probe& {
        if (auto it = probes.find(b); it != probes.end()) return it->second;
        AutoFitRequest q = base;
        q.step.batch = b;
        q.micro_batches = {b};
        Probe p;
        p.choice = fit_step(q);
        if (const gl::FitRow* row = p.choice.result.chosen()) {
            p.seconds = row->seconds;
            p.none_seconds = row->seconds - row->recompute_seconds;  // the same nodes, none repeated
        }
        return probes.emplace(b, std::move(p)).first->second;
    };

    // Guesses, from the largest bucket's step at batches 2 and 4: memory is about affine in the
    // batch, and the recompute frontier's shape (the share of the activations a slowdown keeps)
    // about the same at every batch.
    StepOptions big = base.step;
    if (!base.buckets.empty()) {
        const FitBucket& k = *std::max_element(base.buckets.begin(), base.buckets.end(), [](const auto& a, const auto& b) {
            return a.latent_h * a.latent_w < b.latent_h * b.latent_w;
        });
        big.latent_h = k.latent_h;
        big.latent_w = k.latent_w;
    }
    gl::PlanOptions po;
    po.cost = r.cost;
    double none_bytes[2], extra[2];
    std::unique_ptr<StepGraph> st[2];
    for (int k = 0; k < 2; k++) {
        big.batch = 2 + 2 * k;
        st[k] = build_step(big);
        extra[k] = double(r.reserve + r.rules.scratch_of(st[k]->g) + r.rules.graph_of(st[k]->g) + r.rules.page);
        none_bytes[k] = double(gl::make_plan(st[k]->g, po).total_bytes()) + extra[k];
    }
    gl::RecomputeSearch search(st[1]->g, po);
    const std::vector<gl::BudgetStep>& steps = search.frontier();
    double slow_bytes = none_bytes[1], least_bytes = none_bytes[1];
    for (const gl::BudgetStep& x : steps) {
        least_bytes = std::min(least_bytes, double(x.total_bytes) + extra[1]);
        if (x.predicted_seconds <= s.max_slowdown * steps[0].predicted_seconds)
            slow_bytes = std::min(slow_bytes, double(x.total_bytes) + extra[1]);
    }
    const double per_image = std::max(1.0, (none_bytes[1] - none_bytes[0]) / 2), fixed = none_bytes[0] - 2 * per_image;
    const double room = double(r.vram) - fixed, activations = std::max(1.0, none_bytes[1] - fixed);
    auto guess = [&](double bytes_at_4) {  // the batch whose activations, in that share, fill the room
        const double share = std::clamp((bytes_at_4 - fixed) / activations, 0.01, 1.0);
        return int64_t(std::clamp(room / (per_image * share), 1.0, double(s.max_batch)));
    };

    BatchFit f;
    f.batch = largest_true(guess(slow_bytes), s.max_batch, [&](int64_t b) {
        const Probe& p = probe(b);
        return p.fits() && p.slowdown() <= s.max_slowdown * (1 + 1e-12);
    });
    if (f.batch > 0) {
        const Probe& p = probe(f.batch);
        f.choice = p.choice;
        f.seconds = p.seconds;
        f.none_seconds = p.none_seconds;
    }
    if (s.any_recompute) {
        f.any_batch = largest_true(std::max(f.batch, guess(least_bytes)), s.max_batch,
                                   [&](int64_t b) { return probe(b).fits(); });
        if (f.any_batch > 0) {
            f.any_seconds = probe(f.any_batch).seconds;
            f.any_none_seconds = probe(f.any_batch).none_seconds;
        }
    }
    const Probe& one = probe(1);
    f.batch1_needs_recompute = !one.fits() || one.choice.recompute != gl::Recompute::none;
    f.probes = int(probes.size());
    return f;
}

}  // namespace train
