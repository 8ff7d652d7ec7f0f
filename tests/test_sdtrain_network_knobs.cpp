// sdtrain's network knobs on the tiny model (sdtrain_fixtures.h): block lr weights and LoRA+
// train in kohya's parameter groups, logged under kohya's lr names; --scale_weight_norms keeps every
// module's update within the norm and logs kohya's figures (metrics.jsonl, TensorBoard, the progress
// line); block_dims give each block its rank and lr-0 blocks no module; --base_weights trains
// exactly as the model gl-merge makes from the same files does (LoRA and LoHa files, dense and int8
// bases), and keeps text-encoder caches of another base apart.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "ggml-lite/io/safetensors.h"
#include "models/sd15/model_files.h"
#include "pipelines/merge_file.h"
#include "sdtrain_fixtures.h"
#include "tools/common/progress.h"
#include "train/metrics.h"
#include "train/run/session.h"
#include "train/tensorboard.h"

using namespace sdtrain_test;

namespace {

std::pair<int, std::string> run_binary(const std::string& args) {
    const std::string cmd = std::string(GL_SDTRAIN_BIN) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string text;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
    const int status = pclose(p);
    return {WEXITSTATUS(status), text};
}

std::string common_args(const fs::path& model, const fs::path& data, const fs::path& out) {
    return "--pretrained_model_name_or_path " + model.string() + " --train_data_dir " + data.string() +
           " --resolution 48 --enable_bucket --bucket_no_upscale --bucket_reso_steps 8 --min_bucket_reso 16 "
           "--caption_extension .txt --cache_latents --train_batch_size 2 --network_module networks.lora "
           "--network_dim 4 --seed 5 --backend cpu --max_train_steps 4 --learning_rate 1e-3 --output_name tiny "
           "--output_dir " +
           out.string();
}

// Every tensor of a file by name, as bytes.
std::map<std::string, std::vector<uint8_t>> tensors(const fs::path& file) {
    const gl::io::SafetensorsFile f(file.string());
    std::map<std::string, std::vector<uint8_t>> out;
    for (const gl::io::TensorInfo& t : f.list()) {
        std::vector<uint8_t> b(t.nbytes());
        f.read(t.name, b.data(), t.dtype);
        out[t.name] = std::move(b);
    }
    return out;
}

std::vector<float> f32(const gl::io::SafetensorsFile& f, const std::string& name) {
    std::vector<float> v(size_t(f.info(name).numel()));
    f.read(name, v.data(), gl::DType::f32);
    return v;
}

// The Frobenius norm of (alpha / rank) up @ down of one module of a kohya file.
double update_norm(const gl::io::SafetensorsFile& f, const std::string& key) {
    const std::vector<float> up = f32(f, key + ".lora_up.weight"), down = f32(f, key + ".lora_down.weight");
    const int64_t r = f.info(key + ".lora_down.weight").shape[0], in = int64_t(down.size()) / r,
                  out = int64_t(up.size()) / r;
    const double alpha = f32(f, key + ".alpha")[0];
    double sq = 0;
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double acc = 0;
            for (int64_t q = 0; q < r; q++) acc += double(up[size_t(o * r + q)]) * down[size_t(q * in + i)];
            sq += acc * acc;
        }
    return alpha / double(r) * std::sqrt(sq);
}

// The model's UNet file rewritten in f32: gl-merge keeps a file's dtype, so the model it makes
// from an f16 file rounds after each merge, where --base_weights merges in f32 and the loader rounds.
void unet_in_f32(const fs::path& model) {
    const fs::path file = model / "unet" / "diffusion_pytorch_model.safetensors";
    std::vector<std::vector<float>> data;
    std::vector<gl::io::TensorToWrite> out;
    {
        const gl::io::SafetensorsFile f(file.string());
        const std::vector<gl::io::TensorInfo> list = f.list();
        data.reserve(list.size());
        for (const gl::io::TensorInfo& t : list) {
            data.push_back(f32(f, t.name));
            out.push_back({t.name, gl::DType::f32, t.shape, data.back().data()});
        }
    }
    gl::io::write_safetensors(file.string(), out);
}

std::vector<std::string> module_keys(const gl::io::SafetensorsFile& f) {
    std::vector<std::string> k;
    const std::string suffix = ".lora_down.weight";
    for (const gl::io::TensorInfo& t : f.list())
        if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
            k.push_back(t.name.substr(0, t.name.size() - suffix.size()));
    return k;
}

}  // namespace

