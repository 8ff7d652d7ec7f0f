// The pipeline's output side: the VAE decode (planned, per image or tiled when over the budget),
// images.
#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "pipelines/pipeline.h"
#include "pipelines/pipeline_impl.h"

namespace sd {

namespace {

// One decoded tile: [h, w, 3] pixels, raw decoder output.
struct Tile {
    int h = 0, w = 0;
    std::vector<float> px;
    float* at(int y, int x) { return &px[(size_t(y) * size_t(w) + size_t(x)) * 3]; }
};

// diffusers' blend_v / blend_h: b's first rows (columns) fade in from a's last ones.
void blend_rows(Tile& a, Tile& b, int extent) {
    const int e = std::min({a.h, b.h, extent});
    for (int y = 0; y < e; y++) {
        const auto wa = float(1.0 - double(y) / e), wb = float(double(y) / e);
        for (int x = 0; x < b.w * 3; x++) b.at(y, 0)[x] = a.at(a.h - e + y, 0)[x] * wa + b.at(y, 0)[x] * wb;
    }
}

void blend_cols(Tile& a, Tile& b, int extent) {
    const int e = std::min({a.w, b.w, extent});
    for (int y = 0; y < b.h; y++)
        for (int x = 0; x < e; x++) {
            const auto wa = float(1.0 - double(x) / e), wb = float(double(x) / e);
            for (int c = 0; c < 3; c++) b.at(y, x)[c] = a.at(y, a.w - e + x)[c] * wa + b.at(y, x)[c] * wb;
        }
}

// Tile starts as diffusers' range(0, n, overlap).
std::vector<int> tile_starts(int n, int overlap) {
    std::vector<int> s;
    for (int i = 0; i < n; i += overlap) s.push_back(i);
    return s;
}

}  // namespace

const char* vae_mode_name(VaeDecodePlan::Mode m) {
    switch (m) {
        case VaeDecodePlan::Mode::whole_batch: return "whole batch at once";
        case VaeDecodePlan::Mode::per_image: return "image by image";
        case VaeDecodePlan::Mode::tiled: return "tiled";
    }
    return "?";
}

VaeDecodePlan Pipeline::plan_decode(int batch, int latent_h, int latent_w) {
    Impl& m = *impl_;
    auto bytes = [&](int b, int h, int w) {
        const std::string key = gl::cat(b, "x", h, "x", w);
        auto it = m.decode_bytes.find(key);
        if (it == m.decode_bytes.end()) {
            // Planned for the decision only: a shape over the budget never joins the memory's layout.
            const gl::Plan p = m.plan_graph(m.vae, m.vae_builder(model_, b, h, w)).plan;
            it = m.decode_bytes.emplace(key, p.arena_bytes[size_t(gl::Category::activations)]).first;
        }
        return it->second;
    };
    VaeDecodePlan vp;
    vp.whole_batch_bytes = bytes(batch, latent_h, latent_w);
    vp.activation_bytes = vp.whole_batch_bytes;
    if (vp.whole_batch_bytes <= opt_.vae_budget_bytes) return vp;
    if (batch > 1) {
        vp.mode = VaeDecodePlan::Mode::per_image;
        vp.activation_bytes = bytes(1, latent_h, latent_w);
        if (vp.activation_bytes <= opt_.vae_budget_bytes) return vp;
    }
    const int t = opt_.vae_tile;
    GL_CHECK(latent_h > t || latent_w > t, "VAE decode of one ", latent_w, "x", latent_h, " latent needs ",
             double(vp.activation_bytes) / 1048576.0, " MiB of activations, over the budget of ",
             double(opt_.vae_budget_bytes) / 1048576.0, " MiB, and it is no larger than one ", t, "x", t,
             " tile; raise the budget");
    vp.mode = VaeDecodePlan::Mode::tiled;
    vp.activation_bytes = bytes(1, std::min(t, latent_h), std::min(t, latent_w));
    GL_CHECK(vp.activation_bytes <= opt_.vae_budget_bytes, "VAE decode of one ", t, "x", t, " latent tile needs ",
             double(vp.activation_bytes) / 1048576.0, " MiB of activations, over the budget of ",
             double(opt_.vae_budget_bytes) / 1048576.0, " MiB; raise the budget or make the tiles smaller");
    const int overlap = int(t * (1 - 0.25));
    vp.tiles = int(tile_starts(latent_h, overlap).size() * tile_starts(latent_w, overlap).size());
    vp.tile = t;
    return vp;
}

std::vector<std::tuple<int, int, int>> decode_shapes(const VaeDecodePlan& vp, int batch, int latent_h, int latent_w) {
    if (vp.mode == VaeDecodePlan::Mode::whole_batch) return {{batch, latent_h, latent_w}};
    if (vp.mode == VaeDecodePlan::Mode::per_image) return {{1, latent_h, latent_w}};
    std::vector<std::tuple<int, int, int>> shapes;
    const int t = vp.tile, overlap = int(t * (1 - 0.25));
    for (int y : tile_starts(latent_h, overlap))
        for (int x : tile_starts(latent_w, overlap)) {
            const std::tuple<int, int, int> s{1, std::min(t, latent_h - y), std::min(t, latent_w - x)};
            if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
        }
    return shapes;
}

std::vector<float> Pipeline::decode(const std::vector<float>& latents, int batch, int latent_h, int latent_w) {
    Impl& m = *impl_;
    const int C = model_.vae_config().latent_channels, ds = int(model_.vae_config().downscale());
    const size_t per_latent = size_t(latent_h) * size_t(latent_w) * size_t(C);
    GL_CHECK(batch >= 1 && latent_h >= 1 && latent_w >= 1 && latents.size() == per_latent * size_t(batch),
             "VAE decode: ", latents.size(), " latent values for a batch of ", batch, " ", latent_w, "x", latent_h, "x",
             C, " latents");
    const int H = latent_h * ds, W = latent_w * ds;
    const size_t per_image = size_t(H) * size_t(W) * 3;
    std::vector<float> out(per_image * size_t(batch));
    const VaeDecodePlan vp = plan_decode(batch, latent_h, latent_w);
    std::vector<std::string> keys;
    for (const auto& [b, h, w] : decode_shapes(vp, batch, latent_h, latent_w)) {
        keys.push_back(Impl::vae_key(b, h, w));
        m.plan(m.vae, keys.back(), m.vae_builder(model_, b, h, w));
    }
    m.ensure(model_, opt_, keys);
    // Decodes b latents of h x w starting at z; returns the raw decoder output.
    auto run = [&](int b, int h, int w, const float* z) {
        Impl::Instance& inst = m.runtime(Impl::vae_key(b, h, w));
        inst.rt->write_f32(inst.io.in[0], std::vector<float>(z, z + size_t(b) * size_t(h) * size_t(w) * size_t(C)));
        inst.rt->run();
        return inst.rt->read_f32(inst.io.out);
    };
    if (vp.mode == VaeDecodePlan::Mode::whole_batch) {
        out = run(batch, latent_h, latent_w, latents.data());
    } else if (vp.mode == VaeDecodePlan::Mode::per_image) {
        for (int b = 0; b < batch; b++) {
            const std::vector<float> img = run(1, latent_h, latent_w, latents.data() + size_t(b) * per_latent);
            std::copy(img.begin(), img.end(), out.begin() + ptrdiff_t(size_t(b) * per_image));
        }
    } else {
        // diffusers' tiled_decode: tiles of t latents every 3t/4, blended over t/4 (in pixels) with
        // the tile above and the one to the left, each cropped to 3t/4 before they are joined.
        const int t = opt_.vae_tile, overlap = int(t * (1 - 0.25)), blend = int(t * ds * 0.25), keep = t * ds - blend;
        const std::vector<int> ys = tile_starts(latent_h, overlap), xs = tile_starts(latent_w, overlap);
        for (int b = 0; b < batch; b++) {
            std::vector<std::vector<Tile>> tiles(ys.size(), std::vector<Tile>(xs.size()));
            for (size_t i = 0; i < ys.size(); i++)
                for (size_t j = 0; j < xs.size(); j++) {
                    const int th = std::min(t, latent_h - ys[i]), tw = std::min(t, latent_w - xs[j]);
                    std::vector<float> z(size_t(th) * size_t(tw) * size_t(C));
                    for (int y = 0; y < th; y++)
                        std::copy_n(latents.data() + size_t(b) * per_latent +
                                        (size_t(ys[i] + y) * size_t(latent_w) + size_t(xs[j])) * size_t(C),
                                    size_t(tw) * size_t(C), z.data() + size_t(y) * size_t(tw) * size_t(C));
                    tiles[i][j] = Tile{th * ds, tw * ds, run(1, th, tw, z.data())};
                }
            int y0 = 0;
            for (size_t i = 0; i < ys.size(); i++) {
                int x0 = 0, rows = 0;
                for (size_t j = 0; j < xs.size(); j++) {
                    Tile& tile = tiles[i][j];
                    if (i > 0) blend_rows(tiles[i - 1][j], tile, blend);
                    if (j > 0) blend_cols(tiles[i][j - 1], tile, blend);
                    rows = std::min(tile.h, keep);
                    const int cols = std::min(tile.w, keep);
                    for (int y = 0; y < rows; y++)
                        std::copy_n(tile.at(y, 0), size_t(cols) * 3,
                                    out.begin() + ptrdiff_t(size_t(b) * per_image + (size_t(y0 + y) * size_t(W) + size_t(x0)) * 3));
                    x0 += cols;
                }
                GL_CHECK(x0 == W, "VAE tiles: the joined row is ", x0, " pixels wide, not ", W);
                y0 += rows;
            }
            GL_CHECK(y0 == H, "VAE tiles: the joined tiles are ", y0, " pixels high, not ", H);
        }
    }
    for (float& v : out) v = std::clamp(v / 2 + 0.5f, 0.0f, 1.0f);
    return out;
}

namespace {

// round(255 v) for v in [0, 1], ties to even (NumPy's round, as std::nearbyint gives), without
// nearbyint's library call: adding and taking away 1.5 * 2^23 rounds any float below 2^22 to an
// integer in the default rounding mode (the same results for every float in [0, 1]; ~5x faster,
// which is milliseconds a 512² image).
inline uint8_t to_u8(float v) {
    constexpr float kRound = 12582912.0f;
    const float x = std::clamp(v, 0.0f, 1.0f) * 255.0f;
    return uint8_t(int((x + kRound) - kRound));
}

}  // namespace

std::vector<data::Bitmap> to_images(const std::vector<float>& pixels, int batch, int height, int width) {
    const size_t per = size_t(height) * size_t(width) * 3;
    GL_CHECK(batch >= 1 && height >= 1 && width >= 1 && pixels.size() == per * size_t(batch), "to_images: ",
             pixels.size(), " values for ", batch, " images of ", width, "x", height, "x3");
    std::vector<data::Bitmap> out;
    for (int b = 0; b < batch; b++) {
        data::Bitmap im{width, height, 3, std::vector<uint8_t>(per)};
        for (size_t i = 0; i < per; i++)
            im.pixels[i] = to_u8(pixels[size_t(b) * per + i]);
        out.push_back(std::move(im));
    }
    return out;
}

}  // namespace sd
