// open_sd15: a single file or a diffusers folder -> weight sources, configs, tokenizer (see
// model_files.h). Config fields are read strictly: a field of the wrong JSON type is an error, not
// a default, and fields that change the architecture in ways the graphs do not implement are
// refused by name, so an SD2 / SDXL model is reported as such rather than as a shape mismatch.
#include "models/sd15/model_files.h"
#include "models/sd15/sd_config.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/sources.h"

namespace sd {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const fs::path& p) { return gl::io::read_small_file(p.string()); }

// fs::status that reports a path it cannot look at (permissions, I/O) as such, by name, and
// answers "not found" for a path that is not there.
fs::file_status stat_of(const fs::path& p) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
        gl::fail(p.string(), ": cannot look at it: ", ec.message());
    return st;
}
bool path_exists(const fs::path& p) { return fs::exists(stat_of(p)); }
bool path_is_dir(const fs::path& p) { return fs::is_directory(stat_of(p)); }

std::string brief(const json& v) {
    std::string s = v.dump();
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

json parse_object(const std::string& text, const std::string& origin) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    GL_CHECK(!j.is_discarded(), origin, ": not valid JSON");
    GL_CHECK(j.is_object(), origin, ": expected a JSON object, got ", brief(j));
    return j;
}

// Typed, strict access to one config object; absent and null fields take the default.
struct Fields {
    const json& j;
    const std::string& origin;

    bool has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }
    [[noreturn]] void bad(const char* k, const char* want) const {
        gl::fail(origin, ": field '", k, "' must be ", want, ", got ", brief(j.at(k)));
    }
    int to_int(const char* k, const json& v) const {
        if (!v.is_number_integer()) bad(k, "an integer (or a list of them)");
        const int64_t x = v.get<int64_t>();
        if (x < 0 || x > (int64_t(1) << 30)) bad(k, "an integer in 0..2^30");
        return int(x);
    }
    int integer(const char* k, int def) const { return has(k) ? to_int(k, j.at(k)) : def; }
    // An integer, or a list of equal integers (diffusers accepts per-block values; ours are uniform).
    int uniform_int(const char* k, int def) const {
        if (!has(k)) return def;
        const json& v = j.at(k);
        if (!v.is_array()) return to_int(k, v);
        if (v.empty()) bad(k, "an integer or a non-empty list");
        const int first = to_int(k, v[0]);
        for (const json& e : v)
            if (to_int(k, e) != first)
                gl::fail(origin, ": field '", k, "' = ", brief(v),
                         " differs between blocks; only SD1.x's uniform value is supported");
        return first;
    }
    std::vector<int> int_list(const char* k, std::vector<int> def) const {
        if (!has(k)) return def;
        if (!j.at(k).is_array() || j.at(k).empty()) bad(k, "a non-empty list of integers");
        std::vector<int> out;
        for (const json& e : j.at(k)) out.push_back(to_int(k, e));
        return out;
    }
    double number(const char* k, double def) const {
        if (!has(k)) return def;
        if (!j.at(k).is_number()) bad(k, "a number");
        return j.at(k).get<double>();
    }
    bool boolean(const char* k, bool def) const {
        if (!has(k)) return def;
        if (!j.at(k).is_boolean()) bad(k, "true or false");
        return j.at(k).get<bool>();
    }
    std::string str(const char* k, const std::string& def) const {
        if (!has(k)) return def;
        if (!j.at(k).is_string()) bad(k, "a string");
        return j.at(k).get<std::string>();
    }
    std::vector<std::string> str_list(const char* k) const {
        if (!j.at(k).is_array() || j.at(k).empty()) bad(k, "a non-empty list of strings");
        std::vector<std::string> out;
        for (const json& e : j.at(k)) {
            if (!e.is_string()) bad(k, "a list of strings");
            out.push_back(e.get<std::string>());
        }
        return out;
    }
    // Fields whose mere presence (non-null) means an architecture the graphs do not build.
    void refuse_set(const char* k, const char* why) const {
        if (has(k)) gl::fail(origin, ": field '", k, "' = ", brief(j.at(k)), " (", why, ") is not supported");
    }
    void require_str(const char* k, const std::string& want, const char* why) const {
        const std::string v = str(k, want);
        if (v != want) gl::fail(origin, ": field '", k, "' = \"", v, "\" is not supported (", why, ": \"", want, "\")");
    }
    void require_bool(const char* k, bool want, const char* why) const {
        if (boolean(k, want) != want)
            gl::fail(origin, ": field '", k, "' = ", brief(j.at(k)), " is not supported (", why, ")");
    }
};

}  // namespace

