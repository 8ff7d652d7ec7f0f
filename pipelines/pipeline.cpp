#include "pipelines/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/sources.h"
#include "ggml-lite/ops/builder.h"
#include "lora/file_modules.h"
#include "lora/kohya.h"
#include "pipelines/merge_file.h"
#include "models/diffusion/noise.h"
#include "models/diffusion/sampler_prompts.h"
#include "pipelines/pipeline_impl.h"

namespace sd {

using gl::DType;
using gl::ValueId;

namespace {

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Chains `net`'s hooks after whatever w already has, so several networks add their branches.
void chain_attach(nn::Weights& w, lora::LoraNetwork& net, lora::Part part) {
    using Hook = nn::Weights::Hook;
    Hook prev_lin = std::move(w.linear_hook), prev_conv = std::move(w.conv_hook);
    w.linear_hook = nullptr;
    w.conv_hook = nullptr;
    if (part == lora::Part::unet) net.attach_unet(w);
    else net.attach_text_encoder(w);
    for (auto [slot, prev] : {std::pair{&w.linear_hook, &prev_lin}, std::pair{&w.conv_hook, &prev_conv}}) {
        Hook mine = std::move(*slot);
        if (*prev && mine)
            *slot = [p = std::move(*prev), mine](gl::Graph& g, const nn::Weights::LayerCall& c) {
                nn::Weights::LayerCall after = c;
                after.y = p(g, c);
                return mine(g, after);
            };
        else
            *slot = mine ? mine : std::move(*prev);
    }
}

LoraSource open_lora(const LoraFile& f, const models::ModelFiles& model) {
    GL_CHECK(std::isfinite(f.multiplier), "LoRA ", f.path, ": multiplier ", f.multiplier, " is not finite");
    LoraSource s;
    s.file = gl::io::open_checkpoint(f.path);
    // The file's modules as it holds them (types, ranks; alpha = rank for LoRA: load_lora folds
    // each module's file alpha into up).
    s.cfg.from_file = std::make_shared<lora::FileModules>(s.file, model.fam().ldm_names(model.cfg()));
    s.cfg.from_file->check_holds_modules();
    s.cfg.family = &model.fam();
    s.cfg.multiplier = f.multiplier;
    for (const gl::io::TensorInfo& t : s.file->list()) {
        s.unet = s.unet || starts_with(t.name, "lora_unet_") || starts_with(t.name, "unet.");
        s.text_encoder = s.text_encoder || starts_with(t.name, "lora_te_") || starts_with(t.name, "text_encoder.");
    }
    GL_CHECK(s.unet || s.text_encoder, "LoRA ", f.path, ": no tensor is named for the UNet (lora_unet_*, unet.*) "
             "or the text encoder (lora_te_*, text_encoder.*); is it an SD1.5 LoRA?");
    return s;
}

std::string mib(size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f MiB", double(bytes) / 1048576.0);
    return b;
}

// Several files may hold a module for the same layer: their parameters get the file's index in
// their names, so the shared memory (which matches values by name) keeps them apart.
void rename_params(gl::Graph& g, const lora::LoraNetwork& net, size_t file) {
    for (ValueId v : net.parameters()) g.set_name(v, gl::cat("lora", file, ".", g.v(v).name));
}

}  // namespace

// ---- graphs, plans, the shared memory ----

std::vector<std::unique_ptr<lora::LoraNetwork>> Pipeline::Impl::attach_loras(const PipelineHolder& m, nn::Weights& w,
                                                                             std::vector<size_t>* files) const {
    std::vector<std::unique_ptr<lora::LoraNetwork>> nets;
    if (!m.takes_lora) return nets;
    if (trained && (m.part == lora::Part::unet ? trained_unet : trained_text_encoder)) {
        nets.push_back(std::make_unique<lora::LoraNetwork>(*trained));
        chain_attach(w, *nets.back(), m.part);
        if (files) files->push_back(kTrainedLora);
    }
    for (size_t i = 0; i < loras.size(); i++) {
        if (m.part == lora::Part::unet ? !loras[i].unet : !loras[i].text_encoder) continue;
        nets.push_back(std::make_unique<lora::LoraNetwork>(loras[i].cfg));
        chain_attach(w, *nets.back(), m.part);
        if (files) files->push_back(i);
    }
    return nets;
}

void Pipeline::Impl::build_holder(PipelineHolder& m, const std::string& key, const GraphBuilder& build) {
    m.key = key;
    m.graph = std::make_unique<gl::Graph>();
    m.weights = std::make_unique<nn::Weights>(*m.graph, dtype, m.format);
    m.nets = attach_loras(m, *m.weights, &m.net_file);
    const BuiltGraph io = build(*m.weights, *m.graph);
    for (size_t k = 0; k < m.nets.size(); k++)
        if (m.net_file[k] != kTrainedLora) rename_params(*m.graph, *m.nets[k], m.net_file[k]);
    m.graph->mark_output(io.out);
    plans.emplace(key, Planned{gl::make_plan(*m.graph), io});
}

const Pipeline::Impl::Planned& Pipeline::Impl::plan(const PipelineHolder& m, const std::string& key,
                                                   const GraphBuilder& build) {
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, plan_graph(m, build)).first;
    return it->second;
}

