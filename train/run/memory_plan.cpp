// Session: the graphs of a run and their memory, before anything is loaded. Without --vram_limit
// the user's configuration is planned as given and refused when it does not fit the device; with
// it, auto-fit chooses among the configurations the user allows by fitting each one's whole run
// (every bucket graph, the text encoder, the VAE encoder and the sampling graphs on the shared
// memory, the graph executables, the CUDA context) and the run takes the graphs and plans it
// fitted, so the final check can never refuse auto-fit's choice.
#include <algorithm>
#include <map>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/host_memory.h"
#include "ggml-lite/core/plan_svg.h"
#include "ggml-lite/dist/shard.h"
#include "train/run/session_impl.h"

namespace train {

namespace {

// The CUDA context outside every plan: measured on the H200 with CUDA 13 (538.8 MiB with eager
// runtimes, 549 MiB with the graph executables' pools: bench/RESULTS.md, sixth session).
constexpr size_t kCudaContextBytes = size_t(549) << 20;

std::string category_line(const std::string& name, size_t bytes, const std::string& note = "") {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-18s %12s", name.c_str(), gl::format_bytes(bytes).c_str());
    return std::string(buf) + (note.empty() ? "" : "   " + note) + "\n";
}

// One configuration's run, as auto-fit builds it: the graphs and the sampler beside them.
struct RunCandidate {
    StepOptions step;
    bool cache_text = false;
    std::shared_ptr<RunSampler> sampler;
    std::unique_ptr<GraphSet> graphs;
};

// How often each step shape runs in an epoch at a micro-batch (graph_shapes' shapes), and the
// epoch's optimizer updates.
// Several ranks: rank 0's runs (its slices of the global batches).
std::map<GraphShape, int64_t> shape_runs(const RunData& d, int64_t micro, int64_t downscale, int world) {
    std::map<GraphShape, int64_t> runs;
    for (const data::Bucket& b : d.buckets.buckets) {
        const int64_t n = int64_t(b.images.size()), h = b.reso.h / downscale, w = b.reso.w / downscale;
        const int64_t batch = b.batch(micro);  // several datasets: the bucket's own batch size
        const int64_t global = batch * world;
        if (n / global) runs[{h, w, batch}] += n / global;
        if (n % global) runs[{h, w, gl::dist::shard_of(n % global, world, 0).count}] += 1;
    }
    return runs;
}

// The whole-run configurations auto-fit chooses among (or the advice lists): one GraphSet per
// FitConfig, built unplanned, with the sampler's graphs beside it. The samplers (one per set of
// trained parts: the LoRA they sample) are shared by the candidates.
struct RunFitter {
    const RunConfig& c;
    const RunData& data;
    const models::ModelFiles& model;
    uint64_t seed;
    GraphSetOptions base;  // vae, rules; step and the text encoder per candidate
    size_t extra = 0;      // held outside the layout (the CUDA context, when a size is given)
    int world = 1;         // data-parallel ranks
    std::map<bool, std::shared_ptr<RunSampler>> samplers;

    std::vector<gl::FitOption> options(const std::vector<FitConfig>& configs, const StepOptions& user) {
        std::vector<gl::FitOption> out;
        for (const FitConfig& fc : configs) {
            gl::FitOption o;
            o.label = fc.label;
            o.needs = fc.needs;
            o.build = [this, fc, user] { return build(fc, user); };
            out.push_back(std::move(o));
        }
        return out;
    }