UnetConfig parse_unet_config(const std::string& text, const std::string& origin) {
    const json j = parse_object(text, origin);
    const Fields f{j, origin};
    f.require_str("_class_name", "UNet2DConditionModel", "SD1.x's UNet class");
    // SDXL (added time/text embeddings), class-conditioned and LCM-style models: each changes
    // tensors or computation the graph does not have. SD2.x's settings (linear projections,
    // per-level heads, upcast attention) are read; the family that opens the model checks them.
    f.refuse_set("addition_embed_type", "SDXL-style added embeddings");
    f.refuse_set("addition_time_embed_dim", "SDXL-style added embeddings");
    f.refuse_set("class_embed_type", "class embeddings");
    f.refuse_set("num_class_embeds", "class embeddings");
    f.refuse_set("projection_class_embeddings_input_dim", "class embeddings");
    f.refuse_set("encoder_hid_dim", "an encoder hidden-state projection");
    f.refuse_set("time_cond_proj_dim", "a timestep-condition projection");
    f.refuse_set("cross_attention_norm", "a cross-attention norm");
    f.refuse_set("timestep_post_act", "a post-timestep activation");
    f.refuse_set("reverse_transformer_layers_per_block", "per-block transformer depths");
    f.require_bool("dual_cross_attention", false, "SD1.x has one cross-attention");
    f.require_bool("center_input_sample", false, "SD1.x does not centre its input");
    f.require_bool("resnet_skip_time_act", false, "SD1.x's resnets");
    if (f.has("only_cross_attention")) {
        const json& v = j.at("only_cross_attention");
        const bool any = v.is_array() ? std::any_of(v.begin(), v.end(), [](const json& e) { return e == true; })
                                      : v == true;
        if (any) gl::fail(origin, ": field 'only_cross_attention' = ", brief(v), " is not supported");
    }
    f.require_str("act_fn", "silu", "SD1.x's activation");
    f.require_str("time_embedding_type", "positional", "SD1.x's sinusoidal timestep embedding");
    f.require_str("resnet_time_scale_shift", "default", "SD1.x's resnets add the time embedding");
    f.require_str("mid_block_type", "UNetMidBlock2DCrossAttn", "SD1.x's mid block");
    f.require_str("attention_type", "default", "SD1.x's attention");
    if (f.integer("conv_in_kernel", 3) != 3 || f.integer("conv_out_kernel", 3) != 3)
        gl::fail(origin, ": conv_in_kernel / conv_out_kernel other than 3 are not supported");
    if (f.integer("downsample_padding", 1) != 1)
        gl::fail(origin, ": field 'downsample_padding' other than 1 is not supported");
    if (f.number("mid_block_scale_factor", 1.0) != 1.0 || f.number("resnet_out_scale_factor", 1.0) != 1.0)
        gl::fail(origin, ": mid_block_scale_factor / resnet_out_scale_factor other than 1 are not supported");

    UnetConfig c;
    c.in_channels = f.integer("in_channels", c.in_channels);
    c.out_channels = f.integer("out_channels", c.out_channels);
    c.block_out = f.int_list("block_out_channels", c.block_out);
    c.layers_per_block = f.uniform_int("layers_per_block", c.layers_per_block);
    // diffusers: num_attention_heads, falling back to attention_head_dim (which SD1.x and SD2.x
    // configs use for the head count); a list that differs between levels (SD2's [5, 10, 20, 20])
    // is kept per level.
    const char* heads_key = f.has("num_attention_heads") ? "num_attention_heads" : "attention_head_dim";
    if (f.has(heads_key) && j.at(heads_key).is_array()) {
        c.level_heads = f.int_list(heads_key, {});
        c.heads = c.level_heads[0];
        if (std::all_of(c.level_heads.begin(), c.level_heads.end(), [&](int h) { return h == c.heads; }))
            c.level_heads.clear();
    } else {
        c.heads = f.integer(heads_key, c.heads);
    }
    c.linear_projection = f.boolean("use_linear_projection", false);
    c.upcast_attention = f.boolean("upcast_attention", false);
    if (f.has("cross_attention_dim") && j.at("cross_attention_dim").is_array())
        f.bad("cross_attention_dim", "one integer (per-block widths are not supported)");
    c.cross_attention_dim = f.integer("cross_attention_dim", c.cross_attention_dim);
    c.transformer_layers = f.uniform_int("transformer_layers_per_block", c.transformer_layers);
    c.norm_groups = f.integer("norm_num_groups", c.norm_groups);
    c.norm_eps = float(f.number("norm_eps", c.norm_eps));
    c.flip_sin_to_cos = f.boolean("flip_sin_to_cos", c.flip_sin_to_cos);
    c.freq_shift = float(f.number("freq_shift", c.freq_shift));
    GL_CHECK(c.norm_eps > 0, origin, ": field 'norm_eps' must be positive");
    if (f.has("down_block_types")) {
        c.down.clear();
        for (const std::string& t : f.str_list("down_block_types")) {
            if (t == "CrossAttnDownBlock2D") c.down.push_back(UnetBlock::cross_attn);
            else if (t == "DownBlock2D") c.down.push_back(UnetBlock::plain);
            else gl::fail(origin, ": down_block_types entry \"", t, "\" is not supported (CrossAttnDownBlock2D, DownBlock2D)");
        }
    }
    if (f.has("up_block_types")) {
        c.up.clear();
        for (const std::string& t : f.str_list("up_block_types")) {
            if (t == "CrossAttnUpBlock2D") c.up.push_back(UnetBlock::cross_attn);
            else if (t == "UpBlock2D") c.up.push_back(UnetBlock::plain);
            else gl::fail(origin, ": up_block_types entry \"", t, "\" is not supported (CrossAttnUpBlock2D, UpBlock2D)");
        }
    }
    try {
        c.validate();
    } catch (const gl::Error& e) {
        gl::fail(origin, ": ", e.what());
    }
    return c;
}

