// Session: the run itself (caches, the shared memory and its runtimes, weights, training, saves).
#include <cstdio>
#include <deque>
#include <future>
#include <fstream>
#include <random>
#include <thread>

#include "data/loader.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/kohya.h"
#include "lora/max_norm.h"
#include "train/run/metadata.h"
#include "train/run/save.h"
#include "train/run/session_impl.h"
#include "train/noise_variants.h"
#include "train/run/tensorboard_log.h"

namespace train {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kVaeNoiseStream = 0x7661652d6e6f6973ull;  // per-batch latent sampling noise

// A field of /proc/self/status in bytes ("VmHWM": the peak resident set, file pages of the mapped
// model included; "RssAnon": the process's own memory now).
size_t proc_status_bytes(const char* field) {
    std::ifstream f("/proc/self/status");
    std::string line;
    const std::string key = std::string(field) + ":";
    while (std::getline(f, line))
        if (line.rfind(key, 0) == 0) return size_t(std::strtoull(line.c_str() + key.size(), nullptr, 10)) * 1024;
    return 0;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// What identifies the model's weights in cache keys: its files, sizes and times.
std::string model_identity(const sd::Sd15Files& m) {
    std::string s;
    for (const std::string& p : {m.unet_path, m.text_encoder_path, m.vae_path}) {
        std::error_code ec;
        const auto size = fs::file_size(p, ec);
        const auto t = fs::last_write_time(p, ec).time_since_epoch().count();
        s += gl::cat(p, ":", size, ":", t, "|");
    }
    return s;
}

// One micro-batch ready for the step graph.
struct Micro {
    size_t graph = 0;
    std::vector<float> latents, context;
    std::vector<float> loss_mask;  // [B, h, w] at the latents' size (masked-loss graphs)
    std::vector<int32_t> ids;
    int64_t images = 0;
};

}  // namespace

// The training loop and everything it holds (run() builds one).
class Runner {
public:
    Runner(Session::Impl& m, const std::atomic<bool>* stop) : m_(m), c_(m.cfg), stop_(stop) {}
    RunSummary run();

private:
    bool cache();  // false: stopped (the entries cached so far are kept)
    void allocate();
    void init_network();
    gl::Runtime& step_runtime(size_t i);
    Micro prepare(const data::Batch& b);
    void flush();
    void end_epoch(int64_t epoch);
    bool done() const { return trainer_->steps_done() >= m_.plan.counts.max_train_steps; }
    std::string save_lora(SaveKind kind, int64_t n, int64_t meta_epoch);
    std::string save_state(SaveKind kind, int64_t n);
    RunPosition position() const;
    void sample_host() { sum_.peak_host_anon_bytes = std::max(sum_.peak_host_anon_bytes, proc_status_bytes("RssAnon")); }

