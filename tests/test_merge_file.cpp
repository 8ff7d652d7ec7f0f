// gl-merge's library side (pipelines/merge_file.h) on the tiny golden models: a LoRA merged into a
// single file gives the outputs of the same LoRA applied at runtime, every other tensor is copied
// bit for bit, a diffusers folder comes out as a folder, and bad requests are refused.
#include "merge_fixtures.h"

using namespace merge_test;

TEST_CASE("merge: a LoRA merged into a single file gives the runtime LoRA's outputs, other tensors are copied") {
    TempDir tmp;
    const fs::path base_path = tmp.path / "base.safetensors", lora_path = tmp.path / "lora.safetensors",
                   out_path = tmp.path / "merged.safetensors";
    concat_files({golden("unet", "unet_original.safetensors"), golden("clip", "clip_tiny_original.safetensors"),
                  golden("vae", "weights_original.safetensors")},
                 base_path);
    auto base_file = std::make_shared<io::SafetensorsFile>(base_path.string());
    size_t modules = 0;
    const auto with_lora = make_lora(*base_file, *base_file, lora_path, &modules);

    const models::ModelFiles base = tiny_files(base_file, base_file, base_path.string(), base_path.string(), sd::Sd15Layout::single_file);
    io::SafetensorsFile lora_file(lora_path.string());
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(base, base_path.string(), lora_file, out_path.string(), {});
    CHECK(r.rank == 4);
    CHECK(r.conv_rank == 0);
    CHECK(r.unet_modules + r.text_encoder_modules == modules);
    CHECK(r.text_encoder_modules == 12);  // 2 layers x (q, k, v, out, fc1, fc2)
    CHECK(r.tensors_written == base_file->list().size());

    io::SafetensorsFile merged(out_path.string());
    TinyModels plain(nullptr);
    plain.load(merged, merged);
    const auto got = plain.run();
    TinyModels original(nullptr);
    original.load(*base_file, *base_file);
    const auto before = original.run();
    const double moved = gltest::rel_err(before.first, with_lora.first, 1e-6);
    MESSAGE("the LoRA moves the UNet output by ", moved, " (relative); merged vs runtime: ",
            gltest::rel_err(got.first, with_lora.first, 1e-6), " / ", gltest::rel_err(got.second, with_lora.second, 1e-6));
    CHECK(moved > 1e-3);
    CHECK(gltest::rel_err(got.first, with_lora.first, 1e-6) < 1e-5);
    CHECK(gltest::rel_err(got.second, with_lora.second, 1e-6) < 1e-5);

    // Every tensor is there with its dtype and shape; the ones no module targets are bit-identical.
    size_t same = 0;
    for (const io::TensorInfo& t : base_file->list()) {
        REQUIRE(merged.has(t.name));
        const io::TensorInfo m = merged.info(t.name);
        CHECK(m.dtype == t.dtype);
        CHECK(m.shape == t.shape);
        std::vector<uint8_t> a(size_t(t.numel()) * dtype_size(t.dtype)), b(a.size());
        base_file->read(t.name, a.data(), t.dtype);
        merged.read(t.name, b.data(), t.dtype);
        same += a == b;
    }
    CHECK(same == base_file->list().size() - modules);
    CHECK(merged.metadata().at("gl.merged_lora") == "lora.safetensors");

    // A LoRA file with a tensor the network does not know is refused, not merged partly.
    {
        std::vector<io::TensorToWrite> ts;
        std::vector<std::vector<float>> data;
        for (const io::TensorInfo& t : lora_file.list()) {
            data.emplace_back(size_t(t.numel()));
            lora_file.read(t.name, data.back().data(), DType::f32);
            ts.push_back({t.name, DType::f32, t.shape, data.back().data()});
        }
        const float one[16] = {1};
        ts.push_back({"lora_unet_mystery_block.lora_down.weight", DType::f32, {4, 4}, one});
        const fs::path odd = tmp.path / "odd.safetensors";
        io::write_safetensors(odd.string(), ts);
        CHECK_THROWS_WITH_AS(lora::merge_lora_into_checkpoint(base, base_path.string(), io::SafetensorsFile(odd.string()),
                                                              (tmp.path / "x.safetensors").string(), {}),
                             doctest::Contains("merging would drop them"), gl::Error);
    }
}

TEST_CASE("merge: a diffusers folder comes out as a new folder with merged UNet and text encoder files") {
    TempDir tmp;
    const fs::path base = tmp.path / "base", out = tmp.path / "out", lora_path = tmp.path / "lora.safetensors";
    fs::create_directories(base / "unet");
    fs::create_directories(base / "text_encoder");
    fs::copy_file(golden("unet", "unet_diffusers.safetensors"), base / "unet" / "diffusion_pytorch_model.safetensors");
    fs::copy_file(golden("unet", "unet_diffusers.safetensors"), base / "unet" / "diffusion_pytorch_model.fp16.safetensors");
    fs::copy_file(golden("clip", "clip_tiny.safetensors"), base / "text_encoder" / "model.safetensors");
    {
        std::ofstream(base / "model_index.json") << "{}";
    }
    const std::string unet_file = (base / "unet" / "diffusion_pytorch_model.safetensors").string(),
                      te_file = (base / "text_encoder" / "model.safetensors").string();
    auto unet = std::make_shared<io::SafetensorsFile>(unet_file);
    auto te = std::make_shared<io::SafetensorsFile>(te_file);
    size_t modules = 0;
    const auto with_lora = make_lora(*unet, *te, lora_path, &modules);
    const models::ModelFiles files = tiny_files(unet, te, unet_file, te_file, sd::Sd15Layout::diffusers);
    io::SafetensorsFile lora_file(lora_path.string());
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(files, base.string(), lora_file, out.string(), {});
    CHECK(r.unet_modules + r.text_encoder_modules == modules);
    CHECK(fs::exists(out / "model_index.json"));
    CHECK(!fs::exists(out / "unet" / "diffusion_pytorch_model.fp16.safetensors"));  // the unmerged variant is gone
    io::SafetensorsFile mu((out / "unet" / "diffusion_pytorch_model.safetensors").string());
    io::SafetensorsFile mt((out / "text_encoder" / "model.safetensors").string());
    // The UNet file is f16: its merged weights are stored back as f16 (rounding ~2^-11 relative),
    // the text encoder's f32.
    for (const io::TensorInfo& t : mu.list()) CHECK(t.dtype == unet->info(t.name).dtype);
    TinyModels plain(nullptr);
    plain.load(mu, mt);
    const auto got = plain.run();
    CHECK(gltest::rel_err(got.first, with_lora.first, 1e-6) < 2e-3);
    CHECK(gltest::rel_err(got.second, with_lora.second, 1e-6) < 1e-5);
    // The base folder is untouched, and an existing output folder is refused.
    CHECK(fs::exists(base / "unet" / "diffusion_pytorch_model.fp16.safetensors"));
    CHECK_THROWS_WITH_AS(lora::merge_lora_into_checkpoint(files, base.string(), lora_file, out.string(), {}),
                         doctest::Contains("exists"), gl::Error);
}