TEST_CASE("sdtrain network knobs: block lr weights, LoRA+ and max norm in the groups, files and logs kohya makes") {
    Scratch s("knobs-groups");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    const fs::path logs = s.root / "logs";
    // The tiny UNet's modules lie in blocks 1 (down_blocks.0), 12 (mid) and 16, 17 (up_blocks.1).
    const auto [status, text] =
        run_binary(common_args(model, data, out) + " --text_encoder_lr 5e-4 --scale_weight_norms 0.001 --logging_dir " +
                   logs.string() +
                   " --network_args down_lr_weight=0,0.5 mid_lr_weight=0 up_lr_weight=zeros+2 "
                   "loraplus_lr_ratio=4 frobnicate=1");
    CAPTURE(text);
    REQUIRE(status == 0);
    CHECK(text.find("note: --network_args frobnicate=1: networks.lora does not read this key") != std::string::npos);
    CHECK(text.find("note: --network_args down_lr_weight holds 2 weights for 12 blocks: the rest are 1") !=
          std::string::npos);

    // The file: no module in the mid block (lr weight 0), every update within the max norm.
    const gl::io::SafetensorsFile f((out / "tiny.safetensors").string());
    const std::vector<std::string> keys = module_keys(f);
    REQUIRE(!keys.empty());
    for (const std::string& k : keys) {
        CAPTURE(k);
        CHECK(k.find("mid_block") == std::string::npos);
        CHECK(update_norm(f, k) <= 0.001 * (1 + 1e-5));
    }

    // metrics.jsonl: every group's lr under kohya's names, and the max-norm figures.
    const train::MetricsHistory h = train::read_metrics(out / "metrics.jsonl");
    REQUIRE(h.steps.size() == 4);
    int64_t scaled = 0;
    for (const train::StepMetrics& m : h.steps) {
        std::map<std::string, double> lr;
        for (const train::LrValue& v : m.group_lr) lr[v.group] = v.lr;
        CHECK(lr.size() == 8);
        CHECK(lr.at("unet_block1") == doctest::Approx(0.5e-3));
        CHECK(lr.at("unet_block1 plus") == doctest::Approx(2e-3));
        CHECK(lr.at("unet_block16") == doctest::Approx(2e-3));
        CHECK(lr.at("unet_block17 plus") == doctest::Approx(8e-3));
        CHECK(lr.at("textencoder") == doctest::Approx(5e-4));
        CHECK(lr.at("textencoder plus") == doctest::Approx(2e-3));
        CHECK(m.keys_scaled >= 0);
        CHECK(m.max_key_norm <= 0.001 * (1 + 1e-5));
        CHECK(m.average_key_norm <= m.max_key_norm);
        scaled += m.keys_scaled;
    }
    CHECK(scaled > 0);

    // TensorBoard: kohya's tags.
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(logs))
        if (e.is_regular_file()) files.push_back(e.path());
    REQUIRE(files.size() == 1);
    std::map<std::string, std::vector<float>> by_tag;
    for (const train::TbEvent& e : train::read_tensorboard_events(files[0]).events)
        if (e.value) by_tag[e.tag].push_back(*e.value);
    for (const char* tag :
         {"lr/unet_block1", "lr/unet_block1 plus", "lr/unet_block16", "lr/unet_block17 plus", "lr/textencoder",
          "lr/textencoder plus", "max_norm/keys_scaled", "max_norm/max_key_norm", "norm/avg_key_norm"}) {
        CAPTURE(tag);
        CHECK(by_tag[tag].size() == 4);
    }
    CHECK(by_tag.count("lr/unet") == 0);  // kohya names the groups instead
    CHECK(by_tag["lr/unet_block1 plus"][0] == doctest::Approx(4 * by_tag["lr/unet_block1"][0]));
}