ClipConfig parse_clip_config(const std::string& text, const std::string& origin) {
    const json j = parse_object(text, origin);
    const Fields f{j, origin};
    if (f.has("architectures")) {
        const std::vector<std::string> a = f.str_list("architectures");
        if (std::find(a.begin(), a.end(), "CLIPTextModel") == a.end())
            gl::fail(origin, ": field 'architectures' = ", brief(j.at("architectures")),
                     " is not supported (SD1.x's text encoder is a CLIPTextModel)");
    }
    f.require_str("model_type", "clip_text_model", "a CLIP text encoder");
    ClipConfig c;
    c.vocab = f.integer("vocab_size", int(c.vocab));
    c.width = f.integer("hidden_size", int(c.width));
    c.layers = f.integer("num_hidden_layers", int(c.layers));
    c.heads = f.integer("num_attention_heads", int(c.heads));
    c.mlp = f.integer("intermediate_size", int(c.mlp));
    c.max_pos = f.integer("max_position_embeddings", int(c.max_pos));
    c.eps = float(f.number("layer_norm_eps", c.eps));
    const std::string act = f.str("hidden_act", "quick_gelu");
    if (act == "quick_gelu") c.act = gl::Act::quick_gelu;
    else if (act == "gelu") c.act = gl::Act::gelu_erf;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.act = gl::Act::gelu_tanh;
    else gl::fail(origin, ": field 'hidden_act' = \"", act, "\" is not supported (quick_gelu, gelu, gelu_new)");
    // Ranges far beyond CLIP ViT-L/14, small enough that no derived size overflows.
    const auto in_range = [&](const char* key, int64_t v, int64_t hi) {
        GL_CHECK(v >= 1 && v <= hi, origin, ": field '", key, "' = ", v, " is out of range (1..", hi, ")");
    };
    in_range("vocab_size", c.vocab, int64_t(1) << 24);
    in_range("hidden_size", c.width, int64_t(1) << 16);
    in_range("num_hidden_layers", c.layers, 256);
    in_range("num_attention_heads", c.heads, c.width);
    in_range("intermediate_size", c.mlp, int64_t(1) << 18);
    in_range("max_position_embeddings", c.max_pos, int64_t(1) << 16);
    GL_CHECK(c.width % c.heads == 0, origin, ": hidden_size ", c.width, " is not divisible by num_attention_heads ",
             c.heads);
    GL_CHECK(c.max_pos >= ClipTokenizer::kContext, origin, ": max_position_embeddings ", c.max_pos,
             " is shorter than the ", ClipTokenizer::kContext, " tokens a prompt takes");
    GL_CHECK(c.eps > 0, origin, ": field 'layer_norm_eps' must be positive");
    return c;
}

