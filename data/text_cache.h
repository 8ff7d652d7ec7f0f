// Text-encoder output caching: when the text encoder is frozen and no caption changes between
// steps (no shuffling, no dropout of any kind), each distinct caption is encoded once, batched,
// and kept in a LatentCache (entries [tokens][width][1]) under a SHA-256 of the final caption
// text and the encoder's identity (weights, clip_skip, token length). kohya offers this flag only
// for SDXL and later; for SD1.5 it is ours.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/latent_cache.h"

namespace data {

// A model's text encoder (CLIP's, in pipelines/): captions to the hidden states the cache keeps.
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

struct TextCacheReport {
    size_t captions = 0, hits = 0, encoded = 0, encoder_calls = 0;
    std::vector<std::string> keys;  // per image of the dataset
};

// The final caption of every image (prefix / suffix / secondary separator applied) encoded once.
// Throws gl::Error naming the subset when its captions vary between steps.
TextCacheReport cache_text_outputs(const Dataset& ds, LatentCache& cache, TextEncoder& enc, int batch_size = 8);

}  // namespace data