    Session::Impl& m_;
    const RunConfig& c_;
    const std::atomic<bool>* stop_;
    RunSummary sum_;
    bool cuda_ = false;
    std::unique_ptr<data::LatentCache> latent_cache_, text_cache_;
    data::CacheReport latent_keys_;
    data::TextCacheReport text_keys_;
    std::shared_ptr<gl::SharedMemory> mem_;
    std::vector<std::unique_ptr<gl::Runtime>> step_rt_, text_rt_, vae_rt_;
    std::unique_ptr<BucketTrainer> trainer_;
    std::map<std::string, std::string> run_md_;  // made at the first save
    RunFacts facts_;
    std::future<ModelFileInfo> model_info_;
    optim::LrSchedule schedule_;
    std::vector<Micro> group_;
    int64_t epoch_ = 1, batches_done_ = 0;
    std::deque<double> recent_losses_;
    double loss_sum_ = 0, last_wait_ = 0, last_loss_mean_ = 0;
    int64_t images_trained_ = 0;
    std::chrono::steady_clock::time_point last_step_t_, train_t0_;
    data::Loader* loader_ = nullptr;
    int64_t first_step_ = 0;  // steps done when this run's loop began (a resumed state's)
    // The last step saves: a stop right after one saves no copy (the state only when its position is
    // still the same: an epoch's end since then changes where a resume starts).
    int64_t step_lora_saved_ = -1;
    int64_t step_state_saved_ = -1;
    std::pair<int64_t, int64_t> state_saved_at_;  // its epoch_, batches_done_
    std::vector<std::pair<std::string, double>> timings_;  // the stages before training (RunStart)
};

bool Runner::cache() {
    const data::Dataset& ds = m_.data.dataset;
    const std::string identity = model_identity(m_.model);
    if (c_.cache_latents) {
        std::optional<fs::path> dir;
        if (c_.cache_latents_to_disk) dir = fs::path(c_.output_dir) / "latent_cache";
        if (dir) fs::create_directories(*dir);
        latent_cache_ = std::make_unique<data::LatentCache>(dir);
        const auto t = std::chrono::steady_clock::now();
        sd::VaeGraphEncoder enc(m_.model.vae_cfg, *m_.model.vae, "vae|" + identity,
                                  c_.no_half_vae ? gl::DType::f32 : activation_dtype(m_.step.precision), m_.backend);
        data::CacheOptions o;
        o.vae_batch_size = c_.vae_batch_size;
        o.seed = m_.seed;
        o.stop = stop_;
        auto last = std::chrono::steady_clock::now() - std::chrono::hours(1);
        o.progress = [this, &last](size_t done, size_t total, double rate) {  // a line every 2 s, and the last
            if (done < total && seconds_since(last) < 2.0) return;
            last = std::chrono::steady_clock::now();
            m_.message(gl::cat("caching latents: ", done, "/", total, " (", int(rate), " images/s)"));
        };
        latent_keys_ = data::cache_latents(ds, m_.data.buckets, *latent_cache_, enc, o);
        enc.release();
        timings_.emplace_back("caching latents", seconds_since(t));
        if (latent_keys_.interrupted) return false;
        data::add_skipped(sum_.skipped_images, latent_keys_.skipped);
        const auto& keys = latent_keys_.keys;
        GL_CHECK(std::any_of(keys.begin(), keys.end(), [](const std::string& k) { return !k.empty(); }),
                 "no image could be cached: all ", latent_keys_.skipped.size(), " failed:\n",
                 data::describe_skipped(latent_keys_.skipped));
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
        sd::ClipGraphEncoder enc(m_.model.clip_cfg, *m_.model.text_encoder, key, m_.step.clip_skip,
                                   chunks, activation_dtype(m_.step.precision), m_.backend,
                                   [tok, chunks, content](const std::string& s) { return tok->encode_chunks(s, content * chunks); });
        m_.message("caching text encoder outputs");
        text_keys_ = data::cache_text_outputs(ds, *text_cache_, enc);
        enc.release();
        timings_.emplace_back("caching text encoder outputs", seconds_since(t));
    }
    return true;
}

gl::Runtime& Runner::step_runtime(size_t i) {
    while (step_rt_.size() <= i) {
        const gl::Plan& p = m_.graphs->steps()[step_rt_.size()].plan;
        step_rt_.push_back(cuda_ ? gl::make_cuda_runtime(p, mem_) : gl::make_cpu_runtime(p, mem_));
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
    sd::load_unet(*s0.unet_weights, m_.model.unet_cfg, *m_.model.unet, *step_rt_[0]);
    if (s0.text_weights) sd::load_clip(*s0.text_weights, *m_.model.text_encoder, *step_rt_[0]);
    else if (!gs.text().empty()) sd::load_clip(*gs.text()[0].graph->weights, *m_.model.text_encoder, *text_rt_[0]);
    if (!gs.vae().empty()) sd::load_vae(*gs.vae()[0].graph->weights, m_.model.vae_cfg, *m_.model.vae, *vae_rt_[0]);
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
        return;
    }
    trainer_->init(m_.seed);
    if (c_.network_weights) {
        const gl::io::SafetensorsFile f(*c_.network_weights);
        const StepGraph& s0 = *m_.graphs->steps()[0].graph;
        const lora::LoadReport r = lora::load_lora(f, *s0.net, *step_rt_[0], sd::unet_ldm_names(m_.model.unet_cfg));
        m_.message(gl::cat("--network_weights ", *c_.network_weights, ": ", r.modules, " modules loaded (",
                           lora::lora_format_name(r.format), ")",
                           r.missing.empty() ? "" : gl::cat(", ", r.missing.size(), " not in the file keep their init"),
                           r.unexpected.empty() ? "" : gl::cat(", ", r.unexpected.size(), " file tensors unused")));
        trainer_->init_optimizer();  // after the parameters (Prodigy copies them)
    }
}

Micro Runner::prepare(const data::Batch& b) {
    GraphSet& gs = *m_.graphs;
    const int64_t f = m_.model.vae_cfg.downscale(), n = int64_t(b.samples.size());
    const GraphShape shape{b.bucket.h / f, b.bucket.w / f, n};
    Micro mi;
    mi.images = n;
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
        diffusion::NoiseRng rng{m_.seed ^ kVaeNoiseStream, uint64_t(b.step) * 0x100000000ull};
        diffusion::fill_normal(noise, rng);
        mi.latents = sd::vae_sample_latent(m_.model.vae_cfg, moments, noise);
    }
    if (m_.step.masked_loss)
        for (const data::Sample& s : b.samples) {
            // kohya's alpha masks: a sample without one (an opaque image, or a subset without
            // alpha_mask beside one with it) weighs every pixel 1.
            const std::vector<float> m = s.mask.empty() ? std::vector<float>(size_t(shape.latent_h * shape.latent_w), 1.0f)
                                                        : mask_to_latent(s.mask, 1, b.bucket.h, b.bucket.w, f);
            mi.loss_mask.insert(mi.loss_mask.end(), m.begin(), m.end());
        }
    const int chunks = m_.step.clip_chunks;
    std::vector<int32_t> ids;
    if (m_.step.train_text_encoder || !text_cache_)
        for (const data::Sample& s : b.samples) {
            const std::vector<int32_t> t =
                m_.model.tokenizer->encode_chunks(s.caption, m_.step.family->tokens().content * chunks);
            ids.insert(ids.end(), t.begin(), t.end());
        }
    if (m_.step.train_text_encoder) {
        mi.ids = std::move(ids);
    } else if (text_cache_) {
        for (const data::Sample& s : b.samples) {
            const std::string& key = text_keys_.keys.at(size_t(s.image));
            std::optional<data::Latent> l = text_cache_->get(key);
            GL_CHECK(l, "text encoder cache: no entry for ", m_.data.dataset.images[size_t(s.image)].path.string());
            mi.context.insert(mi.context.end(), l->data.begin(), l->data.end());
        }
    } else {
        const size_t ti = gs.text_index(n);
        gl::Runtime& rt = *text_rt_[ti];
        rt.write(gs.text()[ti].graph->ids, ids.data(), gl::DType::i32);
        rt.run();
        mi.context = rt.read_f32(gs.text()[ti].graph->context);
    }
    return mi;
}

