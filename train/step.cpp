#include "train/step.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/param_casts.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "ggml-lite/ops/rng_normal.h"

namespace train {

using gl::DType;
using gl::Shape;
using gl::ValueId;

void StepOptions::validate() const {
    GL_CHECK(family != nullptr, "step: no model family");
    GL_CHECK(lora.family == family, "step: the LoRA's model family ", lora.family->name(), " is not the step's ",
             family->name());
    GL_CHECK(config != nullptr, "step: no model configuration");
    config->validate();
    // Ranges far beyond any SD1.x training run, small enough that every size derived from them
    // (batch x tokens x width, the activations of a step) stays far from overflowing.
    const auto in_range = [](const char* field, int64_t v, int64_t hi) {
        GL_CHECK(v >= 1 && v <= hi, "step: ", field, " = ", v, " is out of range (1..", hi, ")");
    };
    in_range("batch", batch, int64_t(1) << 16);
    in_range("latent_h (image height / 8)", latent_h, int64_t(1) << 11);
    in_range("latent_w (image width / 8)", latent_w, int64_t(1) << 11);
    if (!train_text_encoder) in_range("context_tokens", context_tokens, int64_t(1) << 16);
    in_range("clip_chunks", clip_chunks, 64);
    in_range("grad_accum", grad_accum, int64_t(1) << 20);
    const int m = config->size_multiple();
    GL_CHECK(latent_h % m == 0 && latent_w % m == 0, "step: latent size ", latent_h, "x", latent_w,
             " must be a multiple of ", m, " (", 8 * m, " pixels)");
    GL_CHECK(clip_skip >= 1, "step: clip_skip must be >= 1");
    GL_CHECK(train_unet || train_text_encoder, "step: neither the UNet nor the text encoder is trained");
    GL_CHECK(!token_weights || train_text_encoder,
             "step: token weights are an input of a trained text encoder only (a frozen one's context comes weighted)");
    GL_CHECK(!train_text_encoder || config->text_width() == config->context_width(), "step: the text encoder's width ",
             config->text_width(), " is not the UNet's cross-attention width ", config->context_width());
    GL_CHECK(unet_lr >= 0 && text_encoder_lr >= 0, "step: learning rates must be >= 0");
    GL_CHECK(std::isfinite(max_grad_norm), "step: max_grad_norm must be finite (<= 0: no clipping)");
}

int64_t StepGraph::context_numel() const { return opt.batch * opt.context_tokens * opt.config->context_width(); }
int64_t StepGraph::ids_numel() const { return opt.batch * opt.family->tokens().ids(opt.clip_chunks); }
int64_t StepGraph::context_rows() const {
    return opt.train_text_encoder ? opt.family->tokens().context_rows(opt.clip_chunks) : opt.context_tokens;
}

std::unique_ptr<StepGraph> build_step(const StepOptions& opt) {
    opt.validate();
    auto s = std::make_unique<StepGraph>();
    s->opt = opt;
    gl::Graph& g = s->g;
    const DType act = activation_dtype(opt.precision);
    const int64_t B = opt.batch, C = opt.config->latent_channels();
    const Shape lat{B, opt.latent_h, opt.latent_w, C}, per{B}, col{B, 1, 1, 1};

    s->unet_weights = std::make_unique<nn::Weights>(g, act, opt.base_format);
    s->net = std::make_unique<lora::LoraNetwork>(opt.lora);
    if (opt.train_unet) s->net->attach_unet(*s->unet_weights);

    s->latents = g.input("latents", DType::f32, lat);
    s->draw = g.input("train.draw", DType::i32, {gl::kNoiseDrawSize + B});
    GL_CHECK(!opt.input_perturbation || opt.host_noise, "step: the input perturbation is drawn on the host (host_noise)");
    s->noise = opt.host_noise ? g.input("noise", DType::f32, lat) : gl::normal_noise(g, s->draw, lat);
    if (opt.input_perturbation) s->ip_noise = g.input("ip_noise", DType::f32, lat);
    if (opt.masked_loss) s->loss_mask = g.input("loss_mask", DType::f32, {B, opt.latent_h, opt.latent_w, 1});
    const ValueId t = gl::slice(g, s->draw, 0, gl::kNoiseDrawSize, B);
    const int64_t steps = diffusion::DdpmSchedule::sd15().num_steps;
    const auto by_timestep = [&](const char* name, ValueId& table) {
        table = g.weight(gl::cat("train.objective.", name), DType::f32, {steps, 1});
        return gl::reshape(g, gl::embedding(g, table, t), per);
    };
    s->timesteps = by_timestep("timestep", s->timestep_table);
    s->sqrt_ac = by_timestep("sqrt_alpha_bar", s->sqrt_ac_table);
    s->sqrt_1m_ac = by_timestep("sqrt_one_minus_alpha_bar", s->sqrt_1m_ac_table);
    s->loss_weights = by_timestep("loss_weight", s->loss_weight_table);
    if (opt.sample_weights) {  // kohya multiplies each sample's loss by its weight before the timestep's
        s->sample_weight = g.input("sample_weight", DType::f32, per);
        s->loss_weights = gl::mul(g, s->loss_weights, s->sample_weight);
    }
    if (gl::loss_takes_huber_c(opt.loss)) s->huber_c = by_timestep("huber_c", s->huber_c_table);
    s->loss_scale = g.input("loss_scale", DType::f32, {1});

    if (opt.train_text_encoder) {
        s->text_weights = std::make_unique<nn::Weights>(g, act, opt.text_encoder_format);
        s->net->attach_text_encoder(*s->text_weights);
        s->ids = g.input("ids", DType::i32, {B * opt.clip_chunks, opt.family->tokens().sequence});
        s->context = opt.family->text_context(*s->text_weights, g, s->ids, opt.clip_chunks, *opt.config, opt.clip_skip);
        if (opt.token_weights) {
            s->token_weights = g.input("token_weights", DType::f32, {B, s->context_rows(), 1});
            s->context = gl::cast(g, gl::mul(g, gl::cast(g, s->context, DType::f32), s->token_weights), act);
        }
    } else {
        s->context = g.input("context", act, {B, opt.context_tokens, opt.config->context_width()});
    }

    ValueId a = gl::reshape(g, s->sqrt_ac, col), b = gl::reshape(g, s->sqrt_1m_ac, col);
    const ValueId noise_in = opt.input_perturbation ? gl::add(g, s->noise, s->ip_noise) : s->noise;
    ValueId noisy = gl::add(g, gl::mul(g, s->latents, a), gl::mul(g, noise_in, b));
    s->pred = opt.family->denoiser(*s->unet_weights, *opt.config, noisy, s->timesteps, s->context);
    s->target = opt.prediction == diffusion::Prediction::epsilon
                    ? s->noise
                    : gl::sub(g, gl::mul(g, s->noise, a), gl::mul(g, s->latents, b));
    s->loss = gl::weighted_loss(g, opt.loss, gl::cast(g, s->pred, DType::f32), s->target, s->loss_weights, s->huber_c,
                                s->loss_mask);
    s->per_sample = gl::weighted_loss_per_sample(g, s->loss);
    g.set_name(s->loss, "train.loss");
    g.set_name(s->per_sample, "train.loss_per_sample");
    g.mark_output(s->loss);
    g.mark_output(s->per_sample);
    ValueId scaled = gl::mul(g, s->loss, s->loss_scale);
    gl::fold_param_scales(g);
    gl::merge_param_casts(g);
    s->grads = gl::backward(g, scaled);

    // kohya's prepare_optimizer_params: one group per part (the UNet's per block with block lr
    // weights, at unet_lr x the block's weight), with LoRA+ each group's up weights in a group of
    // their own at the lr x the part's ratio; the UNet's groups first, by block.
    std::map<std::tuple<int, int, bool>, ParamGroup> by_key;
    const lora::LoraConfig& lc = opt.lora;
    for (const lora::Module& m : s->net->modules()) {
        const bool unet = m.layer().part == lora::Part::unet;
        std::string name = unet ? "unet" : "text_encoder";
        double lr = unet ? opt.unet_lr : opt.text_encoder_lr;
        int block = -1;
        if (unet && !lc.block_lr_weights.empty()) {
            block = opt.family->lora_block(m.layer().path);
            GL_CHECK(block >= 0 && size_t(block) < lc.block_lr_weights.size(), "step: ", m.key(),
                     " lies in none of the blocks the lr weights are given for");
            name = gl::cat("unet_block", block);
            lr *= lc.block_lr_weights[size_t(block)];
        }
        const std::optional<double> ratio = lc.loraplus(m.layer().part);
        for (const lora::Tensor& t : m.tensors()) {
            const bool plus = ratio && t.suffix == "lora_up.weight";  // kohya: "lora_up" in the name
            ParamGroup& grp = by_key[{unet ? 0 : 1, block, plus}];
            if (grp.params.empty())
                grp = ParamGroup{plus ? name + "_plus" : name, {}, {}, float(plus ? lr * *ratio : lr), {}};
            grp.params.push_back(t.id);
            grp.grads.push_back(s->grads[t.id]);
            // PyTorch's shape, as kohya's Adafactor factors by it, where it holds the graph's
            // element order (a conv's [r, in, k, k] down is [r, k, k, in] here: its own shape).
            grp.torch_shapes.push_back(t.conv_k > 1 ? gl::Shape{} : gl::Shape::of(t.file_shape));
        }
    }
    std::vector<ParamGroup> groups;
    for (auto& [key, grp] : by_key) groups.push_back(std::move(grp));
    GL_CHECK(!groups.empty(), "step: the LoRA targets no module of the model (nothing to train)");
    s->update = std::make_unique<Update>(g, std::move(groups), opt.optimizer, opt.max_grad_norm, opt.grad_accum,
                                         s->loss_scale, s->loss, opt.data_parallel);
    return s;
}

std::vector<std::string> kohya_group_names(const StepGraph& s) {
    const std::vector<ParamGroup>& groups = s.update->groups();
    const auto per_part = [](const ParamGroup& g) { return g.name == "unet" || g.name == "text_encoder"; };
    if (std::all_of(groups.begin(), groups.end(), per_part)) return {};
    std::vector<std::string> names;
    for (const ParamGroup& g : groups) {
        std::string d = g.name.rfind("text_encoder", 0) == 0 ? "textencoder" + g.name.substr(12) : g.name;
        if (d.size() > 5 && d.compare(d.size() - 5, 5, "_plus") == 0) d.replace(d.size() - 5, 1, " ");
        names.push_back(d);
    }
    return names;
}

void write_objective_tables(const StepGraph& s, gl::Runtime& rt, const Objective& o, const diffusion::DdpmSchedule& sched) {
    const int64_t steps = s.g.shape(s.timestep_table)[0];
    GL_CHECK(sched.num_steps == steps, "step: the objective's schedule has ", sched.num_steps,
             " timesteps, the step graph's tables ", steps);
    std::vector<float> timestep, sqrt_ac, sqrt_1m_ac, weight, huber_c;
    const diffusion::DdpmSchedule noising = noising_schedule(o, sched);
    for (int t = 0; t < int(steps); t++) {
        const TimestepValues v = timestep_values(o, sched, noising, t);
        timestep.push_back(v.timestep);
        sqrt_ac.push_back(v.sqrt_ac);
        sqrt_1m_ac.push_back(v.sqrt_1m_ac);
        weight.push_back(v.weight);
        huber_c.push_back(v.huber_c);
    }
    rt.write_f32(s.timestep_table, timestep);
    rt.write_f32(s.sqrt_ac_table, sqrt_ac);
    rt.write_f32(s.sqrt_1m_ac_table, sqrt_1m_ac);
    rt.write_f32(s.loss_weight_table, weight);
    if (s.huber_c_table != gl::kNoValue) rt.write_f32(s.huber_c_table, huber_c);
}

void write_draw(const StepGraph& s, gl::Runtime& rt, const StepDraw& d) {
    GL_CHECK(int64_t(d.t.size()) == s.opt.batch, "step: a draw of ", d.t.size(), " timesteps for a batch of ",
             s.opt.batch);
    const int64_t steps = s.g.shape(s.timestep_table)[0];
    for (int32_t t : d.t) GL_CHECK(t >= 0 && t < steps, "step: timestep ", t, " is outside the tables' [0, ", steps, ")");
    GL_CHECK(std::isfinite(d.noise_offset) && d.noise_offset >= 0, "step: noise offset ", d.noise_offset,
             " must be finite and >= 0");
    std::vector<int32_t> packed(size_t(gl::kNoiseDrawSize));
    gl::noise_draw_set(packed.data(), gl::kNdSeed, d.seed);
    gl::noise_draw_set(packed.data(), gl::kNdCounter, d.counter);
    gl::noise_draw_set(packed.data(), gl::kNdOffset, std::bit_cast<uint64_t>(d.noise_offset));
    packed.insert(packed.end(), d.t.begin(), d.t.end());
    rt.write(s.draw, packed.data(), DType::i32);
    const int64_t n = s.latent_numel();
    GL_CHECK(s.opt.host_noise == !d.noise.empty(), "step: the graph ", s.opt.host_noise ? "takes" : "draws",
             " the noise, the draw ", d.noise.empty() ? "holds none" : "holds it");
    if (s.opt.host_noise) {
        GL_CHECK(int64_t(d.noise.size()) == n, "step: a host draw of ", d.noise.size(), " noise values for ", n, " latents");
        rt.write_f32(s.noise, d.noise);
    }
    GL_CHECK(s.opt.input_perturbation == !d.ip_noise.empty() && (d.ip_noise.empty() || int64_t(d.ip_noise.size()) == n),
             "step: the input perturbation's draw (", d.ip_noise.size(), " values) does not fit the graph");
    if (s.opt.input_perturbation) rt.write_f32(s.ip_noise, d.ip_noise);
}

std::unique_ptr<TextEncoderGraph> build_text_encoder(const models::ModelConfig& c, Precision p, int64_t batch, int chunks,
                                                     int clip_skip, gl::WeightFormat format,
                                                     const models::Family& family) {
    GL_CHECK(batch >= 1 && chunks >= 1, "text encoder: batch and chunks must be >= 1");
    auto t = std::make_unique<TextEncoderGraph>();
    t->weights = std::make_unique<nn::Weights>(t->g, activation_dtype(p), format);
    t->ids = t->g.input("ids", DType::i32, {batch * chunks, family.tokens().sequence});
    t->context = family.text_context(*t->weights, t->g, t->ids, chunks, c, clip_skip);
    t->g.mark_output(t->context);
    return t;
}

}  // namespace train
