// The encoders the caches use (data/latent_cache.h's ImageEncoder, data/text_cache.h's
// TextEncoder): the VAE encoder and the model family's text encoders as ggml-lite graphs.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/latent_cache.h"
#include "data/text_cache.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/shared_memory.h"
#include "ggml-lite/io/tensor_source.h"
#include "models/model_files.h"
#include "models/sd15/prompt_weights.h"
#include "models/sd15/tokenizer.h"
#include "models/sd15/vae.h"

namespace sd {

// The VAE encoder graph on a ggml-lite backend: one graph and plan per input shape, all of them on
// one gl::SharedMemory (one copy of the weights, one activation arena sized for the largest), so
// the weights are loaded once when every shape comes through prepare(). A shape that was not
// prepared runs on that memory when it fits; otherwise the memory is laid out again for every
// shape so far and the weights reloaded. The input is declared in the weights' dtype: images come
// in it (bf16 on CUDA: half the upload of f32, and no cast node).
class VaeGraphEncoder : public data::ImageEncoder {
public:
    VaeGraphEncoder(VaeConfig config, const gl::io::TensorSource& weights, std::string identity,
                    gl::DType dtype = gl::DType::f32, gl::Backend backend = gl::Backend::cpu);
    ~VaeGraphEncoder() override;
    std::string identity() const override { return identity_; }
    data::LatentSpec latent_spec() const override;
    gl::DType input_dtype() const override { return dtype_; }
    void prepare(const std::vector<data::EncoderShape>& shapes) override;
    // One sample of each image's latent distribution (sd::vae_sample_latent of its moments).
    std::vector<float> encode(const void* x, gl::DType t, const data::EncoderShape& shape,
                              std::span<const float> noise) override;
    // The moments [B, H/f, W/f, 2 * latent] of x [B, H, W, 3] (NHWC, [-1, 1]) of type t.
    std::vector<float> moments(const void* x, gl::DType t, const data::EncoderShape& shape);
    // The same from floats (their count checked against the shape).
    std::vector<float> moments(const std::vector<float>& x, int batch, int height, int width);
    // Drops every runtime, plan and the shared memory.
    void release() override;

    int graphs_built() const { return graphs_built_; }  // one per shape planned
    int weight_loads() const { return weight_loads_; }  // 1 when every shape was prepared up front
    // Seconds spent planning and loading weights, writing inputs, running and reading back.
    struct Times {
        double setup = 0, upload = 0, run = 0;
        int calls = 0;
    };
    const Times& times() const { return times_; }
    // Per-node timing of the runs from now on (gl::Runtime::set_profiling: on CUDA each profiled
    // run is eager, an event pair around every node), and the report of one shape's runs.
    void set_profiling(bool on);
    std::string profile_report(const data::EncoderShape& shape, size_t top = 20) const;
    // The shared memory's layout (arenas, per-shape needs); empty when nothing is allocated.
    std::string memory_report() const;

private:
    struct Planned;
    Planned& planned(const data::EncoderShape& s);
    bool fits(const Planned& p) const;
    void lay_out();
    gl::Runtime& runtime(Planned& p);
    VaeConfig config_;
    const gl::io::TensorSource& weights_;
    std::string identity_;
    gl::DType dtype_;
    gl::Backend backend_;
    std::map<data::EncoderShape, std::unique_ptr<Planned>> shapes_;
    std::shared_ptr<gl::SharedMemory> mem_;
    bool profiling_ = false;
    int graphs_built_ = 0, weight_loads_ = 0;
    Times times_;
};

// The opened model's text encoders (its family's text_context: the context rows its token layout
// joins a caption's sequences into) on a ggml-lite backend, one graph per batch size. `tokenize`
// gives the ids of one caption, n_chunks sequences of the family's length (the model's tokenizer's
// encode_chunks by default, the built-in CLIP vocabulary's when it has none).
class TextGraphEncoder : public data::TextEncoder {
public:
    using Tokenize = std::function<std::vector<int32_t>(const std::string&)>;
    TextGraphEncoder(const models::ModelFiles& model, std::string identity, int clip_skip = 1, int n_chunks = 1,
                     gl::DType dtype = gl::DType::f32, gl::Backend backend = gl::Backend::cpu,
                     Tokenize tokenize = nullptr);
    ~TextGraphEncoder() override;
    // kohya's weighted captions: `tokenize` gives the ids and the output rows' weights of one
    // caption, which multiply the outputs (models/sd15/prompt_weights.h); the identity says so.
    using WeightedTokenize = std::function<WeightedIds(const std::string&)>;
    void set_weighted(WeightedTokenize tokenize);
    std::string identity() const override;
    std::vector<float> encode(const std::vector<std::string>& captions) override;
    int tokens() const override { return int(model_.fam().tokens().context_rows(n_chunks_)); }
    int width() const override { return int(model_.cfg().text_width()); }
    void release() override;

private:
    struct Shape;
    models::ModelFiles model_;  // the family, its config and the text encoder's weights
    std::string identity_;
    int clip_skip_, n_chunks_;
    gl::DType dtype_;
    gl::Backend backend_;
    Tokenize tokenize_;
    WeightedTokenize weighted_;
    std::unique_ptr<Shape> current_;
};

}  // namespace sd
