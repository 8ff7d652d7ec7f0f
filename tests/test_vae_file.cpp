// --vae (models/sd15/vae_file.h): a VAE file or folder of its own, in each layout kohya's
// load_vae takes, checked against the model's VAE; in a run it replaces the model's VAE for the
// latents (the model's own VAE given as a file trains bit for bit as without it) and is named in
// kohya's ss_vae_* metadata.
#include <doctest/doctest.h>

#include <fstream>

#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sha256.h"
#include "models/sd15/vae_file.h"
#include "sdtrain_fixtures.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

std::string vae_golden(const char* name) { return gltest::golden_dir("vae") + name; }

// src's tensors renamed and scaled, as a safetensors file.
void write_vae(const fs::path& file, const std::string& src, const std::string& drop_prefix, float scale = 1.0f) {
    const gl::io::SafetensorsFile f(src);
    std::vector<std::vector<float>> data;
    std::vector<gl::io::TensorToWrite> out;
    const std::vector<gl::io::TensorInfo> list = f.list();
    data.reserve(list.size());
    for (const gl::io::TensorInfo& t : list) {
        std::vector<float> v(size_t(t.numel()));
        f.read(t.name, v.data(), gl::DType::f32);
        for (float& x : v) x *= scale;
        data.push_back(std::move(v));
        out.push_back({t.name.substr(t.name.rfind(drop_prefix, 0) == 0 ? drop_prefix.size() : 0), gl::DType::f32,
                       t.shape, data.back().data()});
    }
    fs::create_directories(file.parent_path());
    gl::io::write_safetensors(file.string(), out);
}

std::map<std::string, std::vector<float>> tensors(const fs::path& file) {
    const gl::io::SafetensorsFile f(file.string());
    std::map<std::string, std::vector<float>> m;
    for (const gl::io::TensorInfo& t : f.list()) {
        std::vector<float> v(size_t(t.numel()));
        f.read(t.name, v.data(), gl::DType::f32);
        m[t.name] = std::move(v);
    }
    return m;
}

bool has_text(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string sha256_of(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    gl::io::Sha256 h;
    h.update(bytes.data(), bytes.size());
    return h.hex();
}

}  // namespace

TEST_CASE("--vae: single files with and without first_stage_model., diffusers folders and a model's vae/") {
    Scratch s("vae-file");
    const sd::VaeConfig tiny = sd::VaeConfig::tiny();
    // A whole single file's VAE keys, and the standalone file (vae-ft-mse-840000-ema-pruned's layout).
    const sd::VaeFile prefixed = sd::open_vae_file(vae_golden("weights_original.safetensors"), tiny);
    CHECK(sd::detect_vae_layout(*prefixed.weights).prefix == sd::kVaeOriginalPrefix);
    const fs::path standalone = s.root / "vae-ft.safetensors";
    write_vae(standalone, vae_golden("weights_original.safetensors"), sd::kVaeOriginalPrefix);
    const sd::VaeFile alone = sd::open_vae_file(standalone.string(), tiny);
    CHECK(sd::detect_vae_layout(*alone.weights).layout == sd::VaeLayout::original);
    CHECK(sd::detect_vae_layout(*alone.weights).prefix.empty());
    CHECK(alone.weights_path == standalone.string());
    // A diffusers AutoencoderKL folder, and a whole diffusers model (kohya's retry with vae/).
    const fs::path folder = s.root / "ae";
    write_text(folder / "config.json", kVaeConfig);
    fs::copy_file(vae_golden("weights_diffusers.safetensors"), folder / "diffusion_pytorch_model.safetensors");
    CHECK(sd::open_vae_file(folder.string(), tiny).weights_path ==
          (folder / "diffusion_pytorch_model.safetensors").string());
    const fs::path model = make_tiny_model(s.root);
    CHECK(sd::open_vae_file(model.string(), tiny).weights_path ==
          (model / "vae" / "diffusion_pytorch_model.safetensors").string());

    // replace_vae swaps the weights and the path the cache keys and metadata name.
    models::ModelFiles m = models::sd15_family().open(model.string());
    sd::replace_vae(m, standalone.string());
    CHECK(m.vae_path == standalone.string());
    CHECK(m.vae->has("decoder.mid.block_1.conv1.weight"));
}