Pipeline::Impl::Planned Pipeline::Impl::plan_graph(const PipelineHolder& m, const GraphBuilder& build) const {
    gl::Graph g;
    nn::Weights w(g, dtype, m.format);
    std::vector<size_t> files;
    std::vector<std::unique_ptr<lora::LoraNetwork>> nets;
    if (runtime_lora) nets = attach_loras(m, w, &files);
    const BuiltGraph io = build(w, g);
    for (size_t k = 0; k < nets.size(); k++)
        if (files[k] != kTrainedLora) rename_params(g, *nets[k], files[k]);
    g.mark_output(io.out);
    return Planned{gl::make_plan(g), io};
}

void Pipeline::Impl::ensure(const models::ModelFiles& f, const PipelineOptions& o, const std::vector<std::string>& keys) {
    bool fits = mem != nullptr;
    for (size_t i = 0; fits && i < keys.size(); i++) {
        const gl::Plan& p = plans.at(keys[i]).plan;
        const gl::SharedLayout& L = mem->layout();
        fits = p.arena_bytes[size_t(gl::Category::activations)] <= L.arena_bytes[size_t(gl::Category::activations)] &&
               (backend != "cuda" || gl::cuda_workspace_bytes(p.graph) <= L.scratch_bytes);
    }
    if (fits) return;
    GL_CHECK(!external_memory, "pipeline: the request's graphs do not fit the memory it was given (plan them "
                               "with plans() before that memory is laid out)");
    // A new layout from every shape planned so far; the old memory goes first (no two copies of
    // the weights at once), and the weights are loaded again.
    runtimes.clear();
    mem.reset();
    std::vector<const gl::Plan*> all;
    for (const auto& [k, p] : plans) all.push_back(&p.plan);
    gl::SharedLayout layout = gl::make_shared_layout(all, backend);
    const Pipeline::Budget budget = memory_budget_of(o, backend);  // read with the old memory gone
    if (layout.total_bytes() > budget.bytes) {
        // Over the budget with every shape planned so far: keep only what these requests need (the
        // other plans are a cache; a later request plans its shapes again).
        std::set<std::string> needed(keys.begin(), keys.end());
        for (const PipelineHolder* h : {&text, &unet, &vae}) needed.insert(h->key);
        std::erase_if(plans, [&](const auto& kv) { return !needed.count(kv.first); });
        all.clear();
        for (const auto& [k, p] : plans) all.push_back(&p.plan);
        layout = gl::make_shared_layout(all, backend);
        if (layout.total_bytes() > budget.bytes) throw OverBudget(layout.total_bytes(), budget);
    }
    mem = gl::make_shared_memory(std::move(layout));
    load(f, o);
}

Pipeline::Impl::Instance& Pipeline::Impl::runtime(const std::string& key) {
    GL_CHECK(mem != nullptr, "pipeline: no memory for ", key);
    auto it = runtimes.find(key);
    if (it != runtimes.end()) return it->second;
    const Planned& p = plans.at(key);
    Instance inst{backend == "cuda" ? gl::make_cuda_runtime(p.plan, mem) : gl::make_cpu_runtime(p.plan, mem), p.io};
    if (profiling) inst.rt->set_profiling(true);
    return runtimes.emplace(key, std::move(inst)).first->second;
}