TEST_CASE("sdtrain network knobs: block_dims give each block its rank, a rank of 0 no module") {
    Scratch s("knobs-dims");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    c.max_train_steps = 1;
    std::string dims;
    for (int i = 0; i < 25; i++) dims += std::string(i ? "," : "") + (i == 16 ? "3" : i == 17 ? "0" : "2");
    c.network_args = {"block_dims=" + dims, "frobnicate=1", "frobnicate=2"};
    train::Session(c).run();
    const gl::io::SafetensorsFile f((s.root / "out" / "tiny.safetensors").string());
    // kohya's json.dumps of its args dict: a key given twice once, with its last value.
    CHECK(f.metadata().at("ss_network_args") ==
          "{\"block_dims\": \"" + dims + "\", \"frobnicate\": \"2\", \"dropout\": null}");
    size_t unet = 0;
    for (const std::string& k : module_keys(f)) {
        CAPTURE(k);
        const int64_t r = f.info(k + ".lora_down.weight").shape[0];
        if (k.rfind("lora_unet_", 0) == 0) unet++;
        CHECK(k.find("up_blocks_1_attentions_1") == std::string::npos);
        if (k.find("up_blocks_1_attentions_0") != std::string::npos)
            CHECK(r == 3);
        else if (k.rfind("lora_unet_", 0) == 0)
            CHECK(r == 2);
        else
            CHECK(r == 4);  // the text encoder keeps the network's rank
    }
    CHECK(unet > 0);
}

TEST_CASE("sdtrain network knobs: --base_weights trains as the model gl-merge makes from the files (dense and int8)") {
    Scratch s("knobs-base");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    unet_in_f32(model);
    // Two files to merge: a LoCon and a LoHa, trained briefly at a high lr.
    train::RunConfig a = tiny_config(model, data, s.root / "locon");
    a.network_args = {"conv_dim=2"};
    a.max_train_steps = 2;
    a.learning_rate = 2e-2;
    train::Session(a).run();
    train::RunConfig b = a;
    b.output_dir = (s.root / "loha").string();
    b.network_module = "lycoris.kohya";
    b.network_args = {"algo=loha"};
    train::Session(b).run();
    const fs::path locon = s.root / "locon" / "tiny.safetensors", loha = s.root / "loha" / "tiny.safetensors";

    // The model gl-merge makes: the LoCon at 0.7, then the LoHa at -0.5.
    const fs::path m1 = s.root / "merged1", m2 = s.root / "merged2";
    lora::merge_lora_into_checkpoint(models::sd15_family().open(model.string()), model.string(),
                                     gl::io::SafetensorsFile(locon.string()), m1.string(), {0.7f, false});
    lora::merge_lora_into_checkpoint(models::sd15_family().open(m1.string()), m1.string(), gl::io::SafetensorsFile(loha.string()),
                                     m2.string(), {-0.5f, false});

    for (bool int8 : {false, true}) {
        CAPTURE(int8);
        const std::string tag = int8 ? "int8" : "dense";
        train::RunConfig with = tiny_config(model, data, s.root / ("with_" + tag));
        with.max_train_steps = 2;
        with.cache_latents = false;  // cached latents draw their noise by a key holding the model's path
        with.int8_base = int8;
        with.base_weights = {locon.string(), loha.string()};
        with.base_weights_multiplier = {0.7, -0.5};
        train::RunConfig merged = with;
        merged.output_dir = (s.root / ("merged_" + tag)).string();
        merged.pretrained_model_name_or_path = m2.string();
        merged.base_weights.clear();
        merged.base_weights_multiplier.clear();
        train::RunConfig plain = merged;
        plain.output_dir = (s.root / ("plain_" + tag)).string();
        plain.pretrained_model_name_or_path = model.string();
        train::Session(with).run();
        train::Session(merged).run();
        train::Session(plain).run();
        const auto w = tensors(fs::path(with.output_dir) / "tiny.safetensors");
        CHECK(w == tensors(fs::path(merged.output_dir) / "tiny.safetensors"));
        CHECK(w != tensors(fs::path(plain.output_dir) / "tiny.safetensors"));
    }
}

TEST_CASE("sdtrain network knobs: a torch schedule's absolute lr must hold for every group the lr weights make") {
    Scratch s("knobs-torch-lr");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    c.dry_run = true;
    c.lr_scheduler_type = "CosineAnnealingLR";
    c.lr_scheduler_args = {"T_max=6", "eta_min=1e-5"};
    c.network_train_unet_only = true;
    CHECK(train::Session(c).run().dry_run);  // one group: eta_min holds for it
    c.network_args = {"down_lr_weight=0,0.5"};
    CHECK(gltest::error_of([&] { train::Session(c).run(); }).find("eta_min is an absolute lr for every group") !=
          std::string::npos);
}

