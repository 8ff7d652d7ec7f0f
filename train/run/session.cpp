// Session: the plan before the run (everything here runs without reading a weight).
#include <algorithm>
#include <random>
#include <set>

#include "ggml-lite/io/sha256.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/plan_svg.h"
#include "train/run/save.h"
#include "train/run/session_impl.h"

namespace train {

namespace {

// The CUDA context outside every plan: measured on the H200 with CUDA 13 (train/autofit.h).
constexpr size_t kCudaContextBytes = size_t(549) << 20;

std::string category_line(const char* name, size_t bytes, const std::string& note = "") {
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-18s %12s", name, gl::format_bytes(bytes).c_str());
    return std::string(buf) + (note.empty() ? "" : "   " + note) + "\n";
}

// kohya's --dim_from_weights: the rank (and LoCon's conv rank) and alpha of the file's modules.
void dims_from_file(RunConfig& c, const std::string& path) {
    const gl::io::SafetensorsFile f(path);
    std::set<int64_t> ranks, conv_ranks;
    std::optional<float> alpha, conv_alpha;
    for (const gl::io::TensorInfo& t : f.list()) {
        const std::string suffix = ".lora_down.weight";
        if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix))
            continue;
        const bool conv = t.shape.size() == 4 && (t.shape[2] > 1 || t.shape[3] > 1);
        (conv ? conv_ranks : ranks).insert(t.shape.at(0));
        const std::string a = t.name.substr(0, t.name.size() - suffix.size()) + ".alpha";
        if (f.has(a) && !(conv ? conv_alpha : alpha)) {
            float v = 0;
            f.read(a, &v, gl::DType::f32);
            (conv ? conv_alpha : alpha) = v;
        }
    }
    GL_CHECK(ranks.size() == 1 && conv_ranks.size() <= 1, "--dim_from_weights ", path, ": ",
             ranks.empty() ? "holds no lora_down weights" : "its modules have different ranks",
             " (give --network_dim and --network_args conv_dim instead)");
    c.network_dim = int(*ranks.begin());
    if (alpha) c.network_alpha = *alpha;
    if (!conv_ranks.empty()) {
        std::erase_if(c.network_args, [](const std::string& a) { return a.rfind("conv_", 0) == 0; });
        c.network_args.push_back(gl::cat("conv_dim=", *conv_ranks.begin()));
        if (conv_alpha) c.network_args.push_back(gl::cat("conv_alpha=", *conv_alpha));
    }
    c.note(gl::cat("--dim_from_weights: rank ", *c.network_dim, ", alpha ", c.network_alpha,
                   conv_ranks.empty() ? std::string() : gl::cat(", conv rank ", *conv_ranks.begin())));
}

}  // namespace

std::string run_identity(const RunData& d, uint64_t seed, int64_t micro_batch, int accum) {
    gl::io::Sha256 h;
    auto update = [](gl::io::Sha256& sha, const std::string& s) { sha.update(s.data(), s.size()); };
    update(h, gl::cat("seed ", seed, "|micro ", micro_batch, "|accum ", accum, "|"));
    for (const data::ImageEntry& e : d.dataset.images)
        update(h, gl::cat(e.path.string(), "|", e.num_repeats, "|", e.is_reg, "|"));
    for (const data::Bucket& b : d.buckets.buckets)
        update(h, gl::cat(b.reso.w, "x", b.reso.h, ":", b.images.size(), "|"));
    return h.hex();
}

std::string RunPlan::text() const {
    std::string s = dataset;
    s += "steps:\n" + counts.arithmetic;
    s += "configuration: " + configuration + "\n";
    s += memory.by_category;
    if (!memory.choice.empty()) s += memory.choice;
    for (const std::string& n : notes) s += "note: " + n + "\n";
    for (const std::string& w : warnings) s += "warning: " + w + "\n";
    return s;
}

Session::Session(RunConfig config, RunObserver* observer) : impl_(std::make_unique<Impl>()) {
    impl_->cfg = std::move(config);
    impl_->obs = observer ? observer : &impl_->quiet;
    impl_->cfg.validate();
}

Session::~Session() = default;

const RunConfig& Session::config() const { return impl_->cfg; }

