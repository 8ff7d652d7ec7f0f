// The CLIP text encoder (transformers' CLIPTextModel; ViT-L/14 for SD1.5), config-driven so
// tiny test configs run the same code. Internal weight names are transformers' keys
// ("text_model.encoder.layers.0.self_attn.q_proj.weight"); clip_key() maps them to the other
// checkpoint layouts.
#pragma once
#include <cstdint>
#include <string>

#include "ggml-lite/ops/builder.h"
#include "models/nn/weights.h"

namespace sd {

struct ClipConfig {
    int64_t vocab = 49408;
    int64_t width = 768;
    int64_t layers = 12;
    int64_t heads = 12;
    int64_t mlp = 3072;
    int64_t max_pos = 77;  // position embedding rows: the longest sequence one pass encodes
    gl::Act act = gl::Act::quick_gelu;
    float eps = 1e-5f;

    static ClipConfig vit_l14() { return {}; }  // SD1.5's text encoder
    // SD2.x's: OpenCLIP ViT-H/14's text tower as diffusers and kohya hold it, 23 of its 24 layers.
    static ClipConfig vit_h14() { return {49408, 1024, 23, 16, 4096, 77, gl::Act::gelu_erf, 1e-5f}; }
    // Small enough for golden tests and CI (hidden 32, 2 layers).
    static ClipConfig tiny() { return {1000, 32, 2, 4, 64, 77, gl::Act::quick_gelu, 1e-5f}; }
};

// ids i32 [N, L] (L <= max_pos) -> hidden states [N, L, width] in the weights' dtype.
// clip_skip k >= 1 runs only the first layers - k + 1 layers and then the final layer norm, as
// kohya and A1111 do (hidden_states[-k] followed by final_layer_norm); 1 is the plain output.
// Each layer is a checkpoint segment (recompute policy `blocks`) and a name scope.
gl::ValueId build_clip(nn::Weights& w, gl::Graph& g, gl::ValueId ids, const ClipConfig& cfg, int clip_skip = 1);

// The same from token embeddings [N, L, width] (what token_embedding(ids) would give) instead
// of ids: position embeddings are still added. Lets tests and textual-inversion style training
// differentiate with respect to the embeddings.
gl::ValueId build_clip_from_embeds(nn::Weights& w, gl::Graph& g, gl::ValueId inputs_embeds, const ClipConfig& cfg,
                                   int clip_skip = 1);

// Long prompts the way kohya's sd-scripts encodes them (max_token_length 150 / 225): ids
// [B * n_chunks, L] hold each prompt as n_chunks consecutive rows, every row <BOS> + (L - 2)
// tokens + <EOS or padding>. Each row is encoded on its own; the result keeps the first row's
// <BOS> state, the inner L - 2 states of every row and the last row's final state:
// [B, n_chunks * (L - 2) + 2, width] (77, 152, 227 tokens for 1, 2, 3 chunks of 77).
gl::ValueId build_clip_chunked(nn::Weights& w, gl::Graph& g, gl::ValueId ids, int n_chunks, const ClipConfig& cfg,
                               int clip_skip = 1);
// The joining step alone: hidden [B * n_chunks, L, D] -> [B, n_chunks * (L - 2) + 2, D].
gl::ValueId join_clip_chunks(gl::Graph& g, gl::ValueId hidden, int n_chunks);

// Where the text encoder's tensors live in a checkpoint.
enum class ClipLayout : uint8_t {
    transformers,    // diffusers text_encoder/ folder, transformers' CLIPTextModel: "text_model.*"
    transformers_flat,  // the same saved by transformers >= 5, which dropped "text_model." from its keys
    original,        // SD single file: "cond_stage_model.transformer.text_model.*"
    original_older,  // early SD single files: "cond_stage_model.transformer.*" (no "text_model.")
};
const char* clip_layout_name(ClipLayout l);

// Checkpoint key of internal name `internal` (which starts with "text_model.") in layout l.
std::string clip_key(ClipLayout l, const std::string& internal);

// Which layout src holds, found by its token embedding key; throws gl::Error naming the source
// when it holds no CLIP text encoder.
ClipLayout detect_clip_layout(const gl::io::TensorSource& src);

// Loads the text encoder's weights from src (layout detected); w holds the text encoder alone. Keys outside the text encoder
// (a single file's UNet and VAE) and the position_ids buffer are not reported as unexpected.
nn::LoadReport load_clip(const nn::Weights& w, const gl::io::TensorSource& src, gl::Runtime& rt);

}  // namespace sd
