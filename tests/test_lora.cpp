// LoRA (lora/) files and names: kohya's SD1.5 targets (192 + 72 modules) and names, the saved file
// (792 tensors, shapes, metadata), save -> load round trips in fp32 / fp16 / bf16, the other key
// layouts, malformed files, LoCon's conv modules. Graph behaviour is in test_lora_apply.cpp.
#include <doctest/doctest.h>

#include "lora_fixtures.h"

TEST_CASE("lora: SD1.5 has kohya's 192 UNet and 72 text encoder modules, the file has 792 tensors") {
    Sd15Graphs s(LoraConfig{16, 8.0f, 1.0f});
    CHECK(count(s.net, Part::unet) == 192);
    CHECK(count(s.net, Part::text_encoder) == 72);

    std::mt19937 rng(11);
    std::map<ValueId, std::vector<float>> store;
    for (ValueId p : s.net.parameters()) store[p] = random_vec(size_t(s.g.shape(p).numel()), 0.1f, rng);
    auto read = [&](ValueId v) { return store.at(v); };
    lora::SaveOptions opt;
    opt.title = "test";
    opt.clip_skip = 2;
    opt.training["ss_learning_rate"] = "0.0001";
    const std::string path = tmp_path("sd15.safetensors");
    CHECK(lora::save_kohya(path, s.net, read, opt) == 792);

    io::SafetensorsFile f(path);
    const std::vector<io::TensorInfo> list = f.list();
    CHECK(list.size() == 792);
    const std::map<std::string, std::vector<int64_t>> expect = {
        {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", {16, 320, 1, 1}},
        {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight", {320, 16, 1, 1}},
        {"lora_unet_up_blocks_3_attentions_2_proj_out.lora_up.weight", {320, 16, 1, 1}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight", {16, 320}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight", {320, 16}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.alpha", {}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight", {16, 768}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_out_0.lora_up.weight", {320, 16}},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_ff_net_0_proj.lora_up.weight", {2560, 16}},
        {"lora_unet_mid_block_attentions_0_transformer_blocks_0_ff_net_2.lora_down.weight", {16, 5120}},
        {"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", {16, 768}},
        {"lora_te_text_model_encoder_layers_11_mlp_fc1.lora_up.weight", {3072, 16}},
    };
    for (const auto& [name, shape] : expect) {
        REQUIRE_MESSAGE(f.has(name), name);
        CHECK_MESSAGE(f.info(name).shape == shape, name);
        CHECK(f.info(name).dtype == DType::f16);
    }
    for (const io::TensorInfo& t : list) {
        CHECK_MESSAGE(
            (t.name.rfind("lora_unet_", 0) == 0 || t.name.rfind("lora_te_text_model_encoder_layers_", 0) == 0),
                      t.name);
        CHECK(t.name.find("resnets") == std::string::npos);
    }
    float alpha = 0.0f;
    f.read("lora_te_text_model_encoder_layers_3_mlp_fc2.alpha", &alpha, DType::f32);
    CHECK(alpha == 8.0f);
    const auto& md = f.metadata();
    CHECK(md.at("ss_network_module") == "networks.lora");
    CHECK(md.at("ss_network_dim") == "16");
    CHECK(md.at("ss_network_alpha") == "8.0");
    CHECK(md.at("ss_network_dropout") == "None");
    CHECK(md.at("ss_base_model_version") == "sd_v1");
    CHECK(md.at("ss_learning_rate") == "0.0001");
    CHECK(md.at("modelspec.encoder_layer") == "2");
    // Only keys kohya writes: the training settings come from the trainer, never defaults made up here.
    for (const char* k : {"ss_resolution", "ss_clip_skip", "ss_tag_frequency", "ss_output_name", "ss_save_precision",
                          "ss_network_train_unet_only", "ss_network_train_text_encoder_only"})
        CHECK_FALSE_MESSAGE(md.count(k), k);
    CHECK(md.at("modelspec.sai_model_spec") == "1.0.1");
    CHECK(md.at("modelspec.architecture") == "stable-diffusion-v1/lora");
    CHECK(md.at("modelspec.title") == "test");

    // fp16 round trip: every value is exactly its fp16 rounding.
    std::map<ValueId, std::vector<float>> back;
    lora::LoadReport rep = lora::load_lora(f, s.net, [&](ValueId v, const std::vector<float>& x) { back[v] = x; });
    CHECK(rep.format == lora::LoraFormat::kohya);
    CHECK(rep.modules == 264);
    CHECK(rep.missing.empty());
    CHECK(rep.unexpected.empty());
    CHECK(rep.file_alpha == 8.0f);
    size_t bad = 0, n = 0;
    double worst = 0.0;
    for (auto& [v, x] : store) {
        REQUIRE(back.count(v));
        for (size_t i = 0; i < x.size(); i++, n++) {
            bad += back[v][i] != f16_to_f32(f32_to_f16(x[i]));
            if (std::fabs(x[i]) >= 6.2e-5f)
                worst = std::max(worst, double(std::fabs(back[v][i] - x[i]) / std::fabs(x[i])));
        }
    }
    MESSAGE("fp16 round trip of ", n, " values: worst rel. error (normals) ", worst);
    CHECK(bad == 0);
    CHECK(worst <= 1.0 / 2048.0);  // half an ulp of an 11-bit significand
    std::filesystem::remove(path);
}

TEST_CASE("lora: save -> load is exact in fp32, rounds as bf16 in bf16, and reads other layouts") {
    Graph g;
    nn::Weights w(g, DType::f32);
    const sd::UnetConfig c = sd::UnetConfig::tiny();
    LoraNetwork net(LoraConfig{4, 2.0f, 1.0f});
    net.attach_unet(w);
    sd::unet_forward(w, c, g.input("x", DType::f32, {1, 4, 4, 4}), g.input("t", DType::f32, {1}),
                     g.input("c", DType::f32, {1, 3, 16}));
    CHECK(net.modules().size() == 4 * 12);  // transformers: one down, one mid, two up
    std::mt19937 rng(5);
    std::map<ValueId, std::vector<float>> store;
    for (ValueId p : net.parameters()) store[p] = random_vec(size_t(g.shape(p).numel()), 0.5f, rng);
    auto read = [&](ValueId v) { return store.at(v); };
    const std::string path = tmp_path("tiny.safetensors");

    for (lora::SavePrecision prec : {lora::SavePrecision::fp32, lora::SavePrecision::bf16}) {
        lora::SaveOptions opt;
        opt.precision = prec;
        lora::save_kohya(path, net, read, opt);
        io::SafetensorsFile f(path);
        std::map<ValueId, std::vector<float>> back;
        lora::load_lora(f, net, [&](ValueId v, const std::vector<float>& x) { back[v] = x; });
        for (auto& [v, x] : store)
            for (size_t i = 0; i < x.size(); i++) {
                const float want = prec == lora::SavePrecision::fp32 ? x[i] : bf16_to_f32(f32_to_bf16(x[i]));
                if (back[v][i] != want) FAIL_CHECK(g.v(v).name, "[", i, "] ", back[v][i], " != ", want);
            }
    }

    // The same tensors under the other layouts' names (diffusers, PEFT, kohya with LDM names),
    // with alpha 4 where the network has 2 (up doubles on load) or none (alpha = rank = 4).
    for (lora::LoraFormat fmt : {lora::LoraFormat::diffusers, lora::LoraFormat::peft, lora::LoraFormat::kohya_ldm}) {
        std::vector<io::TensorToWrite> ts;
        std::vector<float> four{4.0f};
        for (const lora::Module& m : net.modules()) {
            std::string d, u, a;
            const std::string pre = "unet." + m.layer().path;
            if (fmt == lora::LoraFormat::diffusers) d = pre + ".lora.down.weight", u = pre + ".lora.up.weight";
            if (fmt == lora::LoraFormat::peft) d = pre + ".lora_A.weight", u = pre + ".lora_B.weight";
            if (fmt == lora::LoraFormat::kohya_ldm) {
                std::string k = sd::unet_key_original(c, m.layer().path + ".weight");
                k = k.substr(std::string(sd::kUnetOriginalPrefix).size());
                k = lora::kohya_key(models::sd15_family(), Part::unet, k.substr(0, k.size() - 7));
                d = k + ".lora_down.weight", u = k + ".lora_up.weight", a = k + ".alpha";
                CHECK(k.rfind("lora_unet_input_blocks_1_1_", 0) + k.rfind("lora_unet_middle_block_1_", 0) +
                          k.rfind("lora_unet_output_blocks_", 0) <
                      std::string::npos);
            }
            ts.push_back({d, DType::f32, {4, m.layer().in}, store[m.param("lora_down.weight")].data()});
            ts.push_back({u, DType::f32, {m.layer().out, 4}, store[m.param("lora_up.weight")].data()});
            if (!a.empty()) ts.push_back({a, DType::f32, {}, four.data()});
        }
        io::write_safetensors(path, ts);
        io::SafetensorsFile f(path);
        std::map<ValueId, std::vector<float>> back;
        lora::LoadReport rep =
            lora::load_lora(f, net, [&](ValueId v, const std::vector<float>& x) { back[v] = x; }, sd::unet_ldm_names(c));
        CHECK(rep.format == fmt);
        CHECK(rep.modules == net.modules().size());
        CHECK(rep.unexpected.empty());
        CHECK(rep.file_alpha == 4.0f);
        for (const lora::Module& m : net.modules()) {
            CHECK(back[m.param("lora_down.weight")] == store[m.param("lora_down.weight")]);
            for (size_t i = 0; i < store[m.param("lora_up.weight")].size(); i++) CHECK(back[m.param("lora_up.weight")][i] == 2.0f * store[m.param("lora_up.weight")][i]);
        }
    }

    // A rank other than the network's is refused by name.
    LoraNetwork other(LoraConfig{8, 2.0f, 1.0f});
    Graph g2;
    nn::Weights w2(g2, DType::f32);
    other.attach_unet(w2);
    sd::unet_forward(w2, c, g2.input("x", DType::f32, {1, 4, 4, 4}), g2.input("t", DType::f32, {1}),
                     g2.input("c", DType::f32, {1, 3, 16}));
    lora::save_kohya(path, net, read);
    io::SafetensorsFile f(path);
    CHECK_THROWS_WITH_AS(lora::load_lora(f, other, [](ValueId, const std::vector<float>&) {}),
                         doctest::Contains("rank 4 where the network has rank 8"), gl::Error);
    std::filesystem::remove(path);
}

TEST_CASE("lora: malformed files are refused by name") {
    Graph g;
    nn::Weights w(g, DType::f32);
    LoraNetwork net(LoraConfig{2, 1.0f, 1.0f});
    net.attach_text_encoder(w);
    sd::build_clip(w, g, g.input("ids", DType::i32, {1, 3}), sd::ClipConfig::tiny());
    const lora::Module& m = net.modules()[0];
    const std::string k = m.key(), path = tmp_path("bad.safetensors");
    std::vector<float> buf(4096, 0.5f);
    auto try_load = [&](std::vector<io::TensorToWrite> ts) {
        io::write_safetensors(path, ts);
        io::SafetensorsFile f(path);
        lora::load_lora(f, net, [](ValueId, const std::vector<float>&) {});
    };
    CHECK_THROWS_WITH_AS(try_load({{"something_else", DType::f32, {2}, buf.data()}}),
                         doctest::Contains("holds none of the network's 12 modules"), gl::Error);
    CHECK_THROWS_WITH_AS(try_load({{k + ".lora_down.weight", DType::f32, {2, m.layer().in}, buf.data()}}),
                         doctest::Contains(("has no " + k + ".lora_up.weight").c_str()), gl::Error);
    CHECK_THROWS_WITH_AS(try_load({{k + ".lora_down.weight", DType::f32, {2, m.layer().in + 1}, buf.data()},
                                   {k + ".lora_up.weight", DType::f32, {m.layer().out, 2}, buf.data()}}),
                         doctest::Contains("expected [2, 32]"), gl::Error);
    CHECK_THROWS_WITH_AS(try_load({{k + ".lora_down.weight", DType::f32, {2, m.layer().in}, buf.data()},
                                   {k + ".lora_up.weight", DType::f32, {m.layer().out, 2}, buf.data()},
                                   {k + ".alpha", DType::f32, {2}, buf.data()}}),
                         doctest::Contains("expected a scalar"), gl::Error);
    // One module present: loaded, the other 11 reported missing.
    io::write_safetensors(path, {{k + ".lora_down.weight", DType::f32, {2, m.layer().in}, buf.data()},
                                 {k + ".lora_up.weight", DType::f32, {m.layer().out, 2}, buf.data()},
                                 {"extra", DType::f32, {1}, buf.data()}});
    io::SafetensorsFile f(path);
    lora::LoadReport rep = lora::load_lora(f, net, [](ValueId, const std::vector<float>&) {});
    CHECK(rep.modules == 1);
    CHECK(rep.missing.size() == 11);
    CHECK(rep.unexpected == std::vector<std::string>{"extra"});
    std::filesystem::remove(path);
}

TEST_CASE("lora: LoCon on SD1.5 adds kohya's 86 ResnetBlock2D/sampler modules, saved in PyTorch's conv layout") {
    LoraConfig c{16, 8.0f, 1.0f};
    c.conv_dim = 8;
    c.conv_alpha = 4.0f;
    Sd15Graphs s(c);
    CHECK(count(s.net, Part::unet) == 192 + 86);  // 22 resnets x 3 + 14 conv_shortcuts + 3 down + 3 upsamplers
    CHECK(count(s.net, Part::text_encoder) == 72);
    const lora::Module* conv1 = s.net.find("lora_unet_down_blocks_0_resnets_0_conv1");
    REQUIRE(conv1 != nullptr);
    CHECK(conv1->layer().kind == lora::ModuleKind::conv);
    CHECK(s.g.shape(conv1->param("lora_down.weight")) == Shape{8, 3, 3, 320});

    std::mt19937 rng(13);
    std::map<ValueId, std::vector<float>> store;
    for (ValueId p : s.net.parameters()) store[p] = random_vec(size_t(s.g.shape(p).numel()), 0.1f, rng);
    const std::string path = tmp_path("locon.safetensors");
    lora::SaveOptions opt;
    opt.precision = lora::SavePrecision::fp32;
    CHECK(lora::save_kohya(path, s.net, [&](ValueId v) { return store.at(v); }, opt) == 3 * (278 + 72));
    io::SafetensorsFile f(path);
    const std::map<std::string, std::vector<int64_t>> expect = {
        {"lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", {8, 320, 3, 3}},
        {"lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", {320, 8, 1, 1}},
        {"lora_unet_down_blocks_0_resnets_0_time_emb_proj.lora_down.weight", {16, 1280}},
        {"lora_unet_down_blocks_1_resnets_0_conv_shortcut.lora_down.weight", {16, 320, 1, 1}},
        {"lora_unet_down_blocks_1_resnets_0_conv_shortcut.lora_up.weight", {640, 16, 1, 1}},
        {"lora_unet_down_blocks_0_downsamplers_0_conv.lora_down.weight", {8, 320, 3, 3}},
        {"lora_unet_up_blocks_0_upsamplers_0_conv.lora_up.weight", {1280, 8, 1, 1}},
        {"lora_unet_up_blocks_3_resnets_2_conv_shortcut.lora_down.weight", {16, 640, 1, 1}},
    };
    for (const auto& [name, shape] : expect) {
        REQUIRE_MESSAGE(f.has(name), name);
        CHECK_MESSAGE(f.info(name).shape == shape, name);
    }
    CHECK(!f.has("lora_unet_conv_in.lora_down.weight"));
    CHECK(!f.has("lora_unet_time_embedding_linear_1.lora_down.weight"));
    float a3 = 0.0f, a1 = 0.0f;
    f.read("lora_unet_mid_block_resnets_1_conv2.alpha", &a3, DType::f32);
    f.read("lora_unet_mid_block_resnets_1_time_emb_proj.alpha", &a1, DType::f32);
    CHECK(a3 == 4.0f);
    CHECK(a1 == 8.0f);
    CHECK(f.metadata().at("ss_network_args") == R"({"conv_dim": "8", "conv_alpha": "4.0"})");
    // PyTorch's [r, in, kh, kw] element (0, 1, 0, 2) is our [r, kh, kw, in] element (0, 0, 2, 1).
    std::vector<float> d(size_t(8 * 320 * 9));
    f.read("lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", d.data(), DType::f32);
    CHECK(d[size_t((0 * 320 + 1) * 9 + 0 * 3 + 2)] == store[conv1->param("lora_down.weight")][size_t(((0 * 3 + 0) * 3 + 2) * 320 + 1)]);
    // fp32 round trip exact, conv modules included.
    std::map<ValueId, std::vector<float>> back;
    lora::LoadReport rep = lora::load_lora(f, s.net, [&](ValueId v, const std::vector<float>& x) { back[v] = x; });
    CHECK(rep.modules == 350);
    CHECK(rep.unexpected.empty());
    size_t bad = 0;
    for (auto& [v, x] : store) bad += back[v] != x;
    CHECK(bad == 0);
    std::filesystem::remove(path);
}

TEST_CASE("lora: kohya metadata names the network dropouts as kohya writes them") {
    lora::LoraConfig c;
    c.rank = 8;
    c.dropout = 0.1f;
    c.rank_dropout = 0.25f;
    lora::LoraNetwork net(c);
    const auto md = lora::kohya_metadata(net, lora::SaveOptions{});
    CHECK(md.at("ss_network_dropout") == "0.1");
    CHECK(md.at("ss_network_args") == "{\"rank_dropout\": \"0.25\"}");
}
