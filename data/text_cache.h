// Text-encoder output caching: when the text encoder is frozen and no caption changes between
// steps (no shuffling, no dropout of any kind), each distinct caption is encoded once, batched,
// and kept in a LatentCache (entries [tokens][width][1]) under a SHA-256 of the final caption
// text and the encoder's identity (weights, clip_skip, token length). kohya offers this flag only
// for SDXL and later; for SD1.5 it is ours.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/latent_cache.h"
#include "models/sd15/clip.h"

namespace data {

class TextEncoder {
public:
    virtual ~TextEncoder() = default;
    virtual std::string identity() const = 0;
    // captions -> hidden states [B][tokens][width] as one flat vector; tokens() x width() each.
    virtual std::vector<float> encode(const std::vector<std::string>& captions) = 0;
    virtual int tokens() const = 0;
    virtual int width() const = 0;
    virtual void release() = 0;
};

// The CLIP text encoder graph (sd::build_clip_chunked) on a ggml-lite backend, one graph per
// batch size. `tokenize` gives the ids of one caption, n_chunks rows of 77 (the builtin CLIP
// tokenizer's encode_chunks by default).
class ClipGraphEncoder : public TextEncoder {
public:
    using Tokenize = std::function<std::vector<int32_t>(const std::string&)>;
    ClipGraphEncoder(sd::ClipConfig config, const gl::io::TensorSource& weights, std::string identity,
                     int clip_skip = 1, int n_chunks = 1, gl::DType dtype = gl::DType::f32,
                     gl::Backend backend = gl::Backend::cpu, Tokenize tokenize = nullptr);
    ~ClipGraphEncoder() override;
    std::string identity() const override;
    std::vector<float> encode(const std::vector<std::string>& captions) override;
    int tokens() const override { return n_chunks_ * 75 + 2; }
    int width() const override { return int(config_.width); }
    void release() override;

private:
    struct Shape;
    sd::ClipConfig config_;
    const gl::io::TensorSource& weights_;
    std::string identity_;
    int clip_skip_, n_chunks_;
    gl::DType dtype_;
    gl::Backend backend_;
    Tokenize tokenize_;
    std::unique_ptr<Shape> current_;
};

struct TextCacheReport {
    size_t captions = 0, hits = 0, encoded = 0, encoder_calls = 0;
    std::vector<std::string> keys;  // per image of the dataset
};

// The final caption of every image (prefix / suffix / secondary separator applied) encoded once.
// Throws gl::Error naming the subset when its captions vary between steps.
TextCacheReport cache_text_outputs(const Dataset& ds, LatentCache& cache, TextEncoder& enc, int batch_size = 8);

}  // namespace data