RunPosition Runner::position() const {
    RunPosition p;
    p.step = trainer_->steps_done();
    p.epoch = epoch_;
    p.batches_done = batches_done_;
    p.seed = m_.seed;
    p.trainer = trainer_->state();
    p.run_identity = run_identity(m_.data, m_.seed, m_.step.batch, m_.step.grad_accum);
    return p;
}

std::string Runner::save_lora(SaveKind kind, int64_t n, int64_t meta_epoch) {
    const fs::path path = fs::path(c_.output_dir) / lora_file_name(c_, kind, n);
    if (run_md_.empty()) {
        facts_.model = model_info_.get();
        run_md_ = run_metadata(c_, m_.data, facts_);
    }
    const lora::SaveOptions so =
        lora_save_options(c_, save_metadata(run_md_, trainer_->steps_done(), meta_epoch));
    lora::save_kohya(path.string(), *m_.graphs->steps()[0].graph->net, *step_rt_[0], so);
    return path.string();
}

std::string Runner::save_state(SaveKind kind, int64_t n) {
    const fs::path dir = fs::path(c_.output_dir) / state_dir_name(c_, kind, n);
    save_run_state(dir, *trainer_, position());
    sum_.resume_hint = dir.string();
    return dir.string();
}

void Runner::flush() {
    if (group_.empty()) return;
    std::vector<MicroInput> in;
    int64_t images = 0;
    for (const Micro& mi : group_) {
        in.push_back({mi.graph, mi.latents,
                      mi.ids.empty() ? StepCond(std::span<const float>(mi.context)) : StepCond(std::span<const int32_t>(mi.ids)),
                      mi.loss_mask});
        images += mi.images;
    }
    const double factor = schedule_.multiplier(trainer_->updates_applied());
    const StepReport r = trainer_->update(in, factor);
    group_.clear();
    const StepGraph& s0 = *m_.graphs->steps()[0].graph;
    std::optional<lora::MaxNormReport> max_norm;
    if (c_.scale_weight_norms.value_or(0) > 0) {  // kohya: after every optimizer step, applied or not
        gl::Runtime& rt = *step_rt_[0];
        max_norm = lora::apply_max_norm(
            *s0.net, *c_.scale_weight_norms, [&rt](gl::ValueId v) { return rt.read_f32(v); },
            [&rt](gl::ValueId v, const std::vector<float>& x) { rt.write_f32(v, x); });
    }
    images_trained_ += images;
    if (sum_.startup_seconds == 0) sum_.startup_seconds = seconds_since(m_.t0);

    StepEvent e;
    e.step = r.step;
    e.total_steps = m_.plan.counts.max_train_steps;
    e.epoch = epoch_;
    e.epochs = m_.plan.counts.epochs;
    e.loss = r.loss;
    recent_losses_.push_back(r.loss);
    loss_sum_ += r.loss;
    if (int64_t(recent_losses_.size()) > m_.plan.counts.updates_per_epoch) {
        loss_sum_ -= recent_losses_.front();
        recent_losses_.pop_front();
    }
    e.loss_mean = loss_sum_ / double(recent_losses_.size());
    if (m_.step.train_unet) e.lr_unet = m_.step.unet_lr * factor;
    if (m_.step.train_text_encoder) e.lr_text_encoder = m_.step.text_encoder_lr * factor;
    const double next = schedule_.multiplier(trainer_->updates_applied());
    if (m_.step.train_unet) e.next_lr_unet = m_.step.unet_lr * next;
    if (m_.step.train_text_encoder) e.next_lr_text_encoder = m_.step.text_encoder_lr * next;
    const std::vector<std::string> groups = kohya_group_names(s0);
    for (size_t i = 0; i < groups.size(); i++) {
        const double lr = s0.update->groups()[i].lr;
        e.group_lrs.emplace_back(groups[i], lr * factor);
        e.next_group_lrs.emplace_back(groups[i], lr * next);
    }
    if (max_norm) {
        e.keys_scaled = max_norm->keys_scaled;
        e.average_key_norm = max_norm->average_key_norm;
        e.max_key_norm = max_norm->max_key_norm;
    }
    last_loss_mean_ = e.loss_mean;
    e.grad_norm = r.grad_norm;
    e.applied = r.applied;
    e.loss_scale = r.loss_scale;
    e.images = images;
    e.seconds = seconds_since(last_step_t_);
    last_step_t_ = std::chrono::steady_clock::now();
    e.data_wait_seconds = loader_->wait_seconds() - last_wait_;
    last_wait_ = loader_->wait_seconds();
    if (cuda_) {
        size_t free = 0, total = 0;
        gl::cuda_memory_info(&free, &total);
        e.device_bytes_in_use = total - free;
        sum_.peak_device_bytes = std::max(sum_.peak_device_bytes, e.device_bytes_in_use);
    }
    e.planned_bytes = m_.plan.memory.predicted_peak;
    sample_host();
    m_.obs->on_step(e);

    const int64_t step = r.step;
    if (c_.save_every_n_steps && step % *c_.save_every_n_steps == 0) {
        SaveEvent s{save_lora(SaveKind::step, step, epoch_ - 1), false, false, step, epoch_, {}};
        step_lora_saved_ = step;
        if (const auto old = step_to_remove(c_, step, false)) {
            const fs::path p = fs::path(c_.output_dir) / lora_file_name(c_, SaveKind::step, *old);
            if (fs::exists(p)) s.removed.push_back(p.string()), remove_save(p);
        }
        m_.obs->on_save(s);
        if (c_.save_state) {
            SaveEvent st{save_state(SaveKind::step, step), true, false, step, epoch_, {}};
            step_state_saved_ = step;
            state_saved_at_ = std::pair{epoch_, batches_done_};
            if (const auto old = step_to_remove(c_, step, true)) {
                const fs::path p = fs::path(c_.output_dir) / state_dir_name(c_, SaveKind::step, *old);
                if (fs::exists(p)) st.removed.push_back(p.string()), remove_save(p);
            }
            m_.obs->on_save(st);
        }
    }
    if (m_.sampler && m_.sampler->due_at_step(step)) m_.obs->on_sample(m_.sampler->sample(step, std::nullopt));
}

