// Session: the run itself (the training loop, its validation passes, saves and the end).
#include <cstdio>
#include <fstream>
#include <random>

#include "lora/kohya.h"
#include "lora/max_norm.h"
#include "train/run/ranks.h"
#include "train/run/runner.h"
#include "train/run/tensorboard_log.h"

namespace train {

namespace fs = std::filesystem;

size_t proc_status_bytes(const char* field) {
    std::ifstream f("/proc/self/status");
    std::string line;
    const std::string key = std::string(field) + ":";
    while (std::getline(f, line))
        if (line.rfind(key, 0) == 0) return size_t(std::strtoull(line.c_str() + key.size(), nullptr, 10)) * 1024;
    return 0;
}

RunPosition Runner::position() const {
    RunPosition p;
    p.step = trainer_->steps_done();
    p.epoch = epoch_;
    p.batches_done = batches_done_;
    p.start_step = start_step_;
    p.start_batch = start_batch_;
    p.seed = m_.seed;
    p.world_size = m_.world();
    p.trainer = trainer_->state();
    p.run_identity = run_identity(m_.data, m_.seed, m_.step.batch, m_.step.grad_accum);
    return p;
}

std::string Runner::save_lora(SaveKind kind, int64_t n, int64_t meta_epoch) {
    const fs::path path = fs::path(c_.output_dir) / lora_file_name(c_, kind, n);
    const optim::EvalWeights eval = eval_weights();
    if (m_.comm)  // every rank applied the same updates: the LoRA must be the same bits everywhere
        check_ranks_agree(*m_.comm, gl::cat("the LoRA at step ", trainer_->steps_done()), lora_digest(*trainer_),
                          "the ranks' updates diverged");
    if (!m_.leader()) return path.string();
    if (run_md_.empty()) {
        facts_.model = model_info_.get();
        if (vae_info_.valid()) facts_.vae = vae_info_.get();
        run_md_ = run_metadata(c_, m_.data, facts_);
    }
    const lora::SaveOptions so =
        lora_save_options(c_, save_metadata(run_md_, trainer_->steps_done(), meta_epoch));
    lora::save_kohya(path.string(), *m_.graphs->steps()[0].graph->net, *step_rt_[0], so);
    return path.string();
}

std::string Runner::save_state(SaveKind kind, int64_t n) {
    const fs::path dir = fs::path(c_.output_dir) / state_dir_name(c_, kind, n);
    if (m_.leader()) save_run_state(dir, *trainer_, position());
    sum_.resume_hint = dir.string();
    return dir.string();
}

void Runner::flush() {
    if (group_.empty()) return;
    std::vector<MicroInput> in;
    int64_t images = 0;
    for (const Micro& mi : group_) {
        in.push_back(mi.input());
        images += m_.comm ? mi.global : mi.images;  // several ranks: the global batch's
    }
    const double factor = lr_factor(trainer_->updates_applied());
    StepReport r = trainer_->update(in, factor);
    group_.clear();
    if (m_.comm) {  // the global loss, and whether any rank was asked to stop
        const UpdateExchange x = exchange_update(*m_.comm, r.loss, stop_ && stop_->load());
        r.loss = x.loss;
        stop_agreed_ = x.stop;
    }
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
    const double next = lr_factor(trainer_->updates_applied());
    if (m_.step.train_unet) e.next_lr_unet = m_.step.unet_lr * next;
    if (m_.step.train_text_encoder) e.next_lr_text_encoder = m_.step.text_encoder_lr * next;
    const std::vector<std::string> groups = kohya_group_names(s0);
    for (size_t i = 0; i < groups.size(); i++) {
        const double lr = s0.update->groups()[i].lr;
        e.group_lrs.emplace_back(groups[i], lr * factor);
        e.next_group_lrs.emplace_back(groups[i], lr * next);
    }
    e.d_estimate = s0.update->optimizer().d_estimate(*step_rt_[0]);
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
    if (m_.sampler && m_.leader() && m_.sampler->due_at_step(step)) {
        const optim::EvalWeights eval = eval_weights();
        m_.obs->on_sample(m_.sampler->sample(step, std::nullopt));
    }
    if (val_ && validation_due_at_step(c_, step)) validate(epoch_, false);
}

void Runner::end_epoch(int64_t epoch) {
    // kohya validates before it logs the epoch's loss and saves.
    if (val_ && validation_due_at_epoch(c_, epoch)) validate(epoch, true);
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
    if (m_.sampler && m_.leader() && m_.sampler->due_at_epoch(epoch)) {
        const optim::EvalWeights eval = eval_weights();
        m_.obs->on_sample(m_.sampler->sample(trainer_->steps_done(), epoch));
    }
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
    if (m_.leader()) {  // the files are rank 0's to write
        model_info_ = std::async(std::launch::async, [path] { return model_file_info(path); });
        if (c_.vae) vae_info_ = std::async(std::launch::async, [vae = *c_.vae] { return model_file_info(vae); });
    }
    facts_ = facts;
    sum_.skipped_images = m_.plan.skipped;
    schedule_ = lr_schedule(c_, m_.plan.counts.max_train_steps * m_.world());  // lr_factor: kohya's x N

    if (m_.data.validation) {
        val_.emplace();
        const Objective o = c_.objective();
        val_->timesteps = validation_timesteps(o.min_timestep, o.max_timestep);
        val_->seed = validation_draw_seed(c_, m_.seed);
    }
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
    if (m_.comm) check_ranks_agree(*m_.comm, "the initial LoRA", lora_digest(*trainer_));
    first_step_ = trainer_->steps_done();
    data::Dataset& ds = m_.data.dataset;
    ds.config.batch_size = int(m_.step.batch);  // the loader cuts micro-batches
    if (val_) m_.data.validation->dataset.config.batch_size = int(m_.step.batch);
    data::LoaderOptions lo;
    lo.seed = m_.seed;
    lo.epochs = int(m_.plan.counts.epochs);
    lo.threads = loader_threads();
    lo.prior_loss_weight = c_.prior_loss_weight;
    if (latent_cache_) lo.latents = latent_cache_.get(), lo.latent_keys = &latent_keys_;
    lo.first_batch = size_t(batches_done_);
    lo.max_train_steps = m_.plan.counts.max_train_steps;
    lo.batches_per_update = m_.step.grad_accum;
    lo.rank = m_.rank();
    lo.world = m_.world();
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
    if (m_.sampler && m_.leader() && c_.sample_at_first && !m_.resume) {
        const optim::EvalWeights eval = eval_weights();
        m_.obs->on_sample(m_.sampler->sample(0, std::nullopt));
    }
    train_t0_ = last_step_t_ = std::chrono::steady_clock::now();
    if (m_.resume && batches_done_ % per_epoch == 0 && batches_done_ > 0 && epoch_ == batches_done_ / per_epoch)
        end_epoch(epoch_++);  // the state was saved after its epoch's last update, before the epoch's end

    bool epoch_open = false;
    while (!done()) {
        if (group_.empty() && stop_requested()) {  // between updates only
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
    // Several ranks: rank 0 alone writes into the folder (another rank's temporaries are its own).
    const std::vector<std::string> removed =
        impl_->leader() ? remove_run_leftovers(impl_->cfg.output_dir) : std::vector<std::string>{};
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
