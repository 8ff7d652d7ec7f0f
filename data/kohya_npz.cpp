// kohya's latent cache files (`*_sd.npz` beside the images) read as latent cache entries: the
// file's name, kohya's own rule for a file that matches, and our checks on top (latent_cache.h).
#include <cmath>

#include "data/latent_cache.h"
#include "data/npz.h"
#include "ggml-lite/core/error.h"

namespace data {
namespace fs = std::filesystem;

fs::path kohya_npz_path(const fs::path& image, int w, int h) {
    fs::path stem = image;
    stem.replace_extension();
    fs::path old = stem;
    old += ".npz";
    std::error_code ec;
    if (fs::exists(old, ec)) return old;
    char size[32];
    std::snprintf(size, sizeof size, "_%04dx%04d_sd.npz", w, h);
    stem += size;
    return stem;
}

namespace {

// kohya's [C, H, W] latents -> (z - shift) * scale as [H][W][C].
std::optional<Latent> latents_of(const NpzFile& f, const std::string& name, const KohyaNpzExpect& ex,
                                 const LatentSpec& spec, std::string* why) {
    const NpyArray a = f.array(name);
    const int64_t h = ex.bucket.h / 8, w = ex.bucket.w / 8;
    if (a.kind != 'f' || a.shape != std::vector<int64_t>{spec.channels, h, w}) {
        std::string shape;
        for (int64_t d : a.shape) shape += gl::cat(shape.empty() ? "" : ", ", d);
        *why = gl::cat("'", name, "' is ", a.kind == 'f' ? "float" : "not float", " [", shape, "], the bucket ",
                       ex.bucket.w, "x", ex.bucket.h, " needs float [", spec.channels, ", ", h, ", ", w, "]");
        return std::nullopt;
    }
    const std::vector<float> z = a.to_float();
    Latent l{int(h), int(w), spec.channels, std::vector<float>(z.size())};
    const size_t plane = size_t(h) * size_t(w);
    for (size_t c = 0; c < size_t(spec.channels); c++)
        for (size_t i = 0; i < plane; i++) {
            const float v = z[c * plane + i];
            if (!std::isfinite(v)) {
                *why = gl::cat("'", name, "' holds NaN or inf");
                return std::nullopt;
            }
            l.data[i * size_t(spec.channels) + c] = (v - spec.shift) * spec.scale;
        }
    return l;
}

}  // namespace

std::optional<KohyaLatents> read_kohya_npz(const fs::path& npz, const KohyaNpzExpect& ex, const LatentSpec& spec,
                                           std::string* why) {
    try {
        GL_CHECK(spec.downscale == 8 && spec.channels >= 1, "the encoder's latents are at 1/", spec.downscale,
                 " of the image (kohya's SD files: 1/8)");
        // Files beside images are small: a latent of 2048x2048 with its mirror and mask is ~20 MiB.
        const NpzFile f(npz, uint64_t(256) << 20);
        for (const char* need : {"latents", "original_size", "crop_ltrb"})
            if (!f.has(need)) {
                *why = gl::cat("no '", need, "' array");
                return std::nullopt;
            }
        if (ex.flip && !f.has("latents_flipped")) {
            *why = "no 'latents_flipped' array (the subset has flip_aug)";
            return std::nullopt;
        }
        if (ex.alpha_mask && !f.has("alpha_mask")) {
            *why = "no 'alpha_mask' array (the subset has alpha_mask)";
            return std::nullopt;
        }
        const std::vector<int64_t> size = f.array("original_size").to_int();
        if (size != std::vector<int64_t>{ex.image_width, ex.image_height}) {
            *why = gl::cat("its original_size is not the image's ", ex.image_width, "x", ex.image_height);
            return std::nullopt;
        }
        if (f.array("crop_ltrb").count() != 4) {
            *why = "its crop_ltrb does not hold 4 values";
            return std::nullopt;
        }
        if (ex.alpha_mask && f.array("alpha_mask").shape != std::vector<int64_t>{ex.bucket.h, ex.bucket.w}) {
            *why = gl::cat("its alpha_mask is not ", ex.bucket.h, "x", ex.bucket.w);
            return std::nullopt;
        }
        KohyaLatents out;
        std::optional<Latent> l = latents_of(f, "latents", ex, spec, why);
        if (!l) return std::nullopt;
        out.latents = std::move(*l);
        if (ex.flip) {
            out.flipped = latents_of(f, "latents_flipped", ex, spec, why);
            if (!out.flipped) return std::nullopt;
        }
        return out;
    } catch (const gl::Error& e) {
        *why = e.what();
        return std::nullopt;
    }
}

}  // namespace data