VaeConfig parse_vae_config(const std::string& text, const std::string& origin) {
    const json j = parse_object(text, origin);
    const Fields f{j, origin};
    f.require_str("_class_name", "AutoencoderKL", "SD1.x's VAE class");
    f.require_str("act_fn", "silu", "SD1.x's activation");
    f.require_bool("use_quant_conv", true, "SD1.x's VAE has quant_conv");
    f.require_bool("use_post_quant_conv", true, "SD1.x's VAE has post_quant_conv");
    f.require_bool("mid_block_add_attention", true, "SD1.x's VAE has mid-block attention");
    if (f.number("shift_factor", 0.0) != 0.0)
        gl::fail(origin, ": field 'shift_factor' = ", brief(j.at("shift_factor")), " is not supported (SD1.x has none)");
    f.refuse_set("latents_mean", "per-channel latent statistics");
    f.refuse_set("latents_std", "per-channel latent statistics");
    VaeConfig c;
    c.in_channels = f.integer("in_channels", c.in_channels);
    c.out_channels = f.integer("out_channels", c.out_channels);
    c.latent_channels = f.integer("latent_channels", c.latent_channels);
    c.block_out = f.int_list("block_out_channels", c.block_out);
    c.layers_per_block = f.integer("layers_per_block", c.layers_per_block);
    c.norm_groups = f.integer("norm_num_groups", c.norm_groups);
    c.scaling_factor = float(f.number("scaling_factor", c.scaling_factor));
    for (const char* k : {"down_block_types", "up_block_types"}) {
        if (!f.has(k)) continue;
        const std::vector<std::string> t = f.str_list(k);
        const char* want = k[0] == 'd' ? "DownEncoderBlock2D" : "UpDecoderBlock2D";
        for (const std::string& s : t)
            if (s != want) gl::fail(origin, ": ", k, " entry \"", s, "\" is not supported (", want, ")");
        if (t.size() != c.block_out.size())
            gl::fail(origin, ": ", k, " has ", t.size(), " entries but block_out_channels has ", c.block_out.size());
    }
    try {
        c.validate();
    } catch (const gl::Error& e) {
        gl::fail(origin, ": ", e.what());
    }
    return c;
}