TEST_CASE("--vae: a path that is no VAE for this model is refused naming it") {
    Scratch s("vae-file-bad");
    const sd::VaeConfig tiny = sd::VaeConfig::tiny();
    auto error = [&](const std::string& path, const sd::VaeConfig& c) {
        return gltest::error_of([&] { sd::open_vae_file(path, c); });
    };
    const std::string missing = (s.root / "nope.safetensors").string();
    CHECK(error(missing, tiny) == "--vae: " + missing + ": no such file or folder (a Hugging Face id would need the network)");
    CHECK(has_text(error("", tiny), "--vae: an empty path"));
    // No VAE in the file (a UNet's tensors), a VAE of another size.
    CHECK(has_text(error(gltest::golden_dir("unet") + "unet_diffusers.safetensors", tiny), "no VAE found"));
    CHECK(has_text(error(vae_golden("weights_original.safetensors"), sd::VaeConfig::sd15()),
                   "tensor first_stage_model.decoder.conv_in.weight has shape [16, 4, 3, 3], the model's VAE "
                   "[512, 4, 3, 3]: not a VAE for this model"));
    // A folder that is neither form, one without weights, one of another network.
    fs::create_directories(s.root / "empty");
    CHECK(has_text(error((s.root / "empty").string(), tiny), "neither a diffusers AutoencoderKL"));
    write_text(s.root / "noweights" / "config.json", kVaeConfig);
    CHECK(has_text(error((s.root / "noweights").string(), tiny), "no weights file"));
    std::string wide = kVaeConfig;
    wide.replace(wide.find("[8, 16]"), 7, "[8, 32]");
    write_text(s.root / "wide" / "config.json", wide);
    CHECK(has_text(error((s.root / "wide").string(), tiny), "config.json: block_out_channels differs from the model's VAE"));
}

TEST_CASE("sdtrain --vae: the model's own VAE as a file trains bit for bit as without it, another VAE changes the run") {
    Scratch s("vae-run");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    const fs::path same = s.root / "vae-ft.safetensors";
    write_vae(same, vae_golden("weights_original.safetensors"), sd::kVaeOriginalPrefix);
    const fs::path other = s.root / "other-vae";
    write_text(other / "config.json", kVaeConfig);
    write_vae(other / "diffusion_pytorch_model.safetensors", vae_golden("weights_diffusers.safetensors"), "", 0.8f);

    train::RunConfig plain = tiny_config(model, data, s.root / "plain");
    plain.max_train_steps = 2;
    plain.cache_latents = false;  // cached latents draw their noise by a key holding the VAE's path
    train::RunConfig with_same = plain, with_other = plain;
    with_same.output_dir = (s.root / "same").string();
    with_same.vae = same.string();
    with_other.output_dir = (s.root / "other").string();
    with_other.vae = other.string();
    // Nothing is written into --vae's folder.
    train::RunConfig inside = with_other;
    inside.output_dir = (other / "out").string();
    CHECK(gltest::error_of([&] { train::Session(inside).run(); }).find("lies inside --vae " + other.string()) !=
          std::string::npos);
    for (const train::RunConfig* c : {&plain, &with_same, &with_other}) train::Session(*c).run();
    const auto lora = [](const train::RunConfig& c) { return tensors(fs::path(c.output_dir) / "tiny.safetensors"); };
    CHECK(lora(with_same) == lora(plain));
    CHECK(lora(with_other) != lora(plain));

    // kohya's keys: the base name, the webui's short hash (64 KiB at 1 MiB: nothing in a small
    // file, so the empty input's) and the file's sha256; none without --vae.
    const auto meta = [](const train::RunConfig& c) {
        return gl::io::SafetensorsFile((fs::path(c.output_dir) / "tiny.safetensors").string()).metadata();
    };
    const auto m = meta(with_same);
    CHECK(m.at("ss_vae_name") == "vae-ft.safetensors");
    CHECK(m.at("ss_new_vae_hash") == sha256_of(same));
    CHECK(m.at("ss_vae_hash") == "e3b0c442");
    CHECK(meta(with_other).at("ss_vae_hash") == "IsADirectory");
    CHECK_FALSE(meta(plain).count("ss_vae_name"));
}
