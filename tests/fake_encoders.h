// Stand-ins for a model's encoders (data::ImageEncoder, data::TextEncoder), so that data/'s caches
// and loader are tested without a model: simple functions of their input that record how they
// were called.
#pragma once
#include <doctest/doctest.h>

#include <span>
#include <string>
#include <vector>

#include "data/latent_cache.h"
#include "data/text_cache.h"
#include "ggml-lite/core/dtype.h"

namespace cachetest {

// Latents at 1/2 of the image size, 4 channels: channel c of a latent pixel is the mean of colour
// channel c % 3 over its 2x2 block of the image, plus half the entry's unit noise (a sample, as a
// VAE's latents are).
class FakeImageEncoder : public data::ImageEncoder {
public:
    static constexpr int kChannels = 4, kDownscale = 2;
    explicit FakeImageEncoder(std::string identity, gl::DType input = gl::DType::f32)
        : identity_(std::move(identity)), input_(input) {}
    std::string identity() const override { return identity_; }
    data::LatentSpec latent_spec() const override { return {kChannels, kDownscale, 1.0f, 0.0f}; }
    gl::DType input_dtype() const override { return input_; }
    void prepare(const std::vector<data::EncoderShape>& shapes) override { prepared.push_back(shapes); }
    std::vector<float> encode(const void* x, gl::DType t, const data::EncoderShape& s,
                              std::span<const float> noise) override {
        CHECK(t == input_);
        calls.push_back(s);
        std::vector<float> pixels(size_t(s.batch) * size_t(s.height) * size_t(s.width) * 3);
        for (size_t i = 0; i < pixels.size(); i++) pixels[i] = gl::load_as_f32(x, t, int64_t(i));
        std::vector<float> z = block_means(pixels, s.batch, s.height, s.width);
        REQUIRE(noise.size() == z.size());
        for (size_t i = 0; i < z.size(); i++) z[i] += 0.5f * noise[i];
        return z;
    }
    void release() override { released++; }

    // The noise-free part of the latents of images x [B, H, W, 3].
    static std::vector<float> block_means(const std::vector<float>& x, int batch, int height, int width) {
        const int h = height / kDownscale, w = width / kDownscale;
        std::vector<float> z(size_t(batch) * size_t(h) * size_t(w) * kChannels);
        for (int b = 0; b < batch; b++)
            for (int y = 0; y < h; y++)
                for (int xx = 0; xx < w; xx++)
                    for (int c = 0; c < kChannels; c++) {
                        float sum = 0;
                        for (int dy = 0; dy < kDownscale; dy++)
                            for (int dx = 0; dx < kDownscale; dx++)
                                sum += x[((size_t(b) * size_t(height) + size_t(y * kDownscale + dy)) * size_t(width) +
                                          size_t(xx * kDownscale + dx)) * 3 + size_t(c % 3)];
                        z[((size_t(b) * size_t(h) + size_t(y)) * size_t(w) + size_t(xx)) * kChannels + size_t(c)] =
                            sum / float(kDownscale * kDownscale);
                    }
        return z;
    }

    std::vector<std::vector<data::EncoderShape>> prepared;  // every prepare() call's shapes
    std::vector<data::EncoderShape> calls;                  // every encode() call's shape
    int released = 0;

private:
    std::string identity_;
    gl::DType input_;
};

// Hidden states of 3 tokens of width 2 per caption, a function of the caption alone: (its length,
// the sum of its bytes), (its first byte, its last byte), (2, -2).
class FakeTextEncoder : public data::TextEncoder {
public:
    explicit FakeTextEncoder(std::string identity) : identity_(std::move(identity)) {}
    std::string identity() const override { return identity_; }
    std::vector<float> encode(const std::vector<std::string>& captions) override {
        batches.push_back(int(captions.size()));
        std::vector<float> out;
        for (const std::string& c : captions) {
            float sum = 0;
            for (unsigned char ch : c) sum += float(ch);
            const float first = c.empty() ? 0.0f : float((unsigned char)c.front());
            const float last = c.empty() ? 0.0f : float((unsigned char)c.back());
            out.insert(out.end(), {float(c.size()), sum, first, last, 2.0f, -2.0f});
        }
        return out;
    }
    int tokens() const override { return 3; }
    int width() const override { return 2; }
    void release() override {}

    std::vector<int> batches;  // every encode() call's caption count

private:
    std::string identity_;
};

}  // namespace cachetest