TEST_CASE("sdtrain network knobs: a text-encoder cache of another base is not reused under --base_weights") {
    Scratch s("knobs-cache");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig a = tiny_config(model, data, s.root / "lora");
    a.max_train_steps = 2;
    a.learning_rate = 2e-2;
    train::Session(a).run();
    const fs::path file = s.root / "lora" / "tiny.safetensors";

    train::RunConfig c = tiny_config(model, data, s.root / "cached");
    c.max_train_steps = 2;
    c.network_train_unet_only = true;
    c.cache_text_encoder_outputs_to_disk = true;
    train::Session(c).run();  // caches the plain text encoder's outputs in the folder
    c.base_weights = {file.string()};
    train::Session(c).run();
    train::RunConfig fresh = c;
    fresh.output_dir = (s.root / "fresh").string();
    train::Session(fresh).run();
    CHECK(tensors(s.root / "cached" / "tiny.safetensors") == tensors(s.root / "fresh" / "tiny.safetensors"));
}

TEST_CASE("sdtrain network knobs: --base_weights refusals name the file") {
    Scratch s("knobs-refused");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    // A LoRA with a tensor no module of the model uses.
    const fs::path odd = s.root / "odd.safetensors";
    const float v[4] = {1, 2, 3, 4};
    gl::io::write_safetensors(odd.string(), {{"lora_unet_nowhere.lora_down.weight", gl::DType::f32, {2, 2}, v},
                                             {"lora_unet_nowhere.lora_up.weight", gl::DType::f32, {2, 2}, v}});
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    c.base_weights = {odd.string()};
    c.dry_run = true;
    std::string e = gltest::error_of([&] { train::Session(c).run(); });
    CAPTURE(e);
    CHECK(e.find("--base_weights " + odd.string()) != std::string::npos);
    CHECK(e.find("lora_unet_nowhere.lora_down.weight") != std::string::npos);
    c.base_weights = {(s.root / "missing.safetensors").string()};
    e = gltest::error_of([&] { train::Session(c).run(); });
    CHECK(e.find("--base_weights " + (s.root / "missing.safetensors").string()) != std::string::npos);
    // More multipliers than files: the rest are ignored, as kohya.
    c.base_weights.clear();
    c.base_weights_multiplier = {0.5};
    CHECK(train::Session(c).run().dry_run);
    train::RunConfig extra = c;
    extra.validate();
    CHECK(std::any_of(extra.notes.begin(), extra.notes.end(), [](const std::string& n) {
        return n.find("--base_weights_multiplier holds 1 values for 0 --base_weights files") != std::string::npos;
    }));
    // lycoris.kohya's max norm is not kohya's.
    train::RunConfig l = tiny_config(model, data, s.root / "out");
    l.network_module = "lycoris.kohya";
    l.scale_weight_norms = 1.0;
    CHECK(gltest::error_of([&] { l.validate(); }).find("--scale_weight_norms with lycoris.kohya is not supported") !=
          std::string::npos);
}

TEST_CASE(
    "sdtrain network knobs: metrics records keep the groups' lrs and the max-norm figures, the progress shows them") {
    train::StepMetrics m;
    m.step = 3;
    m.loss = 0.5;
    m.group_lr = {{"unet_block1", 1e-4}, {"unet_block1 plus", 4e-4}};
    m.keys_scaled = 7;
    m.average_key_norm = 0.25;
    m.max_key_norm = 0.5;
    m.d = 0.125;  // Prodigy / D-Adaptation's estimate
    const train::MetricsHistory h = train::parse_metrics(train::metrics_json(m) + "\n");
    REQUIRE(h.steps.size() == 1);
    const train::StepMetrics& r = h.steps[0];
    REQUIRE(r.group_lr.size() == 2);
    CHECK(r.group_lr[1].group == "unet_block1 plus");
    CHECK(r.group_lr[1].lr == 4e-4);
    CHECK(r.keys_scaled == 7);
    CHECK(r.average_key_norm == 0.25);
    CHECK(r.max_key_norm == 0.5);
    CHECK(r.d == 0.125);
    CHECK(train::metrics_json(train::StepMetrics{}).find("\"d\"") == std::string::npos);  // only with a d estimate
    train::StepMetrics none;
    none.step = 1;
    const std::string j = train::metrics_json(none);
    CHECK(j.find("keys_scaled") == std::string::npos);
    CHECK(j.find("group_lr") == std::string::npos);
    CHECK(train::parse_metrics(j + "\n").steps[0].keys_scaled == -1);
    CHECK(gl::cli::Progress::terminal_line(m, 200).find("keys scaled 7") != std::string::npos);
    CHECK(gl::cli::Progress::plain_line(m).find("max norm: 7 keys scaled, average key norm 0.25, max 0.5") !=
          std::string::npos);
}