namespace {

std::shared_ptr<const ClipTokenizer> builtin_tokenizer() {
    // Non-owning: the built-in tokenizer lives for the whole program.
    return std::shared_ptr<const ClipTokenizer>(std::shared_ptr<void>(), &ClipTokenizer::builtin());
}

// The ids a tokenizer produces index the text encoder's embedding table.
void check_tokenizer_fits(const ClipTokenizer& tok, const ClipConfig& c, const std::string& tok_origin,
                          const std::string& clip_origin) {
    GL_CHECK(tok.vocab_size() <= c.vocab, tok_origin, ": the tokenizer has ", tok.vocab_size(),
             " ids but the text encoder (", clip_origin, ") embeds only ", c.vocab);
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

// One weight file of a diffusers sub-folder; the preferred precision first, safetensors before
// .bin (torch zip) within it.
fs::path pick_weights(const fs::path& sub, const std::string& st_base, const std::string& bin_base, bool prefer_fp16) {
    const std::string pref = prefer_fp16 ? ".fp16" : "", other = prefer_fp16 ? "" : ".fp16";
    const std::vector<std::string> names = {st_base + pref + ".safetensors", bin_base + pref + ".bin",
                                            st_base + other + ".safetensors", bin_base + other + ".bin"};
    // Anything by the name counts (a FIFO there is refused by name when opened, not skipped).
    for (const std::string& n : names)
        if (path_exists(sub / n) && !path_is_dir(sub / n)) return sub / n;
    std::string looked;
    for (const std::string& n : names) looked += (looked.empty() ? "" : ", ") + n;
    const bool sharded = path_exists(sub / (st_base + ".safetensors.index.json")) ||
                         path_exists(sub / (bin_base + ".bin.index.json"));
    gl::fail(sub.string(), ": no weights file (looked for ", looked, ")",
             sharded ? "; sharded checkpoints (*.index.json) are not supported" : "");
}

fs::path require_dir(const fs::path& root, const char* name) {
    const fs::path sub = root / name;
    GL_CHECK(path_is_dir(sub), root.string(), ": not a diffusers SD1.5 folder: sub-folder ", name, "/ is missing");
    return sub;
}

std::string read_config(const fs::path& sub) {
    const fs::path p = sub / "config.json";
    GL_CHECK(path_exists(p), sub.string(), ": config.json is missing");
    return read_text(p);
}

}  // namespace

Sd15Files open_sd15_folder(const std::string& dir, bool prefer_fp16) {
    const fs::path root(dir);
    GL_CHECK(path_is_dir(root), dir, ": not a directory");
    // model_index.json is optional (folders assembled by hand lack it); when present it must
    // describe an SD1.x pipeline, which catches SDXL folders before their configs are read.
    const fs::path index = root / "model_index.json";
    if (path_exists(index)) {
        const std::string origin = index.string();
        const json j = parse_object(read_text(index), origin);
        const Fields f{j, origin};
        const std::string cls = f.str("_class_name", "");
        GL_CHECK(cls.find("XL") == std::string::npos && !f.has("text_encoder_2"), origin,
                 ": an SDXL pipeline (", cls.empty() ? "text_encoder_2" : cls, "); only SD1.x is supported");
        if (f.has("unet") && j.at("unet").is_array() && j.at("unet").size() == 2 && j.at("unet")[1].is_string())
            GL_CHECK(j.at("unet")[1] == "UNet2DConditionModel", origin, ": unet is a ", brief(j.at("unet")[1]),
                     ", not a UNet2DConditionModel");
    }

    Sd15Files out;
    out.layout = Sd15Layout::diffusers;
    const fs::path unet_dir = require_dir(root, "unet"), te_dir = require_dir(root, "text_encoder"),
                   vae_dir = require_dir(root, "vae");
    out.unet_cfg = parse_unet_config(read_config(unet_dir), (unet_dir / "config.json").string());
    out.clip_cfg = parse_clip_config(read_config(te_dir), (te_dir / "config.json").string());
    out.vae_cfg = parse_vae_config(read_config(vae_dir), (vae_dir / "config.json").string());

    const fs::path tok_dir = root / "tokenizer";
    if (path_is_dir(tok_dir)) {
        for (const char* n : {"vocab.json", "merges.txt"})
            GL_CHECK(path_exists(tok_dir / n), tok_dir.string(), ": ", n, " is missing");
        out.tokenizer = std::make_shared<const ClipTokenizer>(ClipTokenizer::from_folder(tok_dir.string()));
        out.tokenizer_path = tok_dir.string();
    } else {
        // Every SD1.x model uses CLIP's vocabulary; a folder without tokenizer/ gets the built-in one.
        out.tokenizer = builtin_tokenizer();
    }
    check_tokenizer_fits(*out.tokenizer, out.clip_cfg, out.tokenizer_path.empty() ? "built-in tokenizer" : out.tokenizer_path,
                         (te_dir / "config.json").string());

    const fs::path unet_w = pick_weights(unet_dir, "diffusion_pytorch_model", "diffusion_pytorch_model", prefer_fp16);
    const fs::path te_w = pick_weights(te_dir, "model", "pytorch_model", prefer_fp16);
    const fs::path vae_w = pick_weights(vae_dir, "diffusion_pytorch_model", "diffusion_pytorch_model", prefer_fp16);
    out.unet = gl::io::open_checkpoint(unet_w.string());
    out.text_encoder = gl::io::open_checkpoint(te_w.string());
    out.vae = gl::io::open_checkpoint(vae_w.string());
    out.unet_path = unet_w.string();
    out.text_encoder_path = te_w.string();
    out.vae_path = vae_w.string();
    return out;
}

namespace {

// The tensor `key` of a single file must have shape `want` (-1: any extent); returns its shape.
std::vector<int64_t> expect_shape(const gl::io::TensorSource& src, const std::string& key, std::vector<int64_t> want,
                                  const char* what) {
    GL_CHECK(src.has(key), src.origin(), ": tensor ", key, " (", what, ") is missing");
    const std::vector<int64_t> got = src.info(key).shape;
    bool ok = got.size() == want.size();
    for (size_t i = 0; ok && i < got.size(); i++) ok = want[i] < 0 || want[i] == got[i];
    if (!ok) {
        for (size_t i = 0; i < want.size() && i < got.size(); i++)
            if (want[i] < 0) want[i] = got[i];
        gl::fail(src.origin(), ": tensor ", key, " has shape ", shape_str(got), ", expected ", shape_str(want), " (",
                 what, "): not an SD1.x model of this config");
    }
    return got;
}

}  // namespace

Sd15Files open_sd15_single_file(const std::string& file, const UnetConfig& unet_cfg, const ClipConfig& clip_cfg,
                                const VaeConfig& vae_cfg, std::shared_ptr<const ClipTokenizer> tokenizer) {
    std::shared_ptr<const gl::io::TensorSource> src = gl::io::open_checkpoint(file);
    // Other model families first, by the prefixes that only they use, so the error says what the
    // file is instead of which SD1.x tensor it lacks.
    for (const gl::io::TensorInfo& t : src->list()) {
        if (t.name.starts_with("conditioner."))
            gl::fail(file, ": an SDXL checkpoint (", t.name, "); only SD1.x is supported");
        if (t.name.starts_with("cond_stage_model.model."))
            gl::fail(file, ": an SD2.x checkpoint (OpenCLIP text encoder, ", t.name, "), not SD1.x (sdtrain, gl-txt2img, gl-merge: --v2)");
    }
    auto detect = [&](auto fn, const char* what) {
        try {
            return fn(*src);
        } catch (const gl::Error& e) {
            gl::fail(file, ": not an SD1.x single-file checkpoint (", what, "): ", e.what());
        }
    };
    const ClipLayout cl = detect(detect_clip_layout, "text encoder");
    const UnetLayout ul = detect(detect_unet_layout, "UNet");
    const VaeFormat vf = detect(detect_vae_layout, "VAE");
    GL_CHECK(cl == ClipLayout::original || cl == ClipLayout::original_older, file, ": the text encoder is in the ",
             clip_layout_name(cl), " layout, not a single file's cond_stage_model.*");
    GL_CHECK(ul == UnetLayout::original, file, ": the UNet is in the ", unet_layout_name(ul),
             " layout, not a single file's model.diffusion_model.* (a diffusers folder is opened by its directory)");
    GL_CHECK(vf.layout == VaeLayout::original && vf.prefix == kVaeOriginalPrefix, file,
             ": the VAE is not under a single file's first_stage_model.*");

    Sd15Files out;
    out.layout = Sd15Layout::single_file;
    out.unet_cfg = unet_cfg;
    out.clip_cfg = clip_cfg;
    out.vae_cfg = vae_cfg;
    out.unet_cfg.validate();
    out.vae_cfg.validate();
    // The shapes that tell SD1.x from its relatives: the CLIP width and vocabulary, the UNet's
    // first channels and its cross-attention width (768 for SD1.x), the VAE's latent channels.
    expect_shape(*src, clip_key(cl, "text_model.embeddings.token_embedding.weight"), {clip_cfg.vocab, clip_cfg.width},
                 "CLIP token embedding: vocabulary x width");
    const std::vector<int64_t> conv_in = expect_shape(*src, unet_key_original(unet_cfg, "conv_in.weight"),
                                                      {unet_cfg.block_out[0], -1, 3, 3}, "UNet conv_in");
    // Inpainting models take 9 channels (latent, mask, masked latent); the rest of the UNet is the same.
    out.unet_cfg.in_channels = int(conv_in[1]);
    for (size_t i = 0; i < unet_cfg.down.size(); i++) {
        if (unet_cfg.down[i] != UnetBlock::cross_attn) continue;
        const std::string n = "down_blocks." + std::to_string(i) + ".attentions.0.transformer_blocks.0.attn2.to_k.weight";
        expect_shape(*src, unet_key_original(unet_cfg, n), {unet_cfg.block_out[i], unet_cfg.cross_attention_dim},
                     "UNet cross-attention: channels x text width");
        break;
    }
    expect_shape(*src, vae_keys_original(vae_cfg)("decoder.conv_in.weight"),
                 {vae_cfg.block_out.back(), vae_cfg.latent_channels, 3, 3}, "VAE decoder conv_in");
    const char* tok_origin = tokenizer ? "the given tokenizer" : "built-in tokenizer";
    out.tokenizer = tokenizer ? std::move(tokenizer) : builtin_tokenizer();
    check_tokenizer_fits(*out.tokenizer, clip_cfg, tok_origin, file);
    out.unet = out.text_encoder = out.vae = src;
    out.unet_path = out.text_encoder_path = out.vae_path = file;
    return out;
}

models::ModelFiles model_files(Sd15Files m, const models::Family& f) {
    models::ModelFiles out;
    out.family = &f;
    out.layout = m.layout;
    out.unet = std::move(m.unet);
    out.text_encoder = std::move(m.text_encoder);
    out.vae = std::move(m.vae);
    out.config = sd_config(std::move(m.unet_cfg), std::move(m.clip_cfg));
    out.vae_cfg = std::make_shared<const VaeConfig>(std::move(m.vae_cfg));
    out.tokenizer = std::move(m.tokenizer);
    out.unet_path = std::move(m.unet_path);
    out.text_encoder_path = std::move(m.text_encoder_path);
    out.vae_path = std::move(m.vae_path);
    out.tokenizer_path = std::move(m.tokenizer_path);
    return out;
}

std::shared_ptr<const SdConfig> sd_config(UnetConfig unet, ClipConfig clip) {
    return std::make_shared<const SdConfig>(std::move(unet), std::move(clip));
}

const SdConfig& sd_config(const models::ModelConfig& c) {
    const auto* s = dynamic_cast<const SdConfig*>(&c);
    GL_CHECK(s != nullptr, "the model's configuration is not a Stable Diffusion UNet and CLIP's");
    return *s;
}

void SdConfig::validate() const { unet.validate(); }

Sd15Files open_sd15(const std::string& path, bool prefer_fp16) {
    GL_CHECK(!path.empty(), "an empty path was given where a model belongs");
    const fs::file_status st = stat_of(path);
    GL_CHECK(fs::exists(st), path, ": no such file or directory");
    Sd15Files m = fs::is_directory(st) ? open_sd15_folder(path, prefer_fp16) : open_sd15_single_file(path);
    check_sd15_pipeline(m);
    return m;
}

std::string sd2_traits(const Sd15Files& m) {
    std::vector<std::string> t;
    if (m.unet_cfg.linear_projection) t.push_back("the UNet's linear projections");
    if (!m.unet_cfg.level_heads.empty()) t.push_back("the UNet's per-level attention heads");
    if (m.clip_cfg.act == gl::Act::gelu_erf) t.push_back("the text encoder's gelu");
    std::string out;
    for (const std::string& s : t) out += (out.empty() ? "" : ", ") + s;
    return out;
}

void check_sd15_pipeline(const Sd15Files& m) {
    GL_CHECK(m.unet_cfg.cross_attention_dim == m.clip_cfg.width, m.unet_path, ": the UNet's cross_attention_dim ",
             m.unet_cfg.cross_attention_dim, " does not match the text encoder's hidden_size ", m.clip_cfg.width, " (",
             m.text_encoder_path, ")");
    GL_CHECK(m.unet_cfg.out_channels == m.vae_cfg.latent_channels, m.unet_path, ": the UNet's out_channels ",
             m.unet_cfg.out_channels, " does not match the VAE's latent_channels ", m.vae_cfg.latent_channels, " (",
             m.vae_path, ")");
    GL_CHECK(m.unet_cfg.in_channels >= m.vae_cfg.latent_channels, m.unet_path, ": the UNet's in_channels ",
             m.unet_cfg.in_channels, " is fewer than the VAE's latent_channels ", m.vae_cfg.latent_channels);
}

}  // namespace sd