StepOptions Session::Impl::base_step() const {
    StepOptions so;
    so.unet = model.unet_cfg;
    so.clip = model.clip_cfg;
    so.precision = cfg.precision();
    so.base_format = cfg.unet_base_format();
    so.text_encoder_format = cfg.text_encoder_base_format();
    so.batch = data.dataset.config.batch_size;
    so.train_text_encoder = cfg.train_text_encoder();
    so.train_unet = cfg.train_unet();
    so.clip_chunks = cfg.clip_chunks();
    so.context_tokens = int64_t(so.clip_chunks) * 75 + 2;
    so.clip_skip = cfg.clip_skip.value_or(1);
    so.lora = cfg.lora_config();
    so.prediction = cfg.objective().prediction;
    so.loss = cfg.objective().loss;
    so.grad_accum = cfg.gradient_accumulation_steps;
    so.unet_lr = float(cfg.unet_learning_rate());
    so.text_encoder_lr = float(cfg.text_encoder_learning_rate());
    so.optimizer = cfg.optimizer();
    so.max_grad_norm = float(cfg.max_grad_norm);
    GL_CHECK(so.clip_skip <= so.clip.layers, "--clip_skip ", so.clip_skip, ": the text encoder has ", so.clip.layers,
             " layers");
    return so;
}

const RunPlan& Session::prepare() {
    Impl& m = *impl_;
    if (m.prepared) return m.plan;
    const RunConfig& c = m.cfg;
    check_output_dir(c.output_dir);
    if (c.resume) m.resume = read_run_position(*c.resume);
    if (c.network_weights) {
        std::error_code ec;
        GL_CHECK(std::filesystem::is_regular_file(*c.network_weights, ec), "--network_weights ", *c.network_weights,
                 ": not a file");
        if (c.dim_from_weights) {
            dims_from_file(m.cfg, *c.network_weights);
            m.cfg.validate();
        }
    }
    m.message("opening the model " + c.pretrained_model_name_or_path);
    m.model = sd::open_sd15(c.pretrained_model_name_or_path);
    m.message("reading the dataset");
    m.data = load_run_data(c);
    m.plan.dataset = dataset_summary(m.data);
    m.plan.skipped = skipped_before_training(m.data);
    m.plan.notes = c.notes;
    m.plan.warnings = m.data.warnings;
    std::string why;
    m.backend = gl::resolve_backend(c.backend, &why);
    if (!why.empty() && c.backend == gl::Backend::automatic) m.plan.notes.push_back("running on the CPU: " + why);
    m.step = m.base_step();
    m.cache_text = c.cache_text_encoder_outputs;
    // The seed: given, else the resumed run's, else drawn (kohya draws one too and records it).
    if (c.seed) m.seed = *c.seed;
    else if (m.resume) m.seed = m.resume->seed;
    else m.seed = std::random_device{}() & 0xffffffffu;
    m.plan_memory();

    if (m.resume) {
        GL_CHECK(m.resume->seed == m.seed, "--resume ", *c.resume, ": the state was trained with --seed ",
                 m.resume->seed, ", this run has --seed ", m.seed);
        GL_CHECK(m.resume->run_identity == run_identity(m.data, m.seed, m.step.batch, m.step.grad_accum),
                 "--resume ", *c.resume, ": the dataset, buckets, batch size or gradient accumulation differ from the "
                 "run that saved the state (its data order cannot be continued)");
        GL_CHECK(m.resume->step < m.plan.counts.max_train_steps, "--resume ", *c.resume, ": the state is at step ",
                 m.resume->step, ", the run ends at ", m.plan.counts.max_train_steps);
    }
    m.cfg.seed = m.seed;  // the configuration shows the seed the run uses
    m.plan.config = config_sections(m.cfg);
    m.prepared = true;
    m.obs->on_plan(m.plan);
    return m.plan;
}

