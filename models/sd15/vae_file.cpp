// --vae: a VAE file or folder checked against the model's VAE config (see vae_file.h).
#include "models/sd15/vae_file.h"

#include "models/sd15/model_files.h"

#include <filesystem>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/sources.h"

namespace sd {

namespace fs = std::filesystem;

namespace {

fs::file_status status_of(const fs::path& p) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
        gl::fail(p.string(), ": cannot look at it: ", ec.message());
    return st;
}

std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); i++) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

// The network a folder's config.json describes must be the model's: the graphs are built from
// the model's config (kohya builds SD1.x's and trains with its scaling factor).
void check_same_network(const VaeConfig& got, const VaeConfig& model, const std::string& origin) {
    auto same = [&](const char* field, auto a, auto b) {
        GL_CHECK(a == b, origin, ": ", field, " differs from the model's VAE; a VAE for this model has the "
                 "model's shapes");
    };
    same("block_out_channels", got.block_out, model.block_out);
    same("layers_per_block", got.layers_per_block, model.layers_per_block);
    same("latent_channels", got.latent_channels, model.latent_channels);
    same("in_channels", got.in_channels, model.in_channels);
    same("out_channels", got.out_channels, model.out_channels);
    same("norm_num_groups", got.norm_groups, model.norm_groups);
}

// A diffusers AutoencoderKL folder: the folder itself, else its vae/ (kohya's second try).
fs::path vae_folder(const fs::path& dir) {
    if (fs::exists(status_of(dir / "config.json"))) return dir;
    if (fs::exists(status_of(dir / "vae" / "config.json"))) return dir / "vae";
    gl::fail(dir.string(), ": a folder that is neither a diffusers AutoencoderKL (config.json and "
             "diffusion_pytorch_model.safetensors) nor a diffusers model with one in vae/");
}

fs::path folder_weights(const fs::path& dir) {
    for (const char* n : {"diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin",
                          "diffusion_pytorch_model.fp16.safetensors", "diffusion_pytorch_model.fp16.bin"}) {
        const fs::file_status st = status_of(dir / n);
        if (fs::exists(st) && !fs::is_directory(st)) return dir / n;
    }
    gl::fail(dir.string(), ": no weights file (looked for diffusion_pytorch_model[.fp16].safetensors and "
             ".bin)");
}

// The tensors whose shapes give the VAE's size: the decoder's input and the encoder's output.
void check_shapes(const gl::io::TensorSource& src, const VaeConfig& c) {
    const VaeFormat f = detect_vae_layout(src);
    const VaeKeyFn key = f.layout == VaeLayout::diffusers ? vae_keys_diffusers(src) : vae_keys_original(c, f.prefix);
    const int64_t top = c.block_out.back(), latent = c.latent_channels;
    const std::pair<const char*, std::vector<int64_t>> want[] = {{"decoder.conv_in.weight", {top, latent, 3, 3}},
                                                                 {"encoder.conv_out.weight", {2 * latent, top, 3, 3}}};
    for (const auto& [name, shape] : want) {
        const std::string k = key(name);
        GL_CHECK(src.has(k), src.origin(), ": tensor ", k, " is missing");
        const std::vector<int64_t> got = src.info(k).shape;
        GL_CHECK(got == shape, src.origin(), ": tensor ", k, " has shape ", shape_text(got), ", the model's VAE ",
                 shape_text(shape), ": not a VAE for this model");
    }
}

}  // namespace

VaeFile open_vae_file(const std::string& path, const VaeConfig& model) {
    GL_CHECK(!path.empty(), "--vae: an empty path");
    try {
        const fs::file_status st = status_of(path);
        // kohya would look a missing path up on the Hugging Face hub; nothing is downloaded here.
        GL_CHECK(fs::exists(st), path, ": no such file or folder (a Hugging Face id would need the network)");
        fs::path weights = path;
        if (fs::is_directory(st)) {
            const fs::path dir = vae_folder(path);
            const std::string config = (dir / "config.json").string();
            check_same_network(parse_vae_config(gl::io::read_small_file(config), config), model, config);
            weights = folder_weights(dir);
        }
        VaeFile out;
        out.weights_path = weights.string();
        out.weights = gl::io::open_checkpoint(out.weights_path);
        check_shapes(*out.weights, model);
        return out;
    } catch (const gl::Error& e) {
        gl::fail("--vae: ", e.what());
    }
}

void replace_vae(models::ModelFiles& m, const std::string& path) {
    VaeFile v = open_vae_file(path, m.vae_config());
    m.vae = std::move(v.weights);
    m.vae_path = std::move(v.weights_path);
}

}  // namespace sd