    gl::FitBuild build(const FitConfig& fc, const StepOptions& user) {
        const int64_t f = model.vae_config().downscale();
        auto cand = std::make_shared<RunCandidate>();
        cand->step = fc.step(user);
        cand->cache_text = !fc.train_te && fc.cache_te;
        std::vector<const gl::Plan*> others;
        if (c.sample_prompts) {
            std::shared_ptr<RunSampler>& s = samplers[fc.train_te];
            if (!s) s = std::make_shared<RunSampler>(c, model, cand->step, seed);
            cand->sampler = s;
            others = s->plans();
        }
        GraphSetOptions g = base;
        g.step = cand->step;
        g.text_encoder_on_device = !fc.train_te && !fc.cache_te;
        g.plan_options = [](const GraphShape&) { return gl::PlanOptions{}; };
        cand->graphs = GraphSet::unplanned(
            g, graph_shapes(data, cand->step.batch, f, cand->step.config->size_multiple(), world), others);
        const StepCounts k = count_steps(c, data, cand->step.batch, cand->step.grad_accum, world);
        gl::FitBuild b = cand->graphs->fit_build(cand, shape_runs(data, cand->step.batch, f, world),
                                                 double(std::max<int64_t>(1, k.updates_per_epoch)));
        b.extra_bytes = extra;
        return b;
    }
};

AutoFitRequest fit_request(const RunConfig& c, const StepOptions& step, bool advice) {
    AutoFitRequest r;
    r.step = step;
    r.allow_8bit_optimizer = c.allow_8bit_optimizer;
    r.allow_cached_text_encoder = c.allow_cached_text_encoder;
    r.allow_unet_only = c.allow_unet_only;
    r.cache_text_encoder = c.cache_text_encoder_outputs;
    r.advice = advice;
    return r;
}

}  // namespace

void Session::plan_for(DeviceModel device) { impl_->device = std::move(device); }

// The device as the backend sees it now (or as plan_for set it).
static DeviceModel resolve_device(const std::optional<DeviceModel>& given, gl::Backend backend) {
    if (given) return *given;
    DeviceModel d;
    if (backend == gl::Backend::cuda) {
        d.backend = "cuda";
        gl::cuda_memory_info(&d.free_bytes, &d.total_bytes);
        d.context_bytes = kCudaContextBytes;
        d.context_note = "measured (H200, CUDA 13); outside the plan";
        d.rules = gl::layout_rules("cuda");
    } else {
        d.backend = "cpu";
        d.free_bytes = gl::host_available_bytes();
        d.rules = gl::layout_rules("cpu");
    }
    return d;
}

void Session::Impl::plan_memory() {
    const RunConfig& c = cfg;
    MemoryPlan& mp = plan.memory;
    const DeviceModel dev = resolve_device(device, backend);
    const bool cuda = dev.backend == "cuda";
    mp.backend = dev.backend;
    mp.free_bytes = dev.free_bytes;
    mp.total_bytes = dev.total_bytes;
    mp.context_bytes = dev.context_bytes;
    const int64_t f = model.vae_config().downscale();
    const int mult = step.config->size_multiple();

    // A size given: the context is part of it. The free memory (or --vram_limit auto): measured
    // after the context exists, so it is spent already.
    const bool sized = c.vram_limit && *c.vram_limit != "auto";
    if (c.vram_limit && !sized)
        GL_CHECK(cuda, "--vram_limit auto reads the free memory of a CUDA device; this run is on the CPU "
                       "(give a size such as 8G)");
    mp.limit = sized ? gl::parse_bytes(*c.vram_limit) : dev.free_bytes;
    const size_t extra = sized ? mp.context_bytes : 0;
    if (sized && mp.limit <= extra)
        throw PlanRefused(gl::cat("--vram_limit ", *c.vram_limit, ": not more than the ", gl::format_bytes(extra),
                                  " the CUDA context alone holds; nothing was loaded"));

    GraphSetOptions go;
    go.vae = model.vae_config();
    go.vae_dtype = c.no_half_vae ? gl::DType::f32 : activation_dtype(step.precision);
    go.vae_on_device = !c.cache_latents;
    go.rules = dev.rules;
    std::string recompute = c.gradient_checkpointing ? "blocks (--gradient_checkpointing)" : "none";
    message("planning the graphs");
    if (c.vram_limit) {
        RunFitter fitter{c, data, model, seed, go, extra, world(), {}};
        const std::vector<gl::FitOption> options = fitter.options(fit_configs(fit_request(c, step, false)), step);
        gl::FitSettings st;
        st.limit = mp.limit;
        st.rules = dev.rules;
        gl::FitResult fit = gl::auto_fit(options, st);
        mp.choice = "auto-fit (--vram_limit " + *c.vram_limit + "):\n" + fit.table();
        if (!fit.chosen())
            throw PlanRefused(gl::cat("--vram_limit ", *c.vram_limit, ": no configuration allowed fits ",
                                      gl::format_bytes(mp.limit), "; nothing was loaded.\n", advice(go, extra)));
        auto cand = std::static_pointer_cast<RunCandidate>(fit.choice.build.owner);
        cand->graphs->adopt(std::move(fit.choice.plans), std::move(fit.choice.layout));
        step = cand->step;
        cache_text = cand->cache_text;
        sampler = cand->sampler;
        graphs = std::move(cand->graphs);
        recompute = fit.chosen()->recompute == gl::Recompute::none ? "none" : "budget (auto-fit)";
        mp.predicted_seconds = fit.chosen()->seconds;
    } else {
        gl::PlanOptions po;
        po.recompute = c.gradient_checkpointing ? gl::Recompute::blocks : gl::Recompute::none;
        go.step = step;
        go.text_encoder_on_device = !step.train_text_encoder && !cache_text;
        go.plan_options = [po](const GraphShape&) { return po; };
        std::vector<const gl::Plan*> others;
        if (c.sample_prompts) {
            sampler = std::make_shared<RunSampler>(c, model, step, seed);
            others = sampler->plans();
        }
        graphs = std::make_unique<GraphSet>(go, graph_shapes(data, step.batch, f, mult, world()), others);
    }
    plan.counts = count_steps(c, data, step.batch, step.grad_accum, world());

    const gl::SharedLayout& L = graphs->layout();
    mp.planned_bytes = L.total_bytes();
    mp.predicted_peak = mp.planned_bytes + mp.context_bytes;
    const GraphSet::Step& big = graphs->steps()[graphs->largest_step()];
    mp.largest_step = big.shape.label(f);
    mp.largest_step_report = big.plan.report();
    mp.largest_step_timeline_svg = gl::timeline_svg(big.plan, nullptr, "step " + mp.largest_step);
    auto arena = [&](gl::Category k) { return L.arena_bytes[size_t(k)]; };
    std::string& t = mp.by_category;
    t = gl::cat("memory plan (", mp.backend, device ? ", simulated" : "", "; the whole run: ", graphs->steps().size(),
                " step graphs", graphs->text().empty() ? "" : gl::cat(", ", graphs->text().size(), " text encoder"),
                graphs->vae().empty() ? "" : gl::cat(", ", graphs->vae().size(), " VAE encoder"),
                sampler ? gl::cat(", ", sampler->plans().size(), " sampling") : "", " on one memory; largest step ",
                big.shape.label(f), ", recompute ", recompute, "):\n");
    t += category_line("frozen weights", arena(gl::Category::frozen));
    t += category_line(big.graph->net->title() + " + grads", arena(gl::Category::trainable));
    t += category_line("optimizer state", arena(gl::Category::optimizer), step.optimizer.name());
    t += category_line("activations", arena(gl::Category::activations), "the largest graph's");
    t += category_line("workspace", arena(gl::Category::workspace) + L.scratch_bytes);
    if (cuda) {
        t += category_line("CUDA graphs", L.runtime_bytes, "the runtimes' graph executables, allocation page");
        t += category_line("CUDA context", mp.context_bytes, dev.context_note);
    }
    const char* where = c.vram_limit ? " (--vram_limit)" : cuda ? " free" : " of available host memory";
    t += category_line("predicted peak", mp.predicted_peak,
                       mp.limit ? gl::cat("of ", gl::format_bytes(mp.limit), where) : std::string("(no limit known)"));
    const std::string ranks =
        world() > 1 ? gl::cat(" per rank x ", world(), " ranks (", comm->name(), "; effective batch ",
                              step.batch * world() * step.grad_accum, ")")
                    : std::string();
    plan.configuration =
        gl::cat("micro-batch ", step.batch, " x ", step.grad_accum, " accumulation", ranks, ", recompute ", recompute, ", ",
                step.optimizer.name(), ", ", precision_name(step.precision), ", text encoder ",
                step.train_text_encoder ? "trained" : cache_text ? "frozen, outputs cached" : "frozen, run each step",
                ", latents ", c.cache_latents ? "cached" : "encoded each step", ", ", graphs->steps().size(),
                " step graphs");
    const size_t need = mp.planned_bytes + extra;
    if (mp.limit && need > mp.limit)
        throw PlanRefused("memory: " +
                          gl::cat("the plan needs ", gl::format_bytes(need), ", more than the ", gl::format_bytes(mp.limit),
                                  c.vram_limit ? " of --vram_limit" : cuda ? " free" : " of available host memory") +
                          "; nothing was loaded.\n" + mp.by_category + advice(go, extra));
}

// What would fit the limit: every change of the configuration (each naming the flag it needs
// when it is not allowed), fitted as the run would be, then smaller resolutions.
std::string Session::Impl::advice(const GraphSetOptions& base, size_t extra) {
    const RunConfig& c = cfg;
    const size_t limit = plan.memory.limit;
    const int64_t f = model.vae_config().downscale();
    const int mult = step.config->size_multiple();
    std::string s;
    RunFitter fitter{c, data, model, seed, base, extra, world(), {}};
    std::vector<gl::FitOption> options = fitter.options(fit_configs(fit_request(c, step, true)), step);
    if (!c.vram_limit)
        for (gl::FitOption& o : options) o.needs = o.needs.empty() ? "--vram_limit" : "--vram_limit " + o.needs;
    gl::FitSettings st;
    st.limit = limit;
    st.rules = base.rules;
    st.plan_all = true;
    s += "changes that would fit (batch with accumulation, recompute, 8-bit optimizer (--optimizer_type AdamW8bit), "
         "UNet only (--network_train_unet_only), cached text encoder (--cache_text_encoder_outputs); "
         "--vram_limit picks among those its --allow_* flags allow):\n";
    try {
        s += gl::auto_fit(options, st).table(true);
    } catch (const gl::Error& e) {
        s += std::string(e.what()) + "\n";
    }
    // The largest bucket at smaller square resolutions, with the user's configuration.
    int64_t side = 0;
    for (const data::Bucket& b : data.buckets.buckets) side = std::max<int64_t>({side, b.reso.w, b.reso.h});
    const int64_t m = int64_t(mult) * f;
    gl::PlanOptions po;
    po.recompute = c.gradient_checkpointing ? gl::Recompute::blocks : gl::Recompute::none;
    for (int64_t px = (side / m - 1) * m; px >= std::max<int64_t>(m, 256); px -= m) {
        StepOptions o = step;
        o.latent_h = o.latent_w = px / f;
        const gl::Plan p = gl::make_plan(build_step(o)->g, po);
        const size_t peak = p.total_bytes() + base.rules.scratch_of(p.graph) + base.rules.graph_of(p.graph) +
                            base.rules.page + extra;
        if (peak <= limit) {
            s += gl::cat("or a smaller resolution: --resolution ", px, " (--max_bucket_reso ", px,
                         "): its step alone predicted at ", gl::format_bytes(peak), "\n");
            break;
        }
    }
    return s;
}

}  // namespace train