void Pipeline::Impl::load(const models::ModelFiles& f, const PipelineOptions& o, Pipeline::LoadParts parts) {
    if (parts.text_encoder) f.fam().load(lora::Part::text_encoder, *text.weights, f, *runtime(text.key).rt);
    if (parts.unet) f.fam().load(lora::Part::unet, *unet.weights, f, *runtime(unet.key).rt);
    if (parts.vae) load_vae(*vae.weights, f.vae_config(), *f.vae, *runtime(vae.key).rt);
    // Every module zero-initialised first (init writes up = 0: modules a file lacks add nothing),
    // then the file; merged ones then fold into the weights.
    for (PipelineHolder* m : {&text, &unet}) {
        gl::Runtime& rt = *runtime(m->key).rt;
        for (size_t k = 0; k < m->nets.size(); k++) {
            if (m->net_file[k] == kTrainedLora) continue;  // the trainer's parameters
            lora::LoraNetwork& net = *m->nets[k];
            if (net.modules().empty()) continue;
            net.init(rt, 0);
            lora::load_lora(*loras[m->net_file[k]].file, net, rt, f.fam().ldm_names(f.cfg()));
            if (o.merge_loras) lora::merge_into(net, rt, m->part, *m->weights, rt);
        }
    }
}

std::string Pipeline::Impl::text_key(int n, int chunks) { return gl::cat("text n", n, " chunks", chunks); }
std::string Pipeline::Impl::unet_key(int batch, int h, int w, int l) { return gl::cat("unet b", batch, " ", w, "x", h, " l", l); }
std::string Pipeline::Impl::vae_key(int batch, int h, int w) { return gl::cat("vae b", batch, " ", w, "x", h); }

GraphBuilder Pipeline::Impl::text_builder(const models::ModelFiles& f, int n, int chunks, int clip_skip) const {
    return [&f, n, chunks, clip_skip](nn::Weights& w, gl::Graph& g) {
        const int64_t L = f.fam().tokens().sequence;
        const ValueId ids = g.input("ids", DType::i32, {int64_t(n) * chunks, L});
        const ValueId h = f.fam().text_states(w, g, ids, f.cfg(), clip_skip);
        // Each prompt's chunks are consecutive rows: joining them is a reshape.
        return BuiltGraph{{ids}, gl::reshape(g, h, {n, chunks * L, f.cfg().text_width()})};
    };
}

GraphBuilder Pipeline::Impl::unet_builder(const models::ModelFiles& f, int batch, int h, int w, int context_len) const {
    return [&f, batch, h, w, context_len](nn::Weights& wt, gl::Graph& g) {
        const models::ModelConfig& c = f.cfg();
        const ValueId x = g.input("x", DType::f32, {batch, h, w, c.latent_channels()});
        const ValueId t = g.input("t", DType::f32, {batch});
        const ValueId ctx = g.input("context", DType::f32, {batch, context_len, c.context_width()});
        return BuiltGraph{{x, t, ctx}, f.fam().denoiser(wt, c, x, t, ctx)};
    };
}

GraphBuilder Pipeline::Impl::vae_builder(const models::ModelFiles& f, int batch, int h, int w) const {
    return [&f, batch, h, w](nn::Weights& wt, gl::Graph& g) {
        const ValueId z = g.input("z", DType::f32, {batch, h, w, f.vae_config().latent_channels});
        return BuiltGraph{{z}, vae_decode(wt, f.vae_config(), z)};
    };
}

// ---- construction: the holders and the LoRA files ----

