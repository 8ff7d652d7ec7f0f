// The diffusion training step as one graph: the draws, noising, the UNet (and the CLIP text
// encoder when it is trained), the target, the weighted loss times the loss scale, the backward pass
// and the optimizer update. The host writes per-step inputs (train/trainer.h does it):
//
//   latents             f32 [B, h, w, C] (NHWC)   x0
//   train.draw          i32 [kNoiseDrawSize + B]   where the noise starts in the generator's
//                                                  stream, the offset-noise strength
//                                                  (gl::NoiseDrawSlot), then the B timesteps
//   noise, ip_noise     f32 [B, h, w, C]           host-drawn noise only (StepOptions::host_noise:
//                                                  the noise; input_perturbation: its extra noise)
//   loss_mask           f32 [B, h, w, 1]           masked loss only (StepOptions::masked_loss)
//   sample_weight       f32 [B]                    per-sample loss weights only (StepOptions::sample_weights:
//                                                  kohya's prior_loss_weight on regularisation images)
//   loss_scale          f32 [1]                    1, or the fp16 dynamic loss scale
//   context             act [B, T, cross_dim]      frozen text encoder: its output, computed apart
//   ids                 i32 [B * chunks, 77]       trained text encoder: the token ids (the
//                                                  family's sequence length: 77 for SD)
//   token_weights       f32 [B, T, 1]              trained text encoder with weighted captions
//                                                  only: kohya's per-row weights of the context
//
// and once, the objective's tables (frozen f32 [num_steps, 1] each, write_objective_tables):
// t as the UNet takes it, sqrt(alpha_bar_t), sqrt(1 - alpha_bar_t), the loss weight and (huber and
// smooth_l1 only) the threshold, per timestep.
//
// In graph: noise = normal_noise(draw) (the draws train::draw_micro_batch makes on the host, bit
// for bit) unless the host drew it; the per-sample values looked up by timestep;
// noisy = sqrt_ac x0 + sqrt_1m_ac (noise + ip_noise); target = noise (epsilon) or
// sqrt_ac noise - sqrt_1m_ac x0 (v); loss = weighted_loss(pred in f32, target, loss_mask) (kohya
// computes the loss in f32 as well); the backward pass of loss * loss_scale reaches only the LoRA
// masters, whose activation-dtype copies one cast_multi makes for the whole step.
#pragma once
#include <memory>

#include "ggml-lite/core/autodiff.h"
#include "lora/lora.h"
#include "models/family.h"
#include "train/objective.h"
#include "train/update.h"

namespace train {

struct StepOptions {
    // The model family (models/family.h): its token layout and latent space, and the builders of
    // its denoiser and text encoder, which take `config` (the opened model's, ModelFiles::config;
    // the family's model as distributed by default).
    const models::Family* family = &models::sd15_family();
    std::shared_ptr<const models::ModelConfig> config = models::sd15_family().config();
    int64_t batch = 1, latent_h = 64, latent_w = 64;  // per micro-batch; latent sides (pixels / 8)
    Precision precision = Precision::bf16;
    // How the frozen UNet's and text encoder's matrices (linear and conv weights) are stored
    // (core/quant.h): dense in the precision's dtype, or int8 / fp8 codes with an f32 scale per
    // output channel (kohya's --fp8_base is fp8 for both, --fp8_base_unet for the UNet only). The
    // kernels convert codes while loading their tiles; no full-size 16-bit copy exists. The LoRA
    // masters stay f32 and norms, biases and embeddings in the precision's dtype, whatever the format.
    gl::WeightFormat base_format = gl::WeightFormat::dense;          // the UNet's
    gl::WeightFormat text_encoder_format = gl::WeightFormat::dense;  // CLIP's (trained or beside)
    // Frozen text encoder: `context_tokens` context rows are an input (the family's
    // TokenLayout::context_rows of the chunks, as build_clip_chunked joins them: 77, 152, 227 for
    // SD). Trained text encoder: CLIP is in the graph.
    bool train_text_encoder = false;
    // false: no UNet LoRA (kohya's --network_train_text_encoder_only; the text encoder is trained).
    bool train_unet = true;
    int64_t context_tokens = 77;
    int clip_chunks = 1, clip_skip = 1;
    // kohya's --weighted_captions with a trained text encoder: the context (in f32, as kohya's
    // autocast leaves it) times a token_weights input before the UNet (models/sd15/prompt_weights.h).
    // A frozen text encoder's context comes weighted from the host.
    bool token_weights = false;
    lora::LoraConfig lora;
    diffusion::Prediction prediction = diffusion::Prediction::epsilon;
    gl::LossKind loss = gl::LossKind::l2;
    bool host_noise = false;          // the noise an input (train::draws_noise_on_host), not drawn in the graph
    bool input_perturbation = false;  // kohya's --ip_noise_gamma: an ip_noise input (needs host_noise)
    bool masked_loss = false;         // a per-pixel loss_mask input (--masked_loss, alpha_mask)
    bool sample_weights = false;      // a per-sample weight input (kohya's loss_weights: --prior_loss_weight)
    int grad_accum = 1;
    // Several ranks: the gradients are all-reduced (weighted by each rank's share of the global
    // batch) inside the step before the gradient statistics and the update (train/update.h).
    bool data_parallel = false;
    float unet_lr = 1e-4f, text_encoder_lr = 5e-5f;
    optim::OptimizerConfig optimizer;  // AdamW (torch defaults) unless set, e.g. by optim::parse_optimizer
    float max_grad_norm = 1.0f;        // kohya's default; <= 0: no clipping