void Runner::end_epoch(int64_t epoch) {
    m_.obs->on_epoch({epoch, trainer_->steps_done(), last_loss_mean_});
    const int64_t every = c_.save_every_n_epochs.value_or(
        c_.save_n_epoch_ratio ? std::max<int64_t>(1, m_.plan.counts.epochs / *c_.save_n_epoch_ratio) : 0);
    if (every > 0 && epoch % every == 0 && epoch < m_.plan.counts.epochs) {
        const int64_t step = trainer_->steps_done();
        SaveEvent s{save_lora(SaveKind::epoch, epoch, epoch), false, false, step, epoch, {}};
        if (const auto old = epoch_to_remove(c_, epoch, false)) {
            const fs::path p = fs::path(c_.output_dir) / lora_file_name(c_, SaveKind::epoch, *old);
            if (fs::exists(p)) s.removed.push_back(p.string()), remove_save(p);
        }
        m_.obs->on_save(s);
        if (c_.save_state) {
            epoch_ = epoch + 1;  // the state resumes with the next epoch's first batch
            SaveEvent st{save_state(SaveKind::epoch, epoch), true, false, step, epoch, {}};
            epoch_ = epoch;
            if (const auto old = epoch_to_remove(c_, epoch, true)) {
                const fs::path p = fs::path(c_.output_dir) / state_dir_name(c_, SaveKind::epoch, *old);
                if (fs::exists(p)) st.removed.push_back(p.string()), remove_save(p);
            }
            m_.obs->on_save(st);
        }
    }
    if (m_.sampler && m_.sampler->due_at_epoch(epoch))
        m_.obs->on_sample(m_.sampler->sample(trainer_->steps_done(), epoch));
}