Pipeline::Pipeline(models::ModelFiles model, PipelineOptions opt)
    : model_(std::move(model)), opt_(std::move(opt)), impl_(std::make_unique<Impl>()) {
    GL_CHECK(opt_.clip_skip >= 1 && opt_.clip_skip <= model_.cfg().text_layers(), "pipeline: clip_skip ",
             opt_.clip_skip, " must be in [1, ", model_.cfg().text_layers(), "]");
    GL_CHECK(opt_.max_chunks >= 1 && opt_.max_chunks <= 8, "pipeline: max_chunks ", opt_.max_chunks, " must be in [1, 8]");
    GL_CHECK(opt_.vae_tile >= 4, "pipeline: vae_tile ", opt_.vae_tile, " must be >= 4 latents");
    GL_CHECK(model_.cfg().latent_channels() == model_.vae_config().latent_channels, "pipeline: the UNet takes ",
             model_.cfg().latent_channels(), " input channels and the VAE makes ", model_.vae_config().latent_channels,
             " latent channels: text-to-image needs a plain (not inpainting) SD1.5 UNet");
    Impl& m = *impl_;
    m.backend = gl::backend_name(gl::resolve_backend(opt_.backend));  // throws when CUDA is asked and absent
    m.dtype = opt_.dtype;
    for (const LoraFile& f : opt_.loras) m.loras.push_back(open_lora(f, model_));
    m.runtime_lora = !m.loras.empty() && !opt_.merge_loras;
    if (opt_.trained_lora) {
        GL_CHECK(m.loras.empty() && !opt_.merge_loras, "pipeline: a trained LoRA runs alone, as runtime branches");
        m.trained = *opt_.trained_lora;
        m.trained->rank_dropout = m.trained->module_dropout = m.trained->dropout = 0.0f;
        m.trained->multiplier = 1.0f;
        m.trained_unet = opt_.trained_unet;
        m.trained_text_encoder = opt_.trained_text_encoder;
        m.runtime_lora = true;
    }
    GL_CHECK(!opt_.merge_loras || (opt_.unet_format == gl::WeightFormat::dense &&
                                   opt_.text_encoder_format == gl::WeightFormat::dense),
             "pipeline: merging LoRA files needs dense base weights (not ", gl::weight_format_name(opt_.unet_format),
             " / ", gl::weight_format_name(opt_.text_encoder_format), "); apply them as runtime branches");
    m.text.part = lora::Part::text_encoder;
    m.text.takes_lora = true;
    m.text.format = opt_.text_encoder_format;
    m.unet.part = lora::Part::unet;
    m.unet.takes_lora = true;
    m.unet.format = opt_.unet_format;
    const int s = model_.cfg().size_multiple();
    m.build_holder(m.text, "text holder", m.text_builder(model_, 1, 1, opt_.clip_skip));
    m.build_holder(m.unet, "unet holder", m.unet_builder(model_, 1, s, s, int(model_.fam().tokens().sequence)));
    m.build_holder(m.vae, "vae holder", m.vae_builder(model_, 1, 1, 1));

    // Each file read once now (shapes, ranks, formats checked; nothing allocated): a tensor no
    // network takes is an error, as a LoRA applied in part would differ from what other tools make.
    for (size_t i = 0; i < m.loras.size(); i++) {
        std::vector<std::string> unused;
        bool first = true;
        for (PipelineHolder* h : {&m.text, &m.unet})
            for (size_t k = 0; k < h->nets.size(); k++) {
                if (h->net_file[k] != i) continue;
                lora::LoadReport r;
                if (h->nets[k]->modules().empty())
                    for (const gl::io::TensorInfo& t : m.loras[i].file->list()) r.unexpected.push_back(t.name);
                else
                    r = lora::load_lora(*m.loras[i].file, *h->nets[k], [](ValueId, const std::vector<float>&) {},
                                        model_.fam().ldm_names(model_.cfg()));
                std::vector<std::string> both;
                std::set_intersection(unused.begin(), unused.end(), r.unexpected.begin(), r.unexpected.end(),
                                      std::back_inserter(both));
                unused = first ? r.unexpected : both;
                first = false;
            }
        if (!unused.empty())
            gl::fail("LoRA ", opt_.loras[i].path, ": ", unused.size(), " tensors are not used by an SD1.5 network (",
                     unused.front(), unused.size() > 1 ? ", ..." : "", "); applying the rest would differ from "
                     "what other tools make of this file");
    }
}

Pipeline::~Pipeline() = default;

// ---- requests ----

void Pipeline::validate(const GenerationParams& p) const {
    const int px = int(model_.vae_config().downscale());
    const diffusion::SampleBounds& b = diffusion::kSampleBounds;
    for (const auto& [name, v] : {std::pair{"width", p.width}, std::pair{"height", p.height}})
        GL_CHECK(v >= px && v <= b.side_max && v % px == 0, name, " ", v, " must be a multiple of ", px, " in [", px,
                 ", ", b.side_max, "] (the VAE's ", px, "x downsampling)");
    GL_CHECK(p.steps >= b.steps_min && p.steps <= b.steps_max, "steps ", p.steps, " must be in [", b.steps_min, ", ",
             b.steps_max, "]");
    GL_CHECK(std::isfinite(p.cfg_scale) && p.cfg_scale >= 0 && p.cfg_scale <= b.cfg_max, "CFG scale ", p.cfg_scale,
             " must be in [0, ", b.cfg_max, "]");
    GL_CHECK(p.batch >= b.batch_min && p.batch <= b.batch_max, "batch ", p.batch, " must be in [", b.batch_min, ", ",
             b.batch_max, "]");
    p.sampler.validate();
}