void Session::Impl::plan_memory() {
    const RunConfig& c = cfg;
    MemoryPlan& mp = plan.memory;
    mp.backend = backend == gl::Backend::cuda ? "cuda" : "cpu";
    const bool cuda = backend == gl::Backend::cuda;
    if (cuda) {
        gl::cuda_memory_info(&mp.free_bytes, &mp.total_bytes);
        mp.context_bytes = kCudaContextBytes;
    }
    const int64_t f = model.vae_cfg.downscale();
    const std::vector<BucketShare> shares = bucket_shares(data, f);
    auto bucket_of = [&](const GraphShape& s) {
        for (size_t i = 0; i < shares.size(); i++)
            if (shares[i].latent_h == s.latent_h && shares[i].latent_w == s.latent_w) return i;
        return size_t(0);
    };
    // Auto-fit sizes the step graphs; the run's shared memory also holds what the other graphs
    // need (the VAE encoder or text encoder weights on the device, the sampling graphs). When that
    // puts the whole layout over the limit, fit again with the excess reserved (a few rounds).
    const StepOptions user_step = step;
    const bool user_cache_text = cache_text;
    size_t fit_extra = 0;
    std::string recompute;
    std::vector<const gl::Plan*> sampling;
    for (int fit_round = 0;; fit_round++) {
        step = user_step;
        cache_text = user_cache_text;
        GraphSetOptions go;
        go.vae = model.vae_cfg;
        go.vae_dtype = c.no_half_vae ? gl::DType::f32 : activation_dtype(step.precision);
        go.vae_on_device = !c.cache_latents;
        go.backend = mp.backend;

        std::function<gl::PlanOptions(const GraphShape&)> plan_options;
        recompute = c.gradient_checkpointing ? "blocks (--gradient_checkpointing)" : "none";
        if (c.vram_limit) {
            AutoFitRequest r;
            r.step = step;
            for (const BucketShare& b : shares) r.buckets.push_back({b.latent_h, b.latent_w, b.images});
            if (*c.vram_limit == "auto") {
                GL_CHECK(cuda, "--vram_limit auto reads the free memory of a CUDA device; this run is on the CPU "
                               "(give a size such as 8G)");
                r.vram = mp.free_bytes;
            } else {
                r.vram = gl::parse_bytes(*c.vram_limit);
                r.reserve = mp.context_bytes;
        }
        r.reserve += fit_extra;
        {
            }
            mp.limit = r.vram;
            if (cuda) r.runtime_bytes = [](const gl::Graph& g) { return gl::cuda_runtime_bytes(g); };
            r.allow_8bit_optimizer = c.allow_8bit_optimizer;
            r.allow_cached_text_encoder = c.allow_cached_text_encoder;
            r.allow_unet_only = c.allow_unet_only;
            r.cache_text_encoder = c.cache_text_encoder_outputs;
            AutoFitChoice ch;
            try {
                ch = auto_fit_step(r);
            } catch (const gl::Error& e) {
                throw PlanRefused(gl::cat("--vram_limit ", *c.vram_limit, ": ", e.what()));
            }
            mp.choice = "auto-fit (--vram_limit " + *c.vram_limit + "):\n" + ch.result.table();
            step.batch = ch.step.batch;
            step.grad_accum = ch.step.grad_accum;
            step.optimizer = ch.step.optimizer;
            step.train_text_encoder = ch.step.train_text_encoder;
            cache_text = ch.cache_text_encoder;
            recompute = ch.recompute == gl::Recompute::none ? "none" : "budget (auto-fit)";
            plan_options = [ch, bucket_of](const GraphShape& s) { return ch.plan_options(bucket_of(s)); };
        } else {
            gl::PlanOptions po;
            po.recompute = c.gradient_checkpointing ? gl::Recompute::blocks : gl::Recompute::none;
            plan_options = [po](const GraphShape&) { return po; };
            if (cuda) mp.limit = mp.free_bytes;
        }
        go.step = step;
        go.text_encoder_on_device = !step.train_text_encoder && !cache_text;
        go.plan_options = plan_options;
        plan.counts = count_steps(c, data, step.batch, step.grad_accum);
        message("planning the graphs");
        sampling.clear();
        if (c.sample_prompts) {
            sampler = std::make_unique<RunSampler>(c, model, step, seed);
            sampling = sampler->plans();
        }
        graphs = std::make_unique<GraphSet>(go, graph_shapes(data, step.batch, f, step.unet.size_multiple()), sampling);
        if (!c.vram_limit || fit_round == 3) break;
        const size_t total = graphs->layout().total_bytes() + (*c.vram_limit == "auto" ? 0 : mp.context_bytes);
        if (total <= mp.limit) break;
        fit_extra += total - mp.limit;
    }

    const gl::SharedLayout& L = graphs->layout();
    mp.planned_bytes = L.total_bytes();
    mp.predicted_peak = mp.planned_bytes + mp.context_bytes;
    const GraphSet::Step& big = graphs->steps()[graphs->largest_step()];
    mp.largest_step = big.shape.label(f);
    mp.largest_step_report = big.plan.report();
    mp.largest_step_timeline_svg = gl::timeline_svg(big.plan, nullptr, "step " + mp.largest_step);
    auto arena = [&](gl::Category k) { return L.arena_bytes[size_t(k)]; };
    std::string& t = mp.by_category;
    t = gl::cat("memory plan (", mp.backend, "; the whole run: ", graphs->steps().size(), " step graphs",
                graphs->text().empty() ? "" : gl::cat(", ", graphs->text().size(), " text encoder"),
                graphs->vae().empty() ? "" : gl::cat(", ", graphs->vae().size(), " VAE encoder"),
                sampling.empty() ? "" : gl::cat(", ", sampling.size(), " sampling"),
                " on one memory; largest step ", big.shape.label(f), ", recompute ", recompute, "):\n");
    t += category_line("frozen weights", arena(gl::Category::frozen));
    t += category_line("LoRA + grads", arena(gl::Category::trainable));
    t += category_line("optimizer state", arena(gl::Category::optimizer), step.optimizer.name());
    t += category_line("activations", arena(gl::Category::activations), "the largest graph's");
    t += category_line("workspace", arena(gl::Category::workspace) + L.scratch_bytes);
    if (cuda) {
        t += category_line("CUDA graphs", L.runtime_bytes, "the runtimes' graph executables, allocation page");
        t += category_line("CUDA context", mp.context_bytes, "measured (H200, CUDA 13); outside the plan");
    }
    t += category_line("predicted peak", mp.predicted_peak,
                       mp.limit ? gl::cat("of ", gl::format_bytes(mp.limit), c.vram_limit ? " (--vram_limit)" : " free")
                                : std::string("(no device limit on the CPU)"));
    plan.configuration =
        gl::cat("micro-batch ", step.batch, " x ", step.grad_accum, " accumulation, recompute ", recompute, ", ",
                step.optimizer.name(), ", ", precision_name(step.precision), ", text encoder ",
                step.train_text_encoder ? "trained" : cache_text ? "frozen, outputs cached" : "frozen, run each step",
                ", latents ", c.cache_latents ? "cached" : "encoded each step", ", ", graphs->steps().size(),
                " step graphs");
    // Against --vram_limit the context is part of the limit; against the free memory it is spent.
    const size_t need = c.vram_limit && *c.vram_limit != "auto" ? mp.predicted_peak : mp.planned_bytes;
    if (mp.limit && need > mp.limit)
        throw PlanRefused(refusal(gl::cat("the plan needs ", gl::format_bytes(need), ", more than the ",
                                          gl::format_bytes(mp.limit), c.vram_limit ? " of --vram_limit" : " free")));
}

