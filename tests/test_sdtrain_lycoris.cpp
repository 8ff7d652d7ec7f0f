// sdtrain with --network_module lycoris.kohya on the tiny model (sdtrain_fixtures.h): per type
// (LoHa, LoKr, LoRA with DoRA) the plan names it, the run saves LyCORIS's key layout, dtype and
// metadata (its kohya network keys and its sshs_model_hash, no legacy hash), the file reloads (as a
// file's network, txt2img's and gl-merge's, and as the training network) to the same outputs, and
// --network_weights with --dim_from_weights continues from it; gl-txt2img applies the file as
// runtime branches or merged alike, and gl-merge writes the weights txt2img's branches apply.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/file_modules.h"
#include "lora/kohya.h"
#include "pipelines/merge_file.h"
#include "lora/network_args.h"
#include "models/sd15/model_files.h"
#include "pipelines/pipeline.h"
#include "sdtrain_fixtures.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

struct Kind {
    std::string name, title;
    std::vector<std::string> args;
    std::string precision;  // --save_precision
    gl::DType dtype;
};

const std::vector<Kind> kKinds = {
    {"loha", "LoHa", {"algo=loha"}, "fp16", gl::DType::f16},
    {"lokr", "LoKr", {"algo=lokr", "factor=4"}, "float", gl::DType::f32},
    {"dora", "LoRA DoRA", {"algo=lora", "dora_wd=True"}, "bf16", gl::DType::bf16},
};

train::RunConfig lycoris_run(const fs::path& model, const fs::path& data, const fs::path& out, const Kind& k) {
    train::RunConfig c = tiny_config(model, data, out);
    c.network_module = "lycoris.kohya";
    c.network_args = k.args;
    c.save_precision = k.precision;
    c.max_train_steps = 2;
    return c;
}

// The tiny UNet's output at fixed inputs with a network on it, the file loaded.
std::vector<float> unet_output(const sd::Sd15Files& m, const lora::LoraConfig& cfg, const gl::io::TensorSource& file) {
    gl::Graph g;
    nn::Weights w(g, gl::DType::f32);
    lora::LoraNetwork net(cfg);
    net.attach_unet(w);
    const sd::UnetConfig& u = m.unet_cfg;
    const gl::ValueId x = g.input("x", gl::DType::f32, {1, 4, 4, u.in_channels}), t = g.input("t", gl::DType::f32, {1}),
                      ctx = g.input("c", gl::DType::f32, {1, 77, u.cross_attention_dim});
    const gl::ValueId y = sd::unet_forward(w, u, x, t, ctx);
    g.mark_output(y);
    auto rt = gl::make_cpu_runtime(gl::make_plan(g));
    sd::load_unet(w, u, *m.unet, *rt);
    net.init(*rt, 0);
    const lora::LoadReport r = lora::load_lora(file, net, *rt, sd::unet_ldm_names(u));
    CHECK(r.modules == net.modules().size());
    CHECK(r.missing.empty());
    diffusion::NoiseRng rng{7, 0};
    for (gl::ValueId v : {x, ctx}) {
        std::vector<float> d(size_t(g.shape(v).numel()));
        for (float& e : d) e = float(rng.normal());
        rt->write_f32(v, d);
    }
    rt->write_f32(t, {500.0f});
    rt->run();
    return rt->read_f32(y);
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, r = 0;
    for (size_t i = 0; i < a.size(); i++) d = std::max(d, double(std::fabs(a[i] - b[i]))), r = std::max(r, double(std::fabs(b[i])));
    return d / r;
}

}  // namespace