std::vector<float> Pipeline::seed_noise(const GenerationParams& p) const {
    const auto ds = size_t(model_.vae_config().downscale());
    const size_t per = size_t(p.height) / ds * (size_t(p.width) / ds) * size_t(model_.vae_config().latent_channels);
    std::vector<float> x(per * size_t(p.batch));
    for (int b = 0; b < p.batch; b++) {
        diffusion::NoiseRng rng{p.seed + uint64_t(b), 0};
        diffusion::fill_normal(std::span<float>(x).subspan(size_t(b) * per, per), rng);
    }
    return x;
}

int Pipeline::chunks_for(const std::vector<std::string>& texts) const {
    size_t longest = 0;
    for (const std::string& t : texts) longest = std::max(longest, model_.tokenizer->tokenize(t).size());
    const auto chunk = size_t(ClipTokenizer::kChunk);
    return std::clamp(int((longest + chunk - 1) / chunk), 1, opt_.max_chunks);
}

std::vector<std::string> Pipeline::graphs_for(const GenerationParams& p) {
    validate(p);
    Impl& m = *impl_;
    const bool cfg = p.cfg_scale > 1.0;
    const int n = cfg ? 2 : 1, chunks = chunks_for(cfg ? std::vector<std::string>{p.negative, p.prompt}
                                                        : std::vector<std::string>{p.prompt});
    const int64_t ds = model_.vae_config().downscale();
    const int h = int(p.height / ds), w = int(p.width / ds), L = chunks * int(model_.fam().tokens().sequence);
    const int N = cfg ? 2 * p.batch : p.batch;
    std::vector<std::string> keys = {Impl::text_key(n, chunks), Impl::unet_key(N, h, w, L)};
    m.plan(m.text, keys[0], m.text_builder(model_, n, chunks, opt_.clip_skip));
    m.plan(m.unet, keys[1], m.unet_builder(model_, N, h, w, L));
    for (const auto& [b, th, tw] : decode_shapes(plan_decode(p.batch, h, w), p.batch, h, w)) {
        keys.push_back(Impl::vae_key(b, th, tw));
        m.plan(m.vae, keys.back(), m.vae_builder(model_, b, th, tw));
    }
    return keys;
}

void Pipeline::reserve(const std::vector<GenerationParams>& requests) { ensure_requests(requests); }

std::vector<const gl::Plan*> Pipeline::plans(const std::vector<GenerationParams>& requests) {
    Impl& m = *impl_;
    std::vector<std::string> keys = {m.text.key, m.unet.key, m.vae.key};
    for (const GenerationParams& p : requests) {
        const std::vector<std::string> k = graphs_for(p);
        keys.insert(keys.end(), k.begin(), k.end());
    }
    std::vector<const gl::Plan*> out;
    for (const std::string& k : keys) out.push_back(&m.plans.at(k).plan);
    return out;
}

void Pipeline::use_memory(std::shared_ptr<gl::SharedMemory> mem, LoadParts load) {
    GL_CHECK(mem != nullptr, "pipeline: no memory given");
    Impl& m = *impl_;
    m.runtimes.clear();
    m.mem = std::move(mem);
    m.external_memory = true;
    m.load(model_, opt_, load);
    model_.unet.reset();  // never read again: the mapped files can go
    model_.text_encoder.reset();
    model_.vae.reset();
}

std::vector<float> Pipeline::encode_text(const std::vector<std::string>& texts, int* chunks_out) {
    GL_CHECK(!texts.empty(), "encode_text: no texts");
    const ClipTokenizer& tok = *model_.tokenizer;
    const int chunk = ClipTokenizer::kChunk;
    const int chunks = chunks_for(texts);
    std::vector<int32_t> ids;
    for (const std::string& t : texts) {
        const std::vector<int32_t> c = tok.encode_chunks(t, chunks * chunk);
        ids.insert(ids.end(), c.begin(), c.end());
    }
    const int n = int(texts.size());
    Impl& m = *impl_;
    const std::string key = Impl::text_key(n, chunks);
    m.plan(m.text, key, m.text_builder(model_, n, chunks, opt_.clip_skip));
    m.ensure(model_, opt_, {key});
    Impl::Instance& inst = m.runtime(key);
    inst.rt->write(inst.io.in[0], ids.data(), DType::i32);
    inst.rt->run();
    if (chunks_out) *chunks_out = chunks;
    return inst.rt->read_f32(inst.io.out);
}