    void validate() const;  // throws gl::Error naming the field
};

struct StepGraph {
    StepOptions opt;
    gl::Graph g;
    // Frozen weights (leaves named by diffusers / transformers keys); load them into the runtime
    // with the family's load (models::Family::load), or write random ones for benchmarks.
    std::unique_ptr<nn::Weights> unet_weights, text_weights;  // text_weights: trained TE only
    std::unique_ptr<lora::LoraNetwork> net;
    gl::ValueId latents = gl::kNoValue, draw = gl::kNoValue, loss_scale = gl::kNoValue;
    // The objective's tables, by timestep (huber_c_table: huber only).
    gl::ValueId timestep_table = gl::kNoValue, sqrt_ac_table = gl::kNoValue, sqrt_1m_ac_table = gl::kNoValue;
    gl::ValueId loss_weight_table = gl::kNoValue, huber_c_table = gl::kNoValue;
    // Computed from the draw: the noise f32 [B, h, w, C] and the per-sample values f32 [B].
    gl::ValueId noise = gl::kNoValue, timesteps = gl::kNoValue;
    gl::ValueId sqrt_ac = gl::kNoValue, sqrt_1m_ac = gl::kNoValue, loss_weights = gl::kNoValue;
    gl::ValueId huber_c = gl::kNoValue;
    gl::ValueId ip_noise = gl::kNoValue, loss_mask = gl::kNoValue, sample_weight = gl::kNoValue;  // inputs (see above)
    gl::ValueId context = gl::kNoValue, ids = gl::kNoValue, token_weights = gl::kNoValue;
    gl::ValueId pred = gl::kNoValue, target = gl::kNoValue;
    gl::ValueId loss = gl::kNoValue, per_sample = gl::kNoValue;  // unscaled loss [], per-sample [B]
    gl::Gradients grads;
    std::unique_ptr<Update> update;

    int64_t latent_channels() const { return opt.config->latent_channels(); }
    int64_t latent_numel() const { return opt.batch * opt.latent_h * opt.latent_w * latent_channels(); }
    int64_t context_numel() const;  // of one micro-batch (frozen text encoder)
    int64_t ids_numel() const;      // of one micro-batch (trained text encoder)
    int64_t context_rows() const;   // T of the context [B, T, width]
};

// Builds the whole step (forward, backward, update). Returned by pointer: Weights hold a reference
// to the graph. The update's parameter groups are kohya's (prepare_optimizer_params): "unet" and
// "text_encoder", or with block lr weights "unet_block<i>" per block (by block), and with LoRA+
// each one's up weights in "<group>_plus"; the UNet's first.
std::unique_ptr<StepGraph> build_step(const StepOptions& opt);

// kohya's lr_descriptions of the step's groups, in their order ("textencoder", "unet plus",
// "unet_block3", ...), when there are more than one per part; else empty (kohya logs its
// lr/unet and lr/textencoder then).
std::vector<std::string> kohya_group_names(const StepGraph& s);

// Writes the objective's tables (before the first run; the timestep range and schedule of the
// draws must be sched's, whose step count the tables were built with) and a micro-batch's draw.
void write_objective_tables(const StepGraph& s, gl::Runtime& rt, const Objective& o, const diffusion::DdpmSchedule& sched);
void write_draw(const StepGraph& s, gl::Runtime& rt, const StepDraw& d);

// The frozen text encoder as its own graph (UNet-only training): ids i32 [B * chunks, 77] ->
// context [B, chunks * 75 + 2, width] in the precision's dtype. Run it once per batch (or cache
// its outputs) and write the result into StepGraph::context.
struct TextEncoderGraph {
    gl::Graph g;
    std::unique_ptr<nn::Weights> weights;
    gl::ValueId ids = gl::kNoValue, context = gl::kNoValue;
};
std::unique_ptr<TextEncoderGraph> build_text_encoder(const models::ModelConfig& c, Precision p, int64_t batch,
                                                     int chunks = 1, int clip_skip = 1,
                                                     gl::WeightFormat format = gl::WeightFormat::dense,
                                                     const models::Family& family = models::sd15_family());

}  // namespace train
