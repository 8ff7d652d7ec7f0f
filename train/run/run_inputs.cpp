// Session: what the training loop stands on (the caches of the training and validation sets, the
// shared memory and its runtimes, the weights, the LoRA) and the batches it runs.
#include <algorithm>
#include <thread>

#include "ggml-lite/io/safetensors.h"
#include "lora/kohya.h"
#include "models/sd15/prompt_weights.h"
#include "train/noise_variants.h"
#include "train/run/initial_step.h"
#include "train/run/runner.h"

namespace train {

namespace fs = std::filesystem;

namespace {

// The latents' VAE sampling noise (latents not cached): a stream per batch of the training set,
// and of the validation set, which a pass draws alike every time.
constexpr uint64_t kVaeNoiseStream = 0x7661652d6e6f6973ull;
constexpr uint64_t kValidationVaeNoiseStream = 0x76616c2d7661652dull;

// What identifies the model's weights in cache keys: its files, sizes and times.
std::string model_identity(const models::ModelFiles& m) {
    std::string s;
    for (const std::string& p : {m.unet_path, m.text_encoder_path, m.vae_path}) {
        std::error_code ec;
        const auto size = fs::file_size(p, ec);
        const auto t = fs::last_write_time(p, ec).time_since_epoch().count();
        s += gl::cat(p, ":", size, ":", t, "|");
    }
    return s;
}

}  // namespace

MicroInput Micro::input() const {
    const StepCond cond = ids.empty() ? StepCond(std::span<const float>(context)) : StepCond(std::span<const int32_t>(ids));
    MicroInput in{graph, latents, cond, loss_mask, sample_weights, token_weights};
    if (global > 0) in.global = global, in.begin = begin, in.count = images;
    return in;
}

bool Runner::cache() {
    const data::Dataset& ds = m_.data.dataset;
    ValidationData* vd = m_.data.validation ? &*m_.data.validation : nullptr;
    const std::string identity = model_identity(m_.model);
    if (c_.cache_latents) {
        std::optional<fs::path> dir;
        if (c_.cache_latents_to_disk) dir = fs::path(c_.output_dir) / "latent_cache";
        if (dir) fs::create_directories(*dir);
        latent_cache_ = std::make_unique<data::LatentCache>(dir);
        const auto t = std::chrono::steady_clock::now();
        sd::VaeGraphEncoder enc(m_.model.vae_config(), *m_.model.vae, "vae|" + identity,
                                  c_.no_half_vae ? gl::DType::f32 : activation_dtype(m_.step.precision), m_.backend);
        data::CacheOptions o;
        o.vae_batch_size = c_.vae_batch_size;
        o.seed = m_.seed;
        o.stop = stop_;
        o.kohya_npz = c_.cache_latents_to_disk;  // kohya's *_sd.npz beside the images, as kohya reuses them
        const auto progress = [this](const std::string& what) {  // a line every 2 s, and the last
            auto last = std::chrono::steady_clock::now() - std::chrono::hours(1);
            return [this, what, last](size_t done, size_t total, double rate) mutable {
                if (done < total && seconds_since(last) < 2.0) return;
                last = std::chrono::steady_clock::now();
                m_.message(gl::cat("caching ", what, ": ", done, "/", total, " (", int(rate), " images/s)"));
            };
        };
        o.progress = progress("latents");
        latent_keys_ = data::cache_latents(ds, m_.data.buckets, *latent_cache_, enc, o);
        if (vd && !latent_keys_.interrupted) {
            o.progress = progress("the validation set's latents");
            val_->latent_keys = data::cache_latents(vd->dataset, vd->buckets, *latent_cache_, enc, o);
        }
        enc.release();
        if (o.kohya_npz)
            for (const data::CacheReport* r : {&latent_keys_, vd ? &val_->latent_keys : nullptr}) {
                if (!r) continue;
                for (const std::string& w : r->kohya_ignored) m_.message("warning: kohya latent file not used: " + w);
                if (r->kohya_reused || !r->kohya_ignored.empty())
                    m_.message(gl::cat("latents", r == &latent_keys_ ? "" : " (validation set)", ": ", r->kohya_reused,
                                       " of ", r->total, " entries reused from kohya's *_sd.npz files, ",
                                       r->kohya_ignored.size(), " such files ignored, ", r->encoded, " encoded"));
            }
        timings_.emplace_back("caching latents", seconds_since(t));
        if (latent_keys_.interrupted || (vd && val_->latent_keys.interrupted)) return false;
        data::add_skipped(sum_.skipped_images, latent_keys_.skipped);
        const auto& keys = latent_keys_.keys;
        GL_CHECK(std::any_of(keys.begin(), keys.end(), [](const std::string& k) { return !k.empty(); }),
                 "no image could be cached: all ", latent_keys_.skipped.size(), " failed:\n",
                 data::describe_skipped(latent_keys_.skipped));
        if (vd) data::add_skipped(sum_.skipped_images, val_->latent_keys.skipped);
    }
    if (m_.cache_text) {
        std::optional<fs::path> dir;
        if (c_.cache_text_encoder_outputs_to_disk) dir = fs::path(c_.output_dir) / "text_encoder_cache";
        if (dir) fs::create_directories(*dir);
        text_cache_ = std::make_unique<data::LatentCache>(dir);
        const auto t = std::chrono::steady_clock::now();
        const int chunks = m_.step.clip_chunks, content = m_.step.family->tokens().content;
        auto tok = m_.model.tokenizer;
        const std::string key = "clip|" + identity + lora::base_weights_identity(c_.base_weight_files());
        sd::TextGraphEncoder enc(m_.model, key, m_.step.clip_skip,
                                   chunks, activation_dtype(m_.step.precision), m_.backend,
                                   [tok, chunks, content](const std::string& s) { return tok->encode_chunks(s, content * chunks); });
        if (c_.weighted_captions)
            enc.set_weighted([tok, chunks, content](const std::string& s) {
                return sd::encode_weighted(*tok, s, content * chunks);
            });
        m_.message("caching text encoder outputs");
        text_keys_ = data::cache_text_outputs(ds, *text_cache_, enc);
        if (vd) val_->text_keys = data::cache_text_outputs(vd->dataset, *text_cache_, enc);
        enc.release();
        timings_.emplace_back("caching text encoder outputs", seconds_since(t));
    }
    return true;
}

gl::Runtime& Runner::step_runtime(size_t i) {
    while (step_rt_.size() <= i) {
        const gl::Plan& p = m_.graphs->steps()[step_rt_.size()].plan;
        step_rt_.push_back(cuda_ ? gl::make_cuda_runtime(p, mem_) : gl::make_cpu_runtime(p, mem_));
        step_rt_.back()->set_communicator(m_.comm);  // the step's all_reduce (several ranks)
    }
    return *step_rt_[i];
}

void Runner::allocate() {
    GraphSet& gs = *m_.graphs;
    m_.message(gl::cat("allocating ", gl::format_bytes(gs.layout().total_bytes()), " on ", m_.plan.memory.backend));
    mem_ = gl::make_shared_memory(gs.layout());
    auto make = [&](const gl::Plan& p) { return cuda_ ? gl::make_cuda_runtime(p, mem_) : gl::make_cpu_runtime(p, mem_); };
    for (size_t i = 0; i < gs.steps().size(); i++) step_runtime(i);
    for (const GraphSet::Text& t : gs.text()) text_rt_.push_back(make(t.plan));
    for (const GraphSet::Vae& v : gs.vae()) vae_rt_.push_back(make(v.plan));

    // Weights are read from the mapped files tensor by tensor, converted on the way in.
    m_.message("loading the weights");
    StepGraph& s0 = *gs.steps()[0].graph;
    const models::Family& family = m_.model.fam();
    family.load(models::Part::unet, *s0.unet_weights, m_.model, *step_rt_[0]);
    if (s0.text_weights) family.load(models::Part::text_encoder, *s0.text_weights, m_.model, *step_rt_[0]);
    else if (!gs.text().empty())
        family.load(models::Part::text_encoder, *gs.text()[0].graph->weights, m_.model, *text_rt_[0]);
    if (!gs.vae().empty()) sd::load_vae(*gs.vae()[0].graph->weights, m_.model.vae_config(), *m_.model.vae, *vae_rt_[0]);
    if (m_.sampler) m_.sampler->use_memory(mem_, s0.text_weights || !gs.text().empty());
    // Nothing reads the mapped files again: unmapping them gives their pages back.
    m_.model.unet.reset();
    m_.model.text_encoder.reset();
    m_.model.vae.reset();

    std::vector<BucketTrainer::Member> members;
    for (size_t i = 0; i < gs.steps().size(); i++) members.push_back({gs.steps()[i].graph.get(), step_rt_[i].get()});
    TrainerOptions to;
    to.objective = c_.objective();
    to.seed = m_.seed;
    trainer_ = std::make_unique<BucketTrainer>(std::move(members), to);
}

void Runner::init_network() {
    if (m_.resume) {
        m_.message("resuming from " + *c_.resume);
        const std::string note = load_run_state(*c_.resume, *trainer_, *m_.resume);
        if (!note.empty()) m_.message("note: " + note);
        epoch_ = m_.resume->epoch;
        batches_done_ = m_.resume->batches_done;
        start_step_ = m_.resume->start_step;
        start_batch_ = m_.resume->start_batch;
        return;
    }
    trainer_->init(m_.seed);
    if (const std::optional<KohyaStart> s = kohya_start(c_, m_.plan.counts)) {
        epoch_ = s->epoch;
        batches_done_ = start_batch_ = s->first_batch;
        start_step_ = s->step;
        trainer_->count_steps_from(s->step);
    }
    if (c_.network_weights) {
        const gl::io::SafetensorsFile f(*c_.network_weights);
        const StepGraph& s0 = *m_.graphs->steps()[0].graph;
        const lora::LoadReport r = lora::load_lora(f, *s0.net, *step_rt_[0], m_.model.fam().ldm_names(m_.model.cfg()));
        m_.message(gl::cat("--network_weights ", *c_.network_weights, ": ", r.modules, " modules loaded (",
                           lora::lora_format_name(r.format), ")",
                           r.missing.empty() ? "" : gl::cat(", ", r.missing.size(), " not in the file keep their init"),
                           r.unexpected.empty() ? "" : gl::cat(", ", r.unexpected.size(), " file tensors unused")));
        trainer_->init_optimizer();  // after the parameters (Prodigy copies them)
    }
}

Micro Runner::stand_in(const data::Batch& b) {
    const GraphSet& gs = *m_.graphs;
    const int64_t f = m_.model.vae_config().downscale();
    std::optional<size_t> pick;
    for (size_t i = 0; i < gs.steps().size(); i++) {
        const GraphShape& sh = gs.steps()[i].shape;
        if (sh.latent_h == b.bucket.h / f && sh.latent_w == b.bucket.w / f &&
            (!pick || sh.batch < gs.steps()[*pick].shape.batch))
            pick = i;
    }
    GL_CHECK(pick, "data parallelism: no step graph of bucket ", b.bucket.w, "x", b.bucket.h, " for a rank without images");
    const StepGraph& s = *gs.steps()[*pick].graph;
    Micro mi;
    mi.graph = *pick;
    mi.global = b.global_images;
    mi.begin = b.first;
    mi.latents.assign(size_t(s.latent_numel()), 0.0f);
    if (s.opt.train_text_encoder) mi.ids.assign(size_t(s.ids_numel()), 0);
    else mi.context.assign(size_t(s.context_numel()), 0.0f);
    if (s.opt.masked_loss) mi.loss_mask.assign(size_t(s.opt.batch * s.opt.latent_h * s.opt.latent_w), 1.0f);
    return mi;
}

Micro Runner::prepare(const data::Batch& b, bool validation) {
    const data::Dataset& ds = validation ? m_.data.validation->dataset : m_.data.dataset;
    GraphSet& gs = *m_.graphs;
    const int64_t f = m_.model.vae_config().downscale(), n = int64_t(b.samples.size());
    if (n == 0) return stand_in(b);  // several ranks: none of this global batch's images is here
    const GraphShape shape{b.bucket.h / f, b.bucket.w / f, n};
    Micro mi;
    mi.images = n;
    if (m_.comm && !validation) mi.global = b.global_images, mi.begin = b.first;
    const size_t before = gs.steps().size();
    mi.graph = gs.step_index(shape);
    if (gs.steps().size() > before) {  // a shape the plan did not list: it runs in the same memory
        trainer_->add({gs.steps()[mi.graph].graph.get(), &step_runtime(mi.graph)});
        while (text_rt_.size() < gs.text().size())
            text_rt_.push_back(cuda_ ? gl::make_cuda_runtime(gs.text()[text_rt_.size()].plan, mem_)
                                     : gl::make_cpu_runtime(gs.text()[text_rt_.size()].plan, mem_));
        while (vae_rt_.size() < gs.vae().size())
            vae_rt_.push_back(cuda_ ? gl::make_cuda_runtime(gs.vae()[vae_rt_.size()].plan, mem_)
                                    : gl::make_cpu_runtime(gs.vae()[vae_rt_.size()].plan, mem_));
    }
    if (latent_cache_) {
        for (const data::Sample& s : b.samples) mi.latents.insert(mi.latents.end(), s.latent.begin(), s.latent.end());
    } else {
        std::vector<float> x;
        for (const data::Sample& s : b.samples) x.insert(x.end(), s.pixels.begin(), s.pixels.end());
        const size_t vi = gs.vae_index(shape);
        gl::Runtime& rt = *vae_rt_[vi];
        rt.write_f32(gs.vae()[vi].graph->x, x);
        rt.run();
        const std::vector<float> moments = rt.read_f32(gs.vae()[vi].graph->moments);
        std::vector<float> noise(moments.size() / 2);
        const uint64_t stream = validation ? val_->seed ^ kValidationVaeNoiseStream : m_.seed ^ kVaeNoiseStream;
        // A rank's slice draws from its first image's place in the global batch.
        const uint64_t skip = 2 * uint64_t(b.first) * uint64_t(noise.size() / size_t(n));
        diffusion::NoiseRng rng{stream, uint64_t(b.step) * 0x100000000ull + skip};
        diffusion::fill_normal(noise, rng);
        mi.latents = sd::vae_sample_latent(m_.model.vae_config(), moments, noise);
    }
    if (m_.step.sample_weights)
        for (const data::Sample& s : b.samples) mi.sample_weights.push_back(s.loss_weight);
    if (m_.step.masked_loss)
        for (const data::Sample& s : b.samples) {
            // kohya's alpha masks: a sample without one (an opaque image, or a subset without
            // alpha_mask beside one with it) weighs every pixel 1.
            const std::vector<float> m = s.mask.empty() ? std::vector<float>(size_t(shape.latent_h * shape.latent_w), 1.0f)
                                                        : mask_to_latent(s.mask, 1, b.bucket.h, b.bucket.w, f);
            mi.loss_mask.insert(mi.loss_mask.end(), m.begin(), m.end());
        }
    const int chunks = m_.step.clip_chunks, max_tokens = m_.step.family->tokens().content * chunks;
    std::vector<int32_t> ids;
    std::vector<float> token_weights;  // kohya's weighted captions: per context row
    if (m_.step.train_text_encoder || !text_cache_)
        for (const data::Sample& s : b.samples) {
            if (c_.weighted_captions) {
                const sd::WeightedIds w = sd::encode_weighted(*m_.model.tokenizer, s.caption, max_tokens);
                ids.insert(ids.end(), w.ids.begin(), w.ids.end());
                token_weights.insert(token_weights.end(), w.weights.begin(), w.weights.end());
            } else {
                const std::vector<int32_t> t = m_.model.tokenizer->encode_chunks(s.caption, max_tokens);
                ids.insert(ids.end(), t.begin(), t.end());
            }
        }
    if (m_.step.train_text_encoder) {
        mi.ids = std::move(ids);
        mi.token_weights = std::move(token_weights);
    } else if (text_cache_) {
        for (const data::Sample& s : b.samples) {
            const std::string& key = (validation ? val_->text_keys : text_keys_).keys.at(size_t(s.image));
            std::optional<data::Latent> l = text_cache_->get(key);
            GL_CHECK(l, "text encoder cache: no entry for ", ds.images[size_t(s.image)].path.string());
            mi.context.insert(mi.context.end(), l->data.begin(), l->data.end());
        }
    } else {
        const size_t ti = gs.text_index(n);
        gl::Runtime& rt = *text_rt_[ti];
        rt.write(gs.text()[ti].graph->ids, ids.data(), gl::DType::i32);
        rt.run();
        mi.context = rt.read_f32(gs.text()[ti].graph->context);
        if (c_.weighted_captions) {
            const int64_t rows = m_.step.family->tokens().context_rows(chunks);
            sd::apply_token_weights(mi.context, token_weights, n, rows, m_.model.cfg().text_width());
        }
    }
    return mi;
}

int Runner::loader_threads() const {
    return std::max(1, std::min(c_.max_data_loader_n_workers, int(std::thread::hardware_concurrency())));
}

}  // namespace train