RunSummary Runner::run() {
    cuda_ = m_.backend == gl::Backend::cuda;
    RunFacts facts;
    facts.session_id = std::random_device{}();
    facts.started_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    facts.seed = m_.seed;
    facts.counts = m_.plan.counts;
    // The model's hashes (ss_sd_model_hash: the whole file read) are only needed by the first
    // save: they are computed beside caching and training.
    const std::string path = c_.pretrained_model_name_or_path;
    model_info_ = std::async(std::launch::async, [path] { return model_file_info(path); });
    facts_ = facts;
    sum_.skipped_images = m_.plan.skipped;
    schedule_ = lr_schedule(c_, m_.plan.counts.max_train_steps);

    if (!cache()) {
        sum_.interrupted = true;
        m_.message("stopped while caching latents: nothing trained or saved (cached latents are kept with "
                   "--cache_latents_to_disk)");
        return sum_;
    }
    sample_host();
    const auto load_t = std::chrono::steady_clock::now();
    allocate();
    sample_host();
    init_network();
    timings_.emplace_back("allocating, loading the weights, initialising the LoRA", seconds_since(load_t));
    first_step_ = trainer_->steps_done();
    data::Dataset& ds = m_.data.dataset;
    ds.config.batch_size = int(m_.step.batch);  // the loader cuts micro-batches
    data::LoaderOptions lo;
    lo.seed = m_.seed;
    lo.epochs = int(m_.plan.counts.epochs);
    lo.threads = std::max(1, std::min(c_.max_data_loader_n_workers, int(std::thread::hardware_concurrency())));
    lo.prior_loss_weight = c_.prior_loss_weight;
    if (latent_cache_) lo.latents = latent_cache_.get(), lo.latent_keys = &latent_keys_;
    lo.first_batch = size_t(batches_done_);
    data::Loader loader(ds, m_.data.buckets, lo);
    loader_ = &loader;
    const int64_t per_epoch = m_.plan.counts.batches_per_epoch;
    m_.message(gl::cat("training: ", m_.plan.counts.max_train_steps - trainer_->steps_done(), " steps"));
    RunStart start;
    start.output_dir = c_.output_dir;
    start.name = c_.output_name.value_or("last");  // kohya names the final file "last" without one
    start.first_step = first_step_;
    start.total_steps = m_.plan.counts.max_train_steps;
    start.epochs = m_.plan.counts.epochs;
    start.updates_per_epoch = m_.plan.counts.updates_per_epoch;
    start.resumed_from = c_.resume.value_or("");
    timings_.emplace_back("start-up (from the start to the training loop)", seconds_since(m_.t0));
    start.timings = timings_;
    start.tensorboard_dir = tensorboard_run_dir(c_, m_.started_at).string();
    m_.obs->on_start(start);
    if (m_.sampler && c_.sample_at_first && !m_.resume) m_.obs->on_sample(m_.sampler->sample(0, std::nullopt));
    train_t0_ = last_step_t_ = std::chrono::steady_clock::now();
    if (m_.resume && batches_done_ % per_epoch == 0 && batches_done_ > 0 && epoch_ == batches_done_ / per_epoch)
        end_epoch(epoch_++);  // the state was saved after its epoch's last update, before the epoch's end

    bool epoch_open = false;
    while (!done()) {
        if (group_.empty() && stop_ && stop_->load()) {  // between updates only
            sum_.interrupted = true;
            break;
        }
        std::optional<data::Batch> b = loader.next();
        if (!b || b->epoch != epoch_) {
            flush();
            if (epoch_open) end_epoch(epoch_);
            epoch_open = false;
            if (!b) break;
            epoch_ = b->epoch;
        }
        epoch_open = true;
        group_.push_back(prepare(*b));
        batches_done_ = b->step + 1;
        const bool epoch_last = batches_done_ % per_epoch == 0;
        if (int(group_.size()) == m_.step.grad_accum || epoch_last) flush();
        if (epoch_last || done()) {
            end_epoch(epoch_);
            epoch_open = false;
            if (epoch_last) epoch_++;
        }
    }
    sum_.train_seconds = seconds_since(train_t0_);
    sum_.steps = trainer_->steps_done();
    sum_.epochs = std::min(epoch_, m_.plan.counts.epochs);
    if (sum_.interrupted && trainer_->steps_done() == first_step_) {
        m_.message("stopped before the first step of this run: nothing new to save");
        if (c_.resume) sum_.resume_hint = *c_.resume;  // still the place to continue from
    } else if (sum_.interrupted) {  // a resumable save of where it stopped, unless that step was just saved
        const int64_t step = trainer_->steps_done();
        if (step_lora_saved_ == step) {
            sum_.final_file = (fs::path(c_.output_dir) / lora_file_name(c_, SaveKind::step, step)).string();
        } else {
            sum_.final_file = save_lora(SaveKind::step, step, epoch_ - 1);
            m_.obs->on_save({sum_.final_file, false, false, step, epoch_, {}});
        }
        if (step_state_saved_ != step || state_saved_at_ != std::pair{epoch_, batches_done_})
            m_.obs->on_save({save_state(SaveKind::step, step), true, false, step, epoch_, {}});
    } else {
        if (c_.save_state || c_.save_state_on_train_end)
            m_.obs->on_save({save_state(SaveKind::last, 0), true, true, sum_.steps, m_.plan.counts.epochs, {}});
        sum_.final_file = save_lora(SaveKind::last, 0, m_.plan.counts.epochs);
        m_.obs->on_save({sum_.final_file, false, true, sum_.steps, m_.plan.counts.epochs, {}});
    }
    data::add_skipped(sum_.skipped_images, loader.skipped());
    loader_ = nullptr;
    sum_.images_per_second = sum_.train_seconds > 0 ? double(images_trained_) / sum_.train_seconds : 0;
    sum_.planned_device_bytes = m_.plan.memory.predicted_peak;
    sample_host();
    sum_.peak_host_bytes = proc_status_bytes("VmHWM");
    return sum_;
}