std::string Session::Impl::refusal(const std::string& why) {
    std::string s = "memory: " + why + "; nothing was loaded.\n" + plan.memory.by_category;
    // What would fit: auto-fit over every change the user may make, then smaller resolutions.
    AutoFitRequest r;
    r.step = step;
    const int64_t f = model.vae_cfg.downscale();
    for (const BucketShare& b : bucket_shares(data, f)) r.buckets.push_back({b.latent_h, b.latent_w, b.images});
    r.vram = plan.memory.limit;
    r.allow_8bit_optimizer = r.allow_cached_text_encoder = r.allow_unet_only = true;
    r.cache_text_encoder = cache_text;
    if (plan.memory.backend == "cuda") r.runtime_bytes = [](const gl::Graph& g) { return gl::cuda_runtime_bytes(g); };
    s += "changes that would fit (batch with accumulation, recompute, 8-bit optimizer (--optimizer_type AdamW8bit), "
         "UNet only (--network_train_unet_only), cached text encoder (--cache_text_encoder_outputs); "
         "--vram_limit picks among them):\n";
    try {
        s += auto_fit_step(r).result.table();
    } catch (const gl::Error& e) {
        s += std::string(e.what()) + "\n";
    }
    // The largest bucket at smaller square resolutions, with the user's configuration.
    const GraphShape big = graphs->steps()[graphs->largest_step()].shape;
    const int64_t side = std::max(big.latent_h, big.latent_w) * f, m = int64_t(step.unet.size_multiple()) * f;
    for (int64_t px = (side / m - 1) * m; px >= std::max<int64_t>(m, 256); px -= m) {
        StepOptions o = step;
        o.latent_h = o.latent_w = px / f;
        const gl::Plan p = gl::make_plan(build_step(o)->g, graphs->options().plan_options(big));
        const size_t peak = p.total_bytes() + plan.memory.context_bytes;
        if (peak <= r.vram) {
            s += gl::cat("or a smaller resolution: --resolution ", px, " (--max_bucket_reso ", px, "): predicted peak ",
                         gl::format_bytes(peak), "\n");
            break;
        }
    }
    return s;
}

}  // namespace train
