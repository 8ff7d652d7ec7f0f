#include "train/trainer.h"

#include <cmath>

#include "ggml-lite/core/error.h"

namespace train {

namespace {
// bf16 / fp32: the loss scale stays 1 (update() is never called for them).
optim::LossScaler::Options unit_scale() {
    optim::LossScaler::Options o;
    o.init_scale = 1.0;
    return o;
}
}  // namespace

Trainer::Trainer(StepGraph& s, gl::Runtime& rt, const TrainerOptions& o)
    : s_(s), rt_(rt), o_(o), sched_(diffusion::DdpmSchedule::sd15()), rng_{o.seed, 0},
      scaler_(s.opt.precision == Precision::fp16 ? o.loss_scale : unit_scale()) {
    o_.objective.validate(sched_);
    check_objective_fits(o_.objective, s, "trainer");
    const gl::Graph& pg = rt.plan().graph;
    GL_CHECK(pg.value_count() >= s.g.value_count() && pg.v(s.latents).name == s.g.v(s.latents).name &&
                 pg.shape(s.latents) == s.g.shape(s.latents),
             "trainer: the runtime does not run this step graph");
    write_objective_tables(s_, rt_, o_.objective, sched_);
}

void Trainer::init(uint64_t lora_seed) {
    s_.net->init(rt_, lora_seed);
    s_.update->init_state(rt_);
}

StepReport Trainer::step(std::span<const float> latents, std::span<const float> context, double lr_factor) {
    GL_CHECK(!s_.opt.train_text_encoder, "trainer: this step graph trains the text encoder; pass token ids");
    const int64_t per = s_.context_numel();
    GL_CHECK(int64_t(context.size()) == per * s_.opt.grad_accum, "trainer: context holds ", context.size(),
             " values, expected ", s_.opt.grad_accum, " micro-batches of ", per);
    return run(latents, context, lr_factor);
}

StepReport Trainer::step(std::span<const float> latents, std::span<const int32_t> ids, double lr_factor) {
    GL_CHECK(s_.opt.train_text_encoder, "trainer: the text encoder is frozen in this step graph; pass its context");
    const int64_t per = s_.ids_numel();
    GL_CHECK(int64_t(ids.size()) == per * s_.opt.grad_accum, "trainer: ids hold ", ids.size(), " values, expected ",
             s_.opt.grad_accum, " micro-batches of ", per);
    return run(latents, ids, lr_factor);
}

void check_objective_fits(const Objective& o, const StepGraph& s, const std::string& who) {
    GL_CHECK(o.prediction == s.opt.prediction && o.loss == s.opt.loss && (o.ip_noise_gamma != 0) == s.opt.input_perturbation &&
                 draws_noise_on_host(o) == s.opt.host_noise,
             who, ": the objective's prediction type, loss, input perturbation and host-drawn noise must be the ones the "
             "step graph was built with");
}

float run_micro_batch(StepGraph& s, gl::Runtime& rt, const float* latents, StepCond cond, const StepDraw& d,
                      const optim::LossScaler& scaler, int64_t report_step, int k, std::span<const float> loss_mask,
                      std::span<const float> sample_weights, std::span<const float> token_weights) {
    rt.write(s.latents, latents, gl::DType::f32);
    write_draw(s, rt, d);
    if (s.loss_mask != gl::kNoValue) {
        GL_CHECK(int64_t(loss_mask.size()) == s.opt.batch * s.opt.latent_h * s.opt.latent_w, "training step ",
                 report_step, ": the masked loss needs a mask of ", s.opt.batch, " x ", s.opt.latent_h, " x ",
                 s.opt.latent_w, " values, got ", loss_mask.size());
        rt.write(s.loss_mask, loss_mask.data(), gl::DType::f32);
    }
    GL_CHECK(sample_weights.empty() || s.sample_weight != gl::kNoValue, "training step ", report_step,
             ": per-sample loss weights for a graph built without them (StepOptions::sample_weights)");
    if (s.sample_weight != gl::kNoValue) {
        GL_CHECK(sample_weights.empty() || int64_t(sample_weights.size()) == s.opt.batch, "training step ",
                 report_step, ": ", sample_weights.size(), " per-sample loss weights for a batch of ", s.opt.batch);
        for (float w : sample_weights)
            GL_CHECK(std::isfinite(w) && w >= 0, "training step ", report_step, ": per-sample loss weight ", w,
                     " must be finite and >= 0");
        const std::vector<float> ones(size_t(s.opt.batch), 1.0f);
        rt.write(s.sample_weight, sample_weights.empty() ? ones.data() : sample_weights.data(), gl::DType::f32);
    }
    GL_CHECK(token_weights.empty() || s.token_weights != gl::kNoValue, "training step ", report_step,
             ": token weights for a graph built without them (StepOptions::token_weights)");
    if (s.token_weights != gl::kNoValue) {
        const int64_t rows = s.opt.batch * s.context_rows();
        GL_CHECK(token_weights.empty() || int64_t(token_weights.size()) == rows, "training step ", report_step, ": ",
                 token_weights.size(), " token weights for ", s.opt.batch, " x ", s.context_rows(), " context rows");
        for (float w : token_weights)
            GL_CHECK(std::isfinite(w), "training step ", report_step, ": token weight ", w, " is not finite");
        const std::vector<float> ones(size_t(rows), 1.0f);
        rt.write(s.token_weights, token_weights.empty() ? ones.data() : token_weights.data(), gl::DType::f32);
    }
    if (const auto* ids = std::get_if<std::span<const int32_t>>(&cond))
        rt.write(s.ids, ids->data(), gl::DType::i32);
    else
        rt.write(s.context, std::get<std::span<const float>>(cond).data(), gl::DType::f32);
    scaler.write(rt, s.loss_scale);
    rt.run();
    const float loss = rt.read_f32(s.loss)[0];
    if (!std::isfinite(loss)) {
        std::string ts;
        for (int32_t v : d.t) ts += gl::cat(ts.empty() ? "" : " ", v);
        gl::fail("training step ", report_step, ": the loss is ", loss, " (micro-batch ", k + 1, " of ",
                 s.opt.grad_accum, ", timesteps ", ts, "); the LoRA and optimizer state were not updated by this step");
    }
    return loss;
}

StepReport Trainer::run(std::span<const float> latents, Cond cond, double lr_factor) {
    const int accum = s_.opt.grad_accum;
    const int64_t n = s_.latent_numel();
    GL_CHECK(int64_t(latents.size()) == n * accum, "trainer: latents hold ", latents.size(), " values, expected ",
             accum, " micro-batches of ", n);
    StepReport r;
    r.step = step_ + 1;
    r.loss_scale = scaler_.scale();
    const size_t cond_per = std::visit([](auto c) { return c.size(); }, cond) / size_t(accum);
    for (int k = 0; k < accum; k++) {
        last_ = draw_step(o_.objective, sched_, s_.opt.batch, n, s_.latent_channels(), rng_,
                          {s_.opt.latent_h, s_.opt.latent_w, latents.subspan(size_t(k * n), size_t(n))});
        s_.net->sample_dropout(rt_, rng_.next_u64());
        s_.update->prepare(rt_, k, lr_factor);
        const Cond micro = std::visit([&](auto c) { return Cond(c.subspan(size_t(k) * cond_per, cond_per)); }, cond);
        const float loss = run_micro_batch(s_, rt_, latents.data() + k * n, micro, last_, scaler_, r.step, k);
        const UpdateReport u = s_.update->finish_run(rt_, k + 1 == accum);
        r.loss += double(loss) / accum;
        for (float e : rt_.read_f32(s_.per_sample)) r.per_sample.push_back(e);
        if (k + 1 == accum) {
            r.applied = u.applied;
            r.grad_norm = u.grad_norm;
        }
    }
    step_++;
    // bf16 / fp32 gradients do not overflow at scale 1; a non-finite one there is a real fault.
    if (s_.opt.precision == Precision::fp16) scaler_.update(!r.applied);
    else if (!r.applied)
        gl::fail("training step ", r.step, ": the gradients hold inf/NaN with a finite loss (", r.loss,
                 "); the LoRA and optimizer state were not updated by this step");
    return r;
}

StepReport Trainer::evaluate(std::span<const float> latents, std::span<const float> context, uint64_t seed) {
    GL_CHECK(!s_.opt.train_text_encoder, "trainer: this step graph trains the text encoder; pass token ids");
    GL_CHECK(int64_t(context.size()) == s_.context_numel(), "trainer: evaluate takes one micro-batch's context (",
             s_.context_numel(), " values), got ", context.size());
    return eval(latents, context, seed);
}

StepReport Trainer::evaluate(std::span<const float> latents, std::span<const int32_t> ids, uint64_t seed) {
    GL_CHECK(s_.opt.train_text_encoder, "trainer: the text encoder is frozen in this step graph; pass its context");
    GL_CHECK(int64_t(ids.size()) == s_.ids_numel(), "trainer: evaluate takes one micro-batch's ids (",
             s_.ids_numel(), " values), got ", ids.size());
    return eval(latents, ids, seed);
}

StepReport Trainer::eval(std::span<const float> latents, Cond cond, uint64_t seed) {
    const int64_t n = s_.latent_numel();
    GL_CHECK(int64_t(latents.size()) == n, "trainer: evaluate takes one micro-batch of latents (", n, " values), got ",
             latents.size());
    diffusion::NoiseRng rng{seed, 0};
    const StepDraw d = draw_step(o_.objective, sched_, s_.opt.batch, n, s_.latent_channels(), rng,
                                 {s_.opt.latent_h, s_.opt.latent_w, latents});
    s_.net->sample_dropout(rt_, 0, /*training=*/false);
    s_.update->prepare(rt_, s_.opt.grad_accum - 1, 0.0, /*skip=*/true);
    StepReport r;
    r.step = step_;
    r.loss_scale = scaler_.scale();
    r.loss = run_micro_batch(s_, rt_, latents.data(), cond, d, scaler_, step_, 0);
    r.per_sample = rt_.read_f32(s_.per_sample);
    s_.update->finish_run(rt_, false);
    return r;
}

}  // namespace train
