// The SD1.5 step's configurations for gl::auto_fit.
#include "train/autofit.h"

#include "ggml-lite/core/error.h"

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

}  // namespace

AutoFitChoice auto_fit_step(const AutoFitRequest& r) {
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
            b.extra_bytes = r.reserve + (r.workspace ? r.workspace(s->g) : 0);
            if (!c.train_te && !c.cache_te) {  // the frozen text encoder runs beside the step
                const auto te = build_text_encoder(r.step.clip, r.step.precision, c.micro, r.step.clip_chunks,
                                                   r.step.clip_skip, r.step.text_encoder_format);
                const gl::Plan p = gl::make_plan(te->g, plan);
                b.extra_bytes += p.total_bytes() + (r.workspace ? r.workspace(p.graph) : 0);
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
    st.shapes.clear();
    for (const FitBucket& k : buckets) st.shapes.push_back({gl::cat(k.latent_w * 8, "x", k.latent_h * 8), k.images});

    AutoFitChoice ch;
    ch.result = gl::auto_fit(options, st);
    const gl::FitRow* best = ch.result.chosen();
    GL_CHECK(best, "auto-fit: no configuration fits ", gl::format_bytes(r.vram), "\n", ch.result.table());
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

}  // namespace train
