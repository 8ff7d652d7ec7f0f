// The SD1.5 step's configurations for gl::auto_fit.
#include "train/autofit.h"

#include <algorithm>
#include <map>

#include "ggml-lite/core/error.h"
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
    o.recompute = recompute;
    o.budget = budgets[bucket];
    o.cost = cost;
    return o;
}

namespace {

struct Config {
    int64_t micro = 1;
    bool adam8 = false, train_te = false, cache_te = false;
};

std::string label(const Config& c, const StepOptions& user) {
    const int64_t accum = user.batch * user.grad_accum / c.micro;
    std::string s = accum == 1 ? gl::cat("batch ", c.micro) : gl::cat("batch ", c.micro, " x ", accum, " accumulated");
    if (c.adam8) s += ", AdamW8bit";
    if (user.train_text_encoder && !c.train_te) s += ", UNet only";
    if (!c.train_te) s += c.cache_te ? ", TE cached" : ", TE on device";
    return s;
}

// auto_fit_step without the refusal: the result always, the choice only when something fits.
AutoFitChoice fit_step(const AutoFitRequest& r) {
    r.validate();
    const int64_t effective = r.step.batch * r.step.grad_accum;
    std::vector<int64_t> micro = r.micro_batches;
    if (micro.empty())
        for (int64_t b = effective; b >= 1; b--)
            if (effective % b == 0) micro.push_back(b);
    std::vector<FitBucket> buckets = r.buckets;
    if (buckets.empty()) buckets.push_back({r.step.latent_h, r.step.latent_w, 1});

    std::vector<Config> configs;
    const bool adam = std::string(r.step.optimizer.name()) == "AdamW";
    for (int64_t m : micro)
        for (bool a8 : {false, true}) {
            if (a8 && !(adam && r.allow_8bit_optimizer)) continue;
            std::vector<Config> te;
            if (r.step.train_text_encoder) te.push_back({m, a8, true, false});
            if (!r.step.train_text_encoder || r.allow_unet_only) {
                te.push_back({m, a8, false, r.cache_text_encoder});
                if (!r.cache_text_encoder && r.allow_cached_text_encoder) te.push_back({m, a8, false, true});
            }
            configs.insert(configs.end(), te.begin(), te.end());
        }

    auto step_of = [&](const Config& c, size_t bucket) {
        StepOptions o = r.step;
        o.batch = c.micro;
        o.grad_accum = int(effective / c.micro);
        o.latent_h = buckets[bucket].latent_h;
        o.latent_w = buckets[bucket].latent_w;
        o.train_text_encoder = c.train_te;
        if (c.adam8) o.optimizer = optim::parse_optimizer("AdamW8bit", r.step.optimizer.args);  // same args
        return o;
    };
    gl::PlanOptions plan;
    plan.cost = r.cost;
    std::vector<gl::FitOption> options;
    for (const Config& c : configs) {
        gl::FitOption o;
        o.label = label(c, r.step);
        o.runs = double(effective / c.micro);
        o.build = [&, c](size_t bucket) {
            std::unique_ptr<StepGraph> s = build_step(step_of(c, bucket));
            gl::FitBuild b;
            b.extra_bytes = r.reserve;  // the step's own runtime bytes: FitSettings::runtime_bytes
            if (!c.train_te && !c.cache_te) {  // the frozen text encoder runs beside the step
                const auto te = build_text_encoder(r.step.clip, r.step.precision, c.micro, r.step.clip_chunks,
                                                   r.step.clip_skip, r.step.text_encoder_format);
                const gl::Plan p = gl::make_plan(te->g, plan);
                b.extra_bytes += p.total_bytes() + (r.runtime_bytes ? r.runtime_bytes(p.graph) : 0);
                b.extra_seconds = p.predicted_seconds;
            }
            b.graph = std::move(s->g);
            return b;
        };
        options.push_back(std::move(o));
    }
    gl::FitSettings st;
    st.limit = r.vram;
    st.plan = plan;
    st.runtime_bytes = r.runtime_bytes;
    st.shapes.clear();
    for (const FitBucket& k : buckets) st.shapes.push_back({gl::cat(k.latent_w * 8, "x", k.latent_h * 8), k.images});

    AutoFitChoice ch;
    ch.result = gl::auto_fit(options, st);
    const gl::FitRow* best = ch.result.chosen();
    if (!best) return ch;
    const Config& c = configs[best->option];
    ch.step = step_of(c, 0);
    ch.step.latent_h = r.step.latent_h;
    ch.step.latent_w = r.step.latent_w;
    ch.cache_text_encoder = c.cache_te;
    ch.recompute = best->recompute;
    ch.budgets = best->budgets;
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
        extra[k] = double(r.reserve + (r.runtime_bytes ? r.runtime_bytes(st[k]->g) : 0));
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