std::vector<float> Pipeline::denoise(const GenerationParams& p, std::vector<float> x, const std::vector<float>& context,
                                     int context_len, const std::function<void(int, int)>& on_step) {
    validate(p);
    const bool cfg = p.cfg_scale > 1.0;
    const int B = p.batch, N = cfg ? 2 * B : B;
    const int64_t ds = model_.vae_config().downscale();
    const int h = int(p.height / ds), w = int(p.width / ds), C = int(model_.cfg().latent_channels());
    const size_t per = size_t(h) * size_t(w) * size_t(C);
    GL_CHECK(x.size() == per * size_t(B), "denoise: ", x.size(), " latent values for a batch of ", B, " ", w, "x", h,
             "x", C, " latents");
    GL_CHECK(context.size() == size_t(N) * size_t(context_len) * size_t(model_.cfg().context_width()),
             "denoise: the context holds ", context.size(), " values, expected ", N, " x ", context_len, " x ",
             model_.cfg().context_width());
    Impl& m = *impl_;
    const std::string key = Impl::unet_key(N, h, w, context_len);
    m.plan(m.unet, key, m.unet_builder(model_, N, h, w, context_len));
    m.ensure(model_, opt_, {key});
    Impl::Instance& u = m.runtime(key);
    // Inputs live in the activation arena that every plan on the memory shares: nothing else
    // runs until the loop is done, so the context is written once.
    u.rt->write_f32(u.io.in[2], context);

    const diffusion::Sampler sampler(p.sampler, p.steps);
    // Each image's sampler noise continues its seed's stream after the initial noise (two draws
    // per value), so an image is the same whatever batch it was made in.
    std::vector<diffusion::NoiseRng> rngs;
    for (int b = 0; b < B; b++) rngs.push_back(diffusion::NoiseRng{p.seed + uint64_t(b), 2 * uint64_t(per)});
    auto noise = [&](std::span<float> z) {
        for (int b = 0; b < B; b++) diffusion::fill_normal(z.subspan(size_t(b) * per, per), rngs[size_t(b)]);
    };
    std::vector<float> in(per * size_t(N)), ts(static_cast<size_t>(N));
    int calls = 0;
    auto model = [&](std::span<const float> x_in, double t, std::span<float> out) {
        std::copy(x_in.begin(), x_in.end(), in.begin());
        if (cfg) std::copy(x_in.begin(), x_in.end(), in.begin() + ptrdiff_t(x_in.size()));
        std::fill(ts.begin(), ts.end(), float(t));
        u.rt->write_f32(u.io.in[0], in);
        u.rt->write_f32(u.io.in[1], ts);
        u.rt->run();
        const std::vector<float> eps = u.rt->read_f32(u.io.out);
        const size_t n = out.size();
        const double g = p.cfg_scale;
        for (size_t i = 0; i < n; i++)
            out[i] = cfg ? float(double(eps[i]) + g * (double(eps[n + i]) - double(eps[i]))) : eps[i];
        if (on_step) on_step(++calls, sampler.model_calls());
    };
    sampler.run(x, model, noise);
    return x;
}

std::vector<data::Bitmap> Pipeline::generate(const GenerationParams& p, const std::vector<float>* initial_noise,
                                              const std::function<void(int, int)>& on_step) {
    return to_images(generate_pixels(p, initial_noise, on_step), p.batch, p.height, p.width);
}

std::vector<float> Pipeline::generate_pixels(const GenerationParams& p, const std::vector<float>* initial_noise,
                                             const std::function<void(int, int)>& on_step, std::vector<float>* latents_out) {
    ensure_requests({p});  // every graph of the request in the memory at once
    const bool cfg = p.cfg_scale > 1.0;
    int chunks = 1;
    const std::vector<float> text = cfg ? encode_text({p.negative, p.prompt}, &chunks) : encode_text({p.prompt}, &chunks);
    const int L = chunks * int(model_.fam().tokens().sequence);
    const size_t row = size_t(L) * size_t(model_.cfg().text_width());
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
    const int64_t ds = model_.vae_config().downscale();
    return decode(latents, p.batch, int(p.height / ds), int(p.width / ds));
}