TEST_CASE("sdtrain lycoris: LoHa, LoKr and DoRA runs plan, save LyCORIS's files and reload to the same outputs") {
    Scratch s("lycoris");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    const sd::Sd15Files m = sd::open_sd15(model.string());
    write_text(s.root / "prompts.txt", "a red cat --w 16 --h 16 --s 2 --d 5\n");
    for (const Kind& k : kKinds) {
        CAPTURE(k.name);
        train::RunConfig c = lycoris_run(model, data, s.root / k.name, k);
        // Samples at the start and the end, from the trained network on the sampling pipeline.
        c.sample_prompts = (s.root / "prompts.txt").string();
        c.sample_at_first = true;
        c.sample_every_n_steps = 2;
        train::Session run(c);
        const std::string plan = run.prepare().text();
        CHECK_MESSAGE(plan.find("  " + k.title + " + grads") != std::string::npos, plan);
        run.run();
        size_t samples = 0;
        for (const auto& e : fs::directory_iterator(s.root / k.name / "sample")) samples += e.path().extension() == ".png";
        CHECK(samples == 2);
        const fs::path file = s.root / k.name / "tiny.safetensors";
        const gl::io::SafetensorsFile f(file.string());
        std::set<std::string> modules;
        for (const gl::io::TensorInfo& t : f.list()) {
            CHECK(t.dtype == k.dtype);
            modules.insert(t.name.substr(0, t.name.find('.')));
        }
        // LyCORIS's default preset (full): the 3x3 convs, conv_in / conv_out and the time embedding too.
        for (const char* key : {"lora_unet_conv_in", "lora_unet_conv_out", "lora_unet_time_embedding_linear_1",
                                "lora_unet_down_blocks_0_resnets_0_conv1", "lora_unet_down_blocks_0_attentions_0_proj_in",
                                "lora_te_text_model_encoder_layers_0_self_attn_q_proj", "lora_te_text_model_encoder_layers_1_mlp_fc2"})
            CHECK_MESSAGE(modules.count(key), key);
        const auto& md = f.metadata();
        CHECK(md.at("ss_network_module") == "lycoris.kohya");
        CHECK(md.at("ss_network_dim") == "4");
        CHECK(md.at("ss_network_alpha") == "2.0");
        std::string args;
        for (const std::string& a : k.args) {
            const size_t eq = a.find('=');
            args += "\"" + a.substr(0, eq) + "\": \"" + a.substr(eq + 1) + "\", ";
        }
        CHECK(md.at("ss_network_args") == "{" + args + "\"dropout\": null}");
        CHECK(md.at("sshs_model_hash").rfind("0x", 0) == 0);
        CHECK(md.at("sshs_model_hash").size() == 66);
        CHECK(md.count("sshs_legacy_hash") == 0);
        // The keys LyCORIS's own file of the type carries are all there (with kohya's training keys beside).
        const nlohmann::json tiny = nlohmann::json::parse(
            gltest::slurp(gltest::golden_dir("lycoris") + "kohya_tiny.json"));
        for (const auto& [key, v] : tiny.at("files").at(k.name).at("metadata").items()) CHECK_MESSAGE(md.count(key), key);

        // Reloaded: as a file's network (txt2img, gl-merge) and as the training network, the same outputs.
        lora::LoraConfig from_file;
        from_file.from_file = std::make_shared<lora::FileModules>(
            std::make_shared<gl::io::SafetensorsFile>(file.string()), sd::unet_ldm_names(m.unet_cfg));
        const std::vector<float> a = unet_output(m, from_file, f), b = unet_output(m, c.lora_config(), f);
        const double e = rel(a, b);
        MESSAGE(k.name, ": UNet output with the file as a file's network vs the training network: rel. error ", e);
        CHECK(e < 1e-5);

        // --network_weights with --dim_from_weights: the file's modules continue (one step at lr 0
        // saves them unchanged).
        train::RunConfig cont = lycoris_run(model, data, s.root / (k.name + "-cont"), k);
        cont.network_weights = file.string();
        cont.dim_from_weights = true;
        cont.network_dim.reset();
        cont.max_train_steps = 1;
        cont.learning_rate = 0;
        cont.unet_lr = cont.text_encoder_lr = 0;
        cont.network_train_unet_only = true;
        train::Session(cont).run();
        const gl::io::SafetensorsFile g((s.root / (k.name + "-cont") / "tiny.safetensors").string());
        size_t same = 0, unet = 0;
        for (const gl::io::TensorInfo& t : f.list()) {
            if (t.name.rfind("lora_unet_", 0) != 0) continue;
            // LyCORIS reloads a LoKr whose factors are both full at rank 1 and alpha 1 (its scale is 1 either way).
            const std::string key = t.name.substr(0, t.name.find('.'));
            if (t.name == key + ".alpha" && f.has(key + ".lokr_w1") && f.has(key + ".lokr_w2")) continue;
            unet++;
            REQUIRE(g.has(t.name));
            std::vector<uint8_t> x(t.nbytes()), y(t.nbytes());
            f.read(t.name, x.data(), t.dtype);
            g.read(t.name, y.data(), t.dtype);
            same += x == y;
        }
        CHECK(same == unet);
    }
}

TEST_CASE("sdtrain lycoris: gl-txt2img applies a LoHa / LoKr / DoRA file as branches or merged alike, gl-merge too") {
    Scratch s("lycoris_apply");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    for (const Kind& k : kKinds) {
        CAPTURE(k.name);
        train::RunConfig c = lycoris_run(model, data, s.root / k.name, k);
        c.learning_rate = 1e-2;  // an update large enough to see
        train::Session(c).run();
        const std::string file = (s.root / k.name / "tiny.safetensors").string();
        sd::GenerationParams p;
        p.prompt = "a lighthouse";
        p.width = p.height = 16;
        p.steps = 2;
        p.seed = 3;
        auto image = [&](const fs::path& base_model, std::vector<sd::LoraFile> loras, bool merged) {
            sd::PipelineOptions o;
            o.backend = gl::Backend::cpu;
            o.dtype = gl::DType::f32;
            o.loras = std::move(loras);
            o.merge_loras = merged;
            sd::Pipeline pipe(models::sd15_family().open(base_model.string()), o);
            return pipe.generate_pixels(p);
        };
        const std::vector<float> base = image(model, {}, false), branches = image(model, {{file, 1.0f}}, false),
                                 merged = image(model, {{file, 1.0f}}, true);
        // gl-merge: a new model folder with the weights the branches apply.
        const fs::path out = s.root / (k.name + "-merged");
        const lora::MergeReport r = lora::merge_lora_into_checkpoint(models::sd15_family().open(model.string()), model.string(),
                                                                     gl::io::SafetensorsFile(file), out.string(), {});
        CHECK(r.types == k.title);
        const std::vector<float> folder = image(out, {}, false);
        const double moved = rel(branches, base), e = rel(merged, branches), ef = rel(folder, branches);
        MESSAGE(k.name, ": the file moves the image by ", moved, "; merged vs runtime branches ", e, ", gl-merge's ", ef);
        CHECK(moved > 1e-3);
        CHECK(e < 1e-4);
        CHECK(ef < 2e-3);  // the merged folder holds the model's f16 weights
        // Multiplier 0 leaves the model as it was, but for DoRA: LyCORIS's decomposition at m = 0 is
        // W0 + dW (its ratio m (r - 1) + 1 is 1), which this forward follows.
        if (k.name != "dora") CHECK(image(model, {{file, 0.0f}}, false) == base);
    }
}
