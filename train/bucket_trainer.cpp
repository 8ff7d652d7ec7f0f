#include "train/bucket_trainer.h"

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace train {

namespace {
optim::LossScaler::Options unit_scale() {
    optim::LossScaler::Options o;
    o.init_scale = 1.0;
    return o;
}

// The names of a graph's parameter groups and their parameters: equal across a run's graphs.
std::string group_signature(const StepGraph& s) {
    std::string sig;
    for (const ParamGroup& grp : s.update->groups()) {
        sig += grp.name + gl::cat("(", grp.params.size(), ",", grp.lr, ")");
        for (gl::ValueId p : grp.params) sig += "," + s.g.v(p).name;
    }
    return sig;
}
}  // namespace

BucketTrainer::BucketTrainer(std::vector<Member> graphs, const TrainerOptions& o)
    : graphs_(std::move(graphs)), o_(o), sched_(diffusion::DdpmSchedule::sd15()), rng_{o.seed, 0},
      scaler_(!graphs_.empty() && graphs_[0].step && graphs_[0].step->opt.precision == Precision::fp16 ? o.loss_scale
                                                                                                      : unit_scale()) {
    GL_CHECK(!graphs_.empty(), "bucket trainer: no step graphs");
    o_.objective.validate(sched_);
    for (size_t i = 0; i < graphs_.size(); i++) check(i);
    for (const Member& m : graphs_) write_objective_tables(*m.step, *m.rt, o_.objective, sched_);
}

void BucketTrainer::check(size_t i) const {
    const Member& m = graphs_[i];
    GL_CHECK(m.step && m.rt, "bucket trainer: graph ", i, " has no step graph or runtime");
    const StepGraph& s = *m.step;
    const StepGraph& first = *graphs_[0].step;
    check_objective_fits(o_.objective, s, gl::cat("bucket trainer: graph ", i));
    GL_CHECK(s.opt.grad_accum == first.opt.grad_accum && s.opt.precision == first.opt.precision &&
                 std::string(s.opt.optimizer.name()) == first.opt.optimizer.name() &&
                 s.opt.train_text_encoder == first.opt.train_text_encoder,
             "bucket trainer: graph ", i, " differs from graph 0 in accumulation, precision, optimizer or text encoder");
    GL_CHECK(group_signature(s) == group_signature(first), "bucket trainer: graph ", i,
             "'s parameter groups differ from graph 0's");
    const gl::Graph& pg = m.rt->plan().graph;
    GL_CHECK(pg.value_count() >= s.g.value_count() && pg.v(s.latents).name == s.g.v(s.latents).name &&
                 pg.shape(s.latents) == s.g.shape(s.latents),
             "bucket trainer: runtime ", i, " does not run its step graph");
}

void BucketTrainer::check_input(const MicroInput& in, size_t k) const {
    GL_CHECK(in.graph < graphs_.size(), "bucket trainer: graph ", in.graph, " of ", graphs_.size());
    const StepGraph& s = *graphs_[in.graph].step;
    const int64_t n = s.latent_numel();
    GL_CHECK(int64_t(in.latents.size()) == n, "bucket trainer: micro-batch ", k + 1, " holds ", in.latents.size(),
             " latent values, graph ", in.graph, " takes ", n);
    GL_CHECK(in.global == 0 || (s.update->reduces() && in.begin >= 0 && in.count >= 0 &&
                                in.begin + in.count <= in.global &&
                                (in.count == 0 || in.count == s.opt.batch)),
             "bucket trainer: micro-batch ", k + 1, " is images [", in.begin, ", ", in.begin + in.count, ") of a global ",
             in.global, " on graph ", in.graph, " (batch ", s.opt.batch, s.update->reduces() ? "" : ", not data-parallel",
             ")");
    const bool ids = std::holds_alternative<std::span<const int32_t>>(in.cond);
    const size_t cond_n = std::visit([](auto c) { return c.size(); }, in.cond);
    GL_CHECK(ids == s.opt.train_text_encoder && int64_t(cond_n) == (ids ? s.ids_numel() : s.context_numel()),
             "bucket trainer: micro-batch ", k + 1, " has ", cond_n, ids ? " token ids" : " context values",
             ", graph ", in.graph, " takes ", ids ? s.ids_numel() : s.context_numel(),
             s.opt.train_text_encoder ? " token ids" : " context values");
}

size_t BucketTrainer::add(Member m) {
    graphs_.push_back(m);
    try {
        check(graphs_.size() - 1);
    } catch (...) {
        graphs_.pop_back();
        throw;
    }
    write_objective_tables(*m.step, *m.rt, o_.objective, sched_);
    return graphs_.size() - 1;
}

void BucketTrainer::init(uint64_t lora_seed) {
    graphs_[0].step->net->init(*graphs_[0].rt, lora_seed);
    init_optimizer();
}

void BucketTrainer::init_optimizer() {
    graphs_[0].step->update->init_state(*graphs_[0].rt);
    applied_ = 0;
}

StepReport BucketTrainer::update(const std::vector<MicroInput>& micro, double lr_factor) {
    const int accum = graphs_[0].step->opt.grad_accum;
    GL_CHECK(!micro.empty() && int(micro.size()) <= accum, "bucket trainer: an update takes 1 to ", accum,
             " micro-batches, got ", micro.size());
    StepReport r;
    r.step = steps_ + 1;
    r.loss_scale = scaler_.scale();
    for (size_t k = 0; k < micro.size(); k++) {
        const MicroInput& in = micro[k];
        check_input(in, k);
        StepGraph& s = *graphs_[in.graph].step;
        gl::Runtime& rt = *graphs_[in.graph].rt;
        const int64_t n = s.latent_numel();
        const bool last = k + 1 == micro.size();
        const StepDraw d = draw(in, s);
        uint64_t dropout_seed = rng_.next_u64();
        if (in.global > 0) dropout_seed ^= uint64_t(in.begin) * 0x9E3779B97F4A7C15ull;  // the ranks' masks differ
        s.net->sample_dropout(rt, dropout_seed);
        s.update->optimizer().set_steps_applied(applied_);
        const double share = in.global > 0 ? double(in.count) / double(in.global) : 1.0;
        if (in.global > 0) s.update->set_share(rt, float(share));
        s.update->prepare(rt, int(k), lr_factor, false, last);
        const float loss = run_micro_batch(s, rt, in.latents.data(), in.cond, d, scaler_, r.step, int(k), in.loss_mask,
                                           in.sample_weights, in.token_weights);
        const UpdateReport u = s.update->finish_run(rt, last);
        r.loss += share * double(loss) / double(micro.size());
        if (in.global == 0 || in.count > 0)
            for (float e : rt.read_f32(s.per_sample)) r.per_sample.push_back(e);
        if (last) {
            r.applied = u.applied;
            r.grad_norm = u.grad_norm;
            applied_ = s.update->optimizer().steps_applied();
        }
    }
    steps_++;
    // bf16 / fp32 gradients do not overflow at scale 1; a non-finite one there is a real fault.
    if (graphs_[0].step->opt.precision == Precision::fp16) scaler_.update(!r.applied);
    else if (!r.applied)
        gl::fail("training step ", r.step, ": the gradients hold inf/NaN with a finite loss (", r.loss,
                 "); the LoRA and optimizer state were not updated by this step");
    return r;
}

StepDraw BucketTrainer::draw(const MicroInput& in, const StepGraph& s) {
    const int64_t n = s.latent_numel(), ch = s.latent_channels();
    const DrawInputs di{s.opt.latent_h, s.opt.latent_w, in.latents};
    if (in.global == 0) return draw_step(o_.objective, sched_, s.opt.batch, n, ch, rng_, di);
    const int64_t per_sample = n / s.opt.batch;
    if (in.count > 0)
        return draw_step_shard(o_.objective, sched_, in.global, in.begin, in.count, per_sample, ch, rng_, di);
    // No image here: the stream moves as on the other ranks; the graph runs on zeros.
    const std::vector<float> zeros(size_t(in.global * per_sample), 0.0f);
    const StepDraw all = draw_step(o_.objective, sched_, in.global, in.global * per_sample, ch, rng_,
                                   {s.opt.latent_h, s.opt.latent_w, zeros});
    StepDraw d;
    d.seed = all.seed;
    d.counter = all.counter;
    d.noise_offset = all.noise_offset;
    d.t.assign(size_t(s.opt.batch), all.t.empty() ? 0 : all.t[0]);
    if (!all.noise.empty()) d.noise.assign(size_t(n), 0.0f);
    if (!all.ip_noise.empty()) d.ip_noise.assign(size_t(n), 0.0f);
    return d;
}

double BucketTrainer::evaluate(const MicroInput& in, int32_t timestep, diffusion::NoiseRng& rng) {
    check_input(in, 0);
    StepGraph& s = *graphs_[in.graph].step;
    gl::Runtime& rt = *graphs_[in.graph].rt;
    const StepDraw d = draw_step(o_.objective, sched_, s.opt.batch, s.latent_numel(), s.latent_channels(), rng,
                                 {s.opt.latent_h, s.opt.latent_w, in.latents}, timestep);
    s.net->sample_dropout(rt, 0, /*training=*/false);
    s.update->optimizer().set_steps_applied(applied_);
    // Micro-step 0 restarts the gradient accumulators: the next update's first micro-batch
    // restarts them again, so between updates nothing of this run is left in them.
    s.update->prepare(rt, 0, 0.0, /*skip=*/true);
    float loss = 0;
    try {
        loss = run_micro_batch(s, rt, in.latents.data(), in.cond, d, scaler_, steps_, 0, in.loss_mask, in.sample_weights,
                               in.token_weights);
    } catch (const gl::Error& e) {
        gl::fail("validation after step ", steps_, " at timestep ", timestep, ": ", e.what());
    }
    s.update->finish_run(rt, false);
    return loss;
}

void BucketTrainer::save_optimizer(const std::string& path, const std::map<std::string, std::string>& extra) {
    optimizer(0).set_steps_applied(applied_);
    optimizer(0).save_state(path, *graphs_[0].rt, &scaler_, extra);
}

std::string BucketTrainer::load_state(const std::string& optimizer_file, const BucketTrainerState& state) {
    GL_CHECK(state.steps >= 0, "bucket trainer: negative step count ", state.steps, " in the state");
    const std::string note = optimizer(0).load_state(optimizer_file, *graphs_[0].rt, &scaler_);
    applied_ = optimizer(0).steps_applied();
    GL_CHECK(applied_ <= state.steps, "bucket trainer: ", optimizer_file, " counts ", applied_,
             " applied updates but the state only ", state.steps, " steps");
    steps_ = state.steps;
    rng_.counter = state.noise_counter;
    return note;
}

}  // namespace train