void Pipeline::set_profiling(bool on) {
    impl_->profiling = on;
    for (auto& [key, inst] : impl_->runtimes) inst.rt->set_profiling(on);
}

void Pipeline::reset_profile() {
    for (auto& [key, inst] : impl_->runtimes) inst.rt->reset_profile();
}

std::string Pipeline::profile_report(const GenerationParams& p, size_t top) {
    std::string out;
    for (const std::string& key : graphs_for(p)) {
        const auto it = impl_->runtimes.find(key);
        if (it == impl_->runtimes.end() || it->second.rt->profiled_runs() == 0) continue;
        out += gl::cat("\n== ", key, ": ", it->second.rt->profiled_runs(), " profiled runs ==\n");
        out += it->second.rt->profile_report(top);
    }
    return out.empty() ? std::string("no graph of this request ran profiled\n") : out;
}

std::string Pipeline::plan_report(const GenerationParams& p) {
    Impl& m = *impl_;
    const std::vector<std::string> keys = graphs_for(p);  // text, UNet, then the VAE pass(es)
    const bool cfg = p.cfg_scale > 1.0;
    auto bytes = [&](const std::string& key, gl::Category c) { return m.plans.at(key).plan.arena_bytes[size_t(c)]; };
    auto act = [&](const std::string& key) { return mib(bytes(key, gl::Category::activations)); };
    const int64_t ds = model_.vae_config().downscale();
    const VaeDecodePlan vp = plan_decode(p.batch, int(p.height / ds), int(p.width / ds));
    std::string s = gl::cat("memory plan (", gl::dtype_name(opt_.dtype), ", ", m.backend, "): ", p.width, "x",
                            p.height, ", batch ", p.batch, cfg ? " with CFG" : " without CFG", "\n");
    s += gl::cat("  text encoder   weights ", mib(bytes(m.text.key, gl::Category::frozen)), ", activations ", act(keys[0]),
                 " (", keys[0], ")\n");
    s += gl::cat("  UNet           weights ", mib(bytes(m.unet.key, gl::Category::frozen)), ", activations ", act(keys[1]),
                 " (", keys[1], ")\n");
    if (!m.loras.empty())
        s += gl::cat("  LoRA           ", m.loras.size(), " file", m.loras.size() > 1 ? "s" : "", ", parameters ",
                     mib(bytes(m.text.key, gl::Category::trainable) + bytes(m.unet.key, gl::Category::trainable)),
                     opt_.merge_loras ? " (merged into the weights)" : " (runtime branches)", "\n");
    s += gl::cat("  VAE decoder    weights ", mib(bytes(m.vae.key, gl::Category::frozen)), ", activations ",
                 mib(vp.activation_bytes), " (", vae_mode_name(vp.mode));
    if (vp.mode != VaeDecodePlan::Mode::whole_batch)
        s += gl::cat(": the whole batch would need ", mib(vp.whole_batch_bytes), ", over the budget of ",
                     mib(opt_.vae_budget_bytes));
    if (vp.mode == VaeDecodePlan::Mode::tiled) s += gl::cat("; ", vp.tiles, " tiles per image");
    s += ")\n";
    // The memory this request's graphs run in: weights once, one activation arena for the largest.
    std::vector<const gl::Plan*> mine;
    for (const std::string& k : {m.text.key, m.unet.key, m.vae.key}) mine.push_back(&m.plans.at(k).plan);
    for (const std::string& k : keys) mine.push_back(&m.plans.at(k).plan);
    const gl::SharedLayout L = gl::make_shared_layout(mine, m.backend);
    s += gl::cat("  total          ", mib(L.total_bytes()), " in one shared memory (weights once, the activations of "
                 "the largest graph", m.backend == "cuda" ? ", the CUDA scratch" : "", ")\n");
    const Budget b = memory_budget();
    s += gl::cat("  available      ", mib(b.bytes), " ", b.what, L.total_bytes() > b.bytes ? " (over it: refused)" : "",
                 "\n");
    s += "UNet graph (one model call):\n" + m.plans.at(keys[1]).plan.report(6);
    return s;
}

}  // namespace sd