RunSummary Session::run(const std::atomic<bool>* stop) {
    prepare();
    if (impl_->cfg.dry_run) {
        RunSummary s;
        s.dry_run = true;
        s.planned_device_bytes = impl_->plan.memory.predicted_peak;
        s.peak_host_bytes = proc_status_bytes("VmHWM");
        s.peak_host_anon_bytes = proc_status_bytes("RssAnon");
        impl_->obs->on_end(s);
        return s;
    }
    GL_CHECK(!impl_->device, "sdtrain: this session was planned for a simulated ", impl_->device->backend,
             " device (plan_for); it plans, it does not run");
    const std::vector<std::string> removed = remove_run_leftovers(impl_->cfg.output_dir);
    if (!removed.empty()) {
        std::string list;
        for (const std::string& p : removed) list += (list.empty() ? "" : ", ") + p;
        impl_->message(gl::cat("note: removed what killed runs left in --output_dir (", removed.size(), "): ", list));
    }
    Runner r(*impl_, stop);
    RunSummary s;
    try {
        s = r.run();
    } catch (const std::exception& e) {
        impl_->obs->on_error(e.what());
        remove_created_dirs(impl_->created_dirs);  // only while empty: a run that wrote keeps its folder
        throw;
    }
    impl_->obs->on_end(s);
    return s;
}

}  // namespace train
