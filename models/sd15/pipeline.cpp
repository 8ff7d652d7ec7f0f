#include "models/sd15/pipeline.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/sources.h"
#include "ggml-lite/ops/builder.h"
#include "lora/kohya.h"
#include "lora/merge_file.h"
#include "models/sd15/noise.h"
#include "models/sd15/pipeline_impl.h"

namespace sd {

using gl::DType;
using gl::ValueId;

namespace {

constexpr size_t kInstancesPerModel = 4;

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Chains `net`'s hooks after whatever w already has, so several networks add their branches.
void chain_attach(Weights& w, lora::LoraNetwork& net, lora::Part part) {
    Weights::LinearHook prev_lin = std::move(w.linear_hook);
    Weights::ConvHook prev_conv = std::move(w.conv_hook);
    w.linear_hook = nullptr;
    w.conv_hook = nullptr;
    if (part == lora::Part::unet) net.attach_unet(w);
    else net.attach_text_encoder(w);
    Weights::LinearHook lin = std::move(w.linear_hook);
    Weights::ConvHook conv = std::move(w.conv_hook);
    if (prev_lin && lin)
        w.linear_hook = [prev_lin, lin](gl::Graph& g, const std::string& m, ValueId x, ValueId y) {
            return lin(g, m, x, prev_lin(g, m, x, y));
        };
    else
        w.linear_hook = lin ? lin : prev_lin;
    if (prev_conv && conv)
        w.conv_hook = [prev_conv, conv](gl::Graph& g, const std::string& m, ValueId x, ValueId y, int k, int s, int p) {
            return conv(g, m, x, prev_conv(g, m, x, y, k, s, p), k, s, p);
        };
    else
        w.conv_hook = conv ? conv : prev_conv;
}

LoraSource open_lora(const LoraFile& f) {
    GL_CHECK(std::isfinite(f.multiplier), "LoRA ", f.path, ": multiplier ", f.multiplier, " is not finite");
    LoraSource s;
    s.file = gl::io::open_checkpoint(f.path);
    const auto [rank, conv] = lora::file_ranks(*s.file);
    s.cfg.rank = rank > 0 ? rank : conv;
    s.cfg.alpha = 0.0f;  // alpha = rank: load_lora folds each module's file alpha into up
    s.cfg.conv_dim = conv;
    s.cfg.multiplier = f.multiplier;
    for (const gl::io::TensorInfo& t : s.file->list()) {
        s.unet = s.unet || starts_with(t.name, "lora_unet_") || starts_with(t.name, "unet.");
        s.text_encoder = s.text_encoder || starts_with(t.name, "lora_te_") || starts_with(t.name, "text_encoder.");
    }
    GL_CHECK(s.unet || s.text_encoder, "LoRA ", f.path, ": no tensor is named for the UNet (lora_unet_*, unet.*) "
             "or the text encoder (lora_te_*, text_encoder.*); is it an SD1.5 LoRA?");
    return s;
}

std::string mib(size_t bytes) { return gl::cat(double(std::llround(double(bytes) / 1048576.0 * 10)) / 10, " MiB"); }

}  // namespace

// ---- models and their shapes ----

std::vector<std::unique_ptr<lora::LoraNetwork>> Pipeline::Impl::attach_loras(PipelineModel& m, Weights& w) const {
    std::vector<std::unique_ptr<lora::LoraNetwork>> nets;
    if (!m.takes_lora) return nets;
    for (const LoraSource& s : loras) {
        if (m.part == lora::Part::unet ? !s.unet : !s.text_encoder) continue;
        nets.push_back(std::make_unique<lora::LoraNetwork>(s.cfg));
        chain_attach(w, *nets.back(), m.part);
    }
    return nets;
}

void Pipeline::Impl::build_holder(PipelineModel& m, const GraphBuilder& build) {
    m.graph = std::make_unique<gl::Graph>();
    m.weights = std::make_unique<Weights>(*m.graph, dtype);
    m.nets = attach_loras(m, *m.weights);
    const BuiltGraph b = build(*m.weights, *m.graph);
    m.graph->mark_output(b.out);
    m.rt = make_runtime(gl::make_plan(*m.graph));
}

gl::Plan Pipeline::Impl::plan_only(PipelineModel& m, const GraphBuilder& build) const {
    gl::Graph g;
    Weights w(g, dtype);
    // The holder's weights first, in its order: the frozen arenas line up whatever this shape builds.
    for (const WeightEntry& e : m.weights->entries()) w.get(e.name, m.graph->shape(e.id), e.layout);
    std::vector<std::unique_ptr<lora::LoraNetwork>> nets;
    if (runtime_lora) nets = attach_loras(m, w);
    const BuiltGraph b = build(w, g);
    g.mark_output(b.out);
    return gl::make_plan(g);
}

PipelineModel::Instance& Pipeline::Impl::instance(PipelineModel& m, const std::string& key, const GraphBuilder& build) {
    auto it = m.instances.find(key);
    if (it == m.instances.end()) {
        while (m.instances.size() >= kInstancesPerModel) {
            auto lru = std::min_element(m.instances.begin(), m.instances.end(),
                                        [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
            m.instances.erase(lru);
        }
        gl::Graph g;
        Weights w(g, dtype);
        for (const WeightEntry& e : m.weights->entries()) w.get(e.name, m.graph->shape(e.id), e.layout);
        std::vector<std::unique_ptr<lora::LoraNetwork>> nets;
        if (runtime_lora) nets = attach_loras(m, w);
        const BuiltGraph b = build(w, g);
        g.mark_output(b.out);
        PipelineModel::Instance inst;
        inst.rt = make_runtime(gl::make_plan(g));
        inst.rt->share_arena(gl::Category::frozen, *m.rt);
        if (runtime_lora && !nets.empty()) inst.rt->share_arena(gl::Category::trainable, *m.rt);
        inst.in = b.in;
        inst.out = b.out;
        it = m.instances.emplace(key, std::move(inst)).first;
    }
    it->second.last_use = ++clock;
    return it->second;
}

GraphBuilder Pipeline::Impl::text_builder(const Sd15Files& f, int n, int chunks, int clip_skip) const {
    return [&f, n, chunks, clip_skip](Weights& w, gl::Graph& g) {
        const int64_t L = f.clip_cfg.max_pos;
        const ValueId ids = g.input("ids", DType::i32, {int64_t(n) * chunks, L});
        const ValueId h = build_clip(w, g, ids, f.clip_cfg, clip_skip);
        // Each prompt's chunks are consecutive rows: joining them is a reshape.
        return BuiltGraph{{ids}, gl::reshape(g, h, {n, chunks * L, f.clip_cfg.width})};
    };
}

GraphBuilder Pipeline::Impl::unet_builder(const Sd15Files& f, int batch, int h, int w, int context_len) const {
    return [&f, batch, h, w, context_len](Weights& wt, gl::Graph& g) {
        const UnetConfig& c = f.unet_cfg;
        const ValueId x = g.input("x", DType::f32, {batch, h, w, c.in_channels});
        const ValueId t = g.input("t", DType::f32, {batch});
        const ValueId ctx = g.input("context", DType::f32, {batch, context_len, c.cross_attention_dim});
        return BuiltGraph{{x, t, ctx}, unet_forward(wt, c, x, t, ctx)};
    };
}

GraphBuilder Pipeline::Impl::vae_builder(const Sd15Files& f, int batch, int h, int w) const {
    return [&f, batch, h, w](Weights& wt, gl::Graph& g) {
        const ValueId z = g.input("z", DType::f32, {batch, h, w, f.vae_cfg.latent_channels});
        return BuiltGraph{{z}, vae_decode(wt, f.vae_cfg, z)};
    };
}

// ---- construction: weights and LoRA ----

Pipeline::Pipeline(Sd15Files model, PipelineOptions opt, RuntimeFactory make_runtime)
    : model_(std::move(model)), opt_(std::move(opt)), impl_(std::make_unique<Impl>()) {
    GL_CHECK(make_runtime, "pipeline: no runtime factory");
    GL_CHECK(opt_.clip_skip >= 1 && opt_.clip_skip <= model_.clip_cfg.layers, "pipeline: clip_skip ", opt_.clip_skip,
             " must be in [1, ", model_.clip_cfg.layers, "]");
    GL_CHECK(opt_.max_chunks >= 1 && opt_.max_chunks <= 8, "pipeline: max_chunks ", opt_.max_chunks, " must be in [1, 8]");
    GL_CHECK(opt_.vae_tile >= 4, "pipeline: vae_tile ", opt_.vae_tile, " must be >= 4 latents");
    GL_CHECK(model_.unet_cfg.in_channels == model_.vae_cfg.latent_channels, "pipeline: the UNet takes ",
             model_.unet_cfg.in_channels, " input channels and the VAE makes ", model_.vae_cfg.latent_channels,
             " latent channels: text-to-image needs a plain (not inpainting) SD1.5 UNet");
    Impl& m = *impl_;
    m.make_runtime = std::move(make_runtime);
    m.dtype = opt_.dtype;
    for (const LoraFile& f : opt_.loras) m.loras.push_back(open_lora(f));
    m.runtime_lora = !m.loras.empty() && !opt_.merge_loras;

    m.text.part = lora::Part::text_encoder;
    m.text.takes_lora = true;
    m.unet.part = lora::Part::unet;
    m.unet.takes_lora = true;
    const int s = model_.unet_cfg.size_multiple();
    m.build_holder(m.text, m.text_builder(model_, 1, 1, opt_.clip_skip));
    m.build_holder(m.unet, m.unet_builder(model_, 1, s, s, int(model_.clip_cfg.max_pos)));
    m.build_holder(m.vae, m.vae_builder(model_, 1, 1, 1));
    load_clip(*m.text.weights, *model_.text_encoder, *m.text.rt);
    load_unet(*m.unet.weights, model_.unet_cfg, *model_.unet, *m.unet.rt);
    load_vae(*m.vae.weights, model_.vae_cfg, *model_.vae, *m.vae.rt);

    // Each file's modules: zero-initialised (init writes up = 0), then loaded; a file tensor no
    // network took is an error, as a LoRA applied in part would silently differ from other tools.
    size_t text_net = 0, unet_net = 0;
    for (size_t i = 0; i < m.loras.size(); i++) {
        const LoraSource& s = m.loras[i];
        std::vector<std::string> unused;
        bool first = true;
        for (PipelineModel* pm : {&m.text, &m.unet}) {
            const bool has = pm == &m.text ? s.text_encoder : s.unet;
            if (!has) continue;
            lora::LoraNetwork& net = *pm->nets[pm == &m.text ? text_net++ : unet_net++];
            net.init(*pm->rt, 0);
            const lora::LoadReport r = lora::load_lora(*s.file, net, *pm->rt, &model_.unet_cfg);
            if (first) unused = r.unexpected;
            else {
                std::vector<std::string> both;
                std::set_intersection(unused.begin(), unused.end(), r.unexpected.begin(), r.unexpected.end(),
                                      std::back_inserter(both));
                unused.swap(both);
            }
            first = false;
            if (opt_.merge_loras) lora::merge_into(net, *pm->rt, pm->part, *pm->weights, *pm->rt);
        }
        if (!unused.empty())
            gl::fail("LoRA ", opt_.loras[i].path, ": ", unused.size(), " tensors are not used by an SD1.5 network (",
                     unused.front(), (unused.size() > 1 ? ", ..." : ""), "); applying the rest would differ from "
                     "what other tools make of this file");
    }
}

Pipeline::~Pipeline() = default;

// ---- requests ----

void Pipeline::validate(const GenerationParams& p) const {
    const int px = int(model_.vae_cfg.downscale()) * model_.unet_cfg.size_multiple();
    for (const auto& [name, v] : {std::pair{"width", p.width}, std::pair{"height", p.height}})
        GL_CHECK(v >= px && v <= 8192 && v % px == 0, name, " ", v, " must be a multiple of ", px, " in [", px,
                 ", 8192] (the VAE's ", model_.vae_cfg.downscale(), "x and the UNet's ", model_.unet_cfg.size_multiple(),
                 "x downsampling)");
    GL_CHECK(p.steps >= 1 && p.steps <= 1000, "steps ", p.steps, " must be in [1, 1000]");
    GL_CHECK(std::isfinite(p.cfg_scale) && p.cfg_scale >= 0, "CFG scale ", p.cfg_scale, " must be finite and >= 0");
    GL_CHECK(p.batch >= 1 && p.batch <= 64, "batch ", p.batch, " must be in [1, 64]");
    p.sampler.validate();
}

std::vector<float> Pipeline::seed_noise(const GenerationParams& p) const {
    const auto ds = size_t(model_.vae_cfg.downscale());
    const size_t per = size_t(p.height) / ds * (size_t(p.width) / ds) * size_t(model_.vae_cfg.latent_channels);
    std::vector<float> x(per * size_t(p.batch));
    for (int b = 0; b < p.batch; b++) {
        NoiseRng rng{p.seed + uint64_t(b), 0};
        fill_normal(std::span<float>(x).subspan(size_t(b) * per, per), rng);
    }
    return x;
}

std::vector<float> Pipeline::encode_text(const std::vector<std::string>& texts, int* chunks_out) {
    GL_CHECK(!texts.empty(), "encode_text: no texts");
    const ClipTokenizer& tok = *model_.tokenizer;
    size_t longest = 0;
    for (const std::string& t : texts) longest = std::max(longest, tok.tokenize(t).size());
    const int chunk = ClipTokenizer::kChunk;
    const int chunks = std::clamp(int((longest + size_t(chunk) - 1) / size_t(chunk)), 1, opt_.max_chunks);
    std::vector<int32_t> ids;
    for (const std::string& t : texts) {
        const std::vector<int32_t> c = tok.encode_chunks(t, chunks * chunk);
        ids.insert(ids.end(), c.begin(), c.end());
    }
    const int n = int(texts.size());
    auto& inst = impl_->instance(impl_->text, gl::cat("n", n, "c", chunks), impl_->text_builder(model_, n, chunks, opt_.clip_skip));
    inst.rt->write(inst.in[0], ids.data(), DType::i32);
    inst.rt->run();
    if (chunks_out) *chunks_out = chunks;
    return inst.rt->read_f32(inst.out);
}

std::vector<float> Pipeline::denoise(const GenerationParams& p, std::vector<float> x, const std::vector<float>& context,
                                     int context_len, const std::function<void(int, int)>& on_step) {
    validate(p);
    const bool cfg = p.cfg_scale > 1.0;
    const int B = p.batch, N = cfg ? 2 * B : B;
    const int64_t ds = model_.vae_cfg.downscale();
    const int h = int(p.height / ds), w = int(p.width / ds), C = model_.unet_cfg.in_channels;
    const size_t per = size_t(h) * size_t(w) * size_t(C);
    GL_CHECK(x.size() == per * size_t(B), "denoise: ", x.size(), " latent values for a batch of ", B, " ", w, "x", h,
             "x", C, " latents");
    GL_CHECK(context.size() == size_t(N) * size_t(context_len) * size_t(model_.unet_cfg.cross_attention_dim),
             "denoise: the context holds ", context.size(), " values, expected ", N, " x ", context_len, " x ",
             model_.unet_cfg.cross_attention_dim);
    auto& u = impl_->instance(impl_->unet, gl::cat("b", N, "h", h, "w", w, "l", context_len),
                              impl_->unet_builder(model_, N, h, w, context_len));
    u.rt->write_f32(u.in[2], context);

    const Sampler sampler(p.sampler, p.steps);
    // Each image's sampler noise continues its seed's stream after the initial noise (two draws
    // per value), so an image is the same whatever batch it was made in.
    std::vector<NoiseRng> rngs;
    for (int b = 0; b < B; b++) rngs.push_back(NoiseRng{p.seed + uint64_t(b), 2 * uint64_t(per)});
    auto noise = [&](std::span<float> z) {
        for (int b = 0; b < B; b++) fill_normal(z.subspan(size_t(b) * per, per), rngs[size_t(b)]);
    };
    std::vector<float> in(per * size_t(N)), ts(static_cast<size_t>(N));
    int calls = 0;
    auto model = [&](std::span<const float> x_in, double t, std::span<float> out) {
        std::copy(x_in.begin(), x_in.end(), in.begin());
        if (cfg) std::copy(x_in.begin(), x_in.end(), in.begin() + ptrdiff_t(x_in.size()));
        std::fill(ts.begin(), ts.end(), float(t));
        u.rt->write_f32(u.in[0], in);
        u.rt->write_f32(u.in[1], ts);
        u.rt->run();
        const std::vector<float> eps = u.rt->read_f32(u.out);
        const size_t n = out.size();
        const double g = p.cfg_scale;
        for (size_t i = 0; i < n; i++)
            out[i] = cfg ? float(double(eps[i]) + g * (double(eps[n + i]) - double(eps[i]))) : eps[i];
        if (on_step) on_step(++calls, sampler.model_calls());
    };
    sampler.run(x, model, noise);
    return x;
}

std::vector<gl::io::Image> Pipeline::generate(const GenerationParams& p, const std::vector<float>* initial_noise,
                                              const std::function<void(int, int)>& on_step) {
    return to_images(generate_pixels(p, initial_noise, on_step), p.batch, p.height, p.width);
}

std::vector<float> Pipeline::generate_pixels(const GenerationParams& p, const std::vector<float>* initial_noise,
                                             const std::function<void(int, int)>& on_step, std::vector<float>* latents_out) {
    validate(p);
    const bool cfg = p.cfg_scale > 1.0;
    int chunks = 1;
    const std::vector<float> text = cfg ? encode_text({p.negative, p.prompt}, &chunks) : encode_text({p.prompt}, &chunks);
    const int L = chunks * int(model_.clip_cfg.max_pos);
    const size_t row = size_t(L) * size_t(model_.clip_cfg.width);
    // [uncond x B, cond x B] (or cond x B).
    std::vector<float> context;
    for (int part = cfg ? 0 : 1; part < 2; part++)
        for (int b = 0; b < p.batch; b++) {
            const auto src = text.begin() + ptrdiff_t(size_t(cfg ? part : 0) * row);
            context.insert(context.end(), src, src + ptrdiff_t(row));
        }
    std::vector<float> x = initial_noise ? *initial_noise : seed_noise(p);
    const std::vector<float> latents = denoise(p, std::move(x), context, L, on_step);
    if (latents_out) *latents_out = latents;
    const int64_t ds = model_.vae_cfg.downscale();
    return decode(latents, p.batch, int(p.height / ds), int(p.width / ds));
}

std::string Pipeline::plan_report(const GenerationParams& p) {
    validate(p);
    Impl& m = *impl_;
    const bool cfg = p.cfg_scale > 1.0;
    const ClipTokenizer& tok = *model_.tokenizer;
    const size_t longest = std::max(tok.tokenize(p.prompt).size(), cfg ? tok.tokenize(p.negative).size() : size_t(0));
    const int chunks = std::clamp(int((longest + 74) / 75), 1, opt_.max_chunks);
    const int64_t ds = model_.vae_cfg.downscale();
    const int h = int(p.height / ds), w = int(p.width / ds), N = cfg ? 2 * p.batch : p.batch;
    const gl::Plan tp = m.plan_only(m.text, m.text_builder(model_, cfg ? 2 : 1, chunks, opt_.clip_skip));
    const gl::Plan up = m.plan_only(m.unet, m.unet_builder(model_, N, h, w, chunks * int(model_.clip_cfg.max_pos)));
    const VaeDecodePlan vp = plan_decode(p.batch, h, w);
    auto arena = [](const gl::Runtime& rt, gl::Category c) { return rt.plan().arena_bytes[size_t(c)]; };
    const size_t lora_bytes = arena(*m.text.rt, gl::Category::trainable) + arena(*m.unet.rt, gl::Category::trainable);
    const size_t weights = arena(*m.text.rt, gl::Category::frozen) + arena(*m.unet.rt, gl::Category::frozen) +
                           arena(*m.vae.rt, gl::Category::frozen);
    const size_t acts = tp.arena_bytes[size_t(gl::Category::activations)] +
                        up.arena_bytes[size_t(gl::Category::activations)] + vp.activation_bytes;
    std::string s = gl::cat("memory plan (", gl::dtype_name(opt_.dtype), ", ", m.unet.rt->backend_name(), "): ",
                            p.width, "x", p.height, ", batch ", p.batch, cfg ? " with CFG" : " without CFG", "\n");
    s += gl::cat("  text encoder   weights ", mib(arena(*m.text.rt, gl::Category::frozen)), ", activations ",
                 mib(tp.arena_bytes[size_t(gl::Category::activations)]), " (", cfg ? 2 : 1, " texts x ", chunks,
                 " chunk", chunks > 1 ? "s" : "", ")\n");
    s += gl::cat("  UNet           weights ", mib(arena(*m.unet.rt, gl::Category::frozen)), ", activations ",
                 mib(up.arena_bytes[size_t(gl::Category::activations)]), " (batch ", N, ", ", w, "x", h,
                 " latents, context ", chunks * model_.clip_cfg.max_pos, ")\n");
    if (!m.loras.empty())
        s += gl::cat("  LoRA           ", m.loras.size(), " file", m.loras.size() > 1 ? "s" : "", ", parameters ",
                     mib(lora_bytes), opt_.merge_loras ? " (merged into the weights)" : " (runtime branches)", "\n");
    s += gl::cat("  VAE decoder    weights ", mib(arena(*m.vae.rt, gl::Category::frozen)), ", activations ",
                 mib(vp.activation_bytes), " (", vae_mode_name(vp.mode));
    if (vp.mode != VaeDecodePlan::Mode::whole_batch)
        s += gl::cat(": the whole batch would need ", mib(vp.whole_batch_bytes), ", over the budget of ",
                     mib(opt_.vae_budget_bytes));
    if (vp.mode == VaeDecodePlan::Mode::tiled) s += gl::cat("; ", vp.tiles, " tiles per image");
    s += ")\n";
    s += gl::cat("  total          ", mib(weights + lora_bytes + acts), " (weights ", mib(weights + lora_bytes),
                 ", activations of all three graphs ", mib(acts), "; backend workspace not included)\n");
    s += "UNet graph (one model call):\n" + up.report(6);
    return s;
}

}  // namespace sd
