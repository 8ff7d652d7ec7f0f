// The metadata sdtrain writes into a LoRA, key by key against what kohya's own code writes for the
// same runs (tests/golden/make_kohya_metadata.py runs train_network.py's metadata statements over
// the dataset config_util and BucketManager build, get_optimizer and get_sai_model_spec), and the
// Python formatting it rests on: repr of a float, np.mean's pairwise sum, str.lower; and the
// formats in the file of a short CPU run on the demo's model.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "data/png_file.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/kohya.h"
#include "test_util.h"
#include "tools/common/demo_assets.h"
#include "tools/sdtrain/options.h"
#include "train/run/data_plan.h"
#include "train/run/metadata.h"
#include "train/run/session.h"

namespace {

namespace fs = std::filesystem;
using gltest::golden_dir;

nlohmann::json read_json(const std::string& name) {
    std::ifstream f(golden_dir("kohya") + name);
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
}

// The model file of the golden runs (make_kohya_metadata.py's model_bytes()).
void write_model_file(const fs::path& p, size_t n) {
    std::string b(n, '\0');
    for (size_t i = 0; i < n; i++) b[i] = char((i * 131 + (i >> 8) * 7) & 255);
    std::ofstream(p, std::ios::binary) << b;
}

// A case's files under root: the images (their size is all that counts) with their captions, the
// texts, the model.
void write_case_files(const fs::path& root, const nlohmann::json& c) {
    for (const nlohmann::json& im : c.at("files").at("images")) {
        const fs::path p = root / fs::u8path(im[0].get<std::string>());
        fs::create_directories(p.parent_path());
        data::Bitmap img{im[1].get<int>(), im[2].get<int>(), 3, {}};
        img.pixels.assign(size_t(img.width) * size_t(img.height) * 3, 120);
        data::write_png(p.string(), img);
        if (!im[3].is_null()) std::ofstream(fs::path(p).replace_extension(".txt")) << im[3].get<std::string>() << "\n";
    }
    if (c.at("files").contains("texts"))
        for (const auto& [name, text] : c.at("files").at("texts").items())
            std::ofstream(root / name) << replace_all(text.get<std::string>(), "{root}", root.string());
    write_model_file(root / "model.safetensors", c.at("model_bytes").get<size_t>());
}

// Every key of the file sdtrain saves at the end of the case's run, as Runner::save_lora builds it.
std::map<std::string, std::string> sdtrain_metadata(const nlohmann::json& c, const fs::path& root) {
    std::vector<std::string> argv;
    for (const nlohmann::json& a : c.at("argv"))
        argv.push_back(replace_all(a.get<std::string>(), "{root}", root.string()));
    train::RunConfig cfg = sdtrain::parse_command_line(argv).config;
    cfg.validate();
    const train::RunData d = train::load_run_data(cfg, cfg.seed.value_or(0));
    train::RunFacts f;
    f.session_id = 1234567;
    f.started_at = 1700000000.0;
    f.seed = cfg.seed.value();
    f.counts = train::count_steps(cfg, d, d.dataset.config.batch_size, cfg.gradient_accumulation_steps);
    f.model = train::model_file_info(cfg.pretrained_model_name_or_path);
    const auto md = train::save_metadata(train::run_metadata(cfg, d, f), f.counts.max_train_steps, f.counts.epochs);
    return lora::kohya_metadata(lora::LoraNetwork(cfg.lora_config()), train::lora_save_options(cfg, md));
}

// Keys whose values belong to the run or the build, not to its settings: compared by form.
const std::set<std::string> kRunSpecific = {"ss_session_id", "ss_training_started_at", "ss_training_finished_at",
                                            "modelspec.date", "ss_sd_scripts_commit_hash",
                                            "modelspec.implementation_version"};

bool all_hex(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char h) { return (h >= '0' && h <= '9') || (h >= 'a' && h <= 'f'); });
}

std::string utf8(uint32_t cp) {  // below U+0800
    std::string s;
    if (cp < 0x80) s += char(cp);
    else s += char(0xc0 | (cp >> 6)), s += char(0x80 | (cp & 0x3f));
    return s;
}

}  // namespace

TEST_CASE("kohya run metadata: py_float is Python's repr of 3000 doubles (1e-4 and 1e16 neighbours, subnormals, ...)") {
    std::ifstream f(golden_dir("kohya") + "py_float.txt");
    REQUIRE(f.good());
    std::string hex, want;
    size_t n = 0, wrong = 0;
    while (f >> hex >> want) {
        const uint64_t bits = std::stoull(hex, nullptr, 16);
        double x;
        std::memcpy(&x, &bits, 8);
        const std::string got = train::py_float(x);
        if (got != want && wrong++ < 10) CHECK_MESSAGE(got == want, hex);
        n++;
    }
    CHECK(n > 3000);
    CHECK(wrong == 0);
    CHECK(train::py_float(1e-4) == "0.0001");
    CHECK(train::py_float(1e-5) == "1e-05");
    CHECK(train::py_float(1e16) == "1e+16");
    CHECK(train::py_float(123.0) == "123.0");
    CHECK(train::py_float(1.5e-7) == "1.5e-07");
}

TEST_CASE("kohya run metadata: numpy_mean is np.mean's pairwise sum, bit for bit, at every block boundary") {
    for (const auto& [key, want] : read_json("python_text.json").at("numpy_mean").items()) {
        const size_t n = std::stoul(key);
        std::vector<double> a(n);
        for (size_t i = 0; i < n; i++) a[i] = double((i * 7919 + n * 31) % 1000003) / 1000003.0;
        CHECK_MESSAGE(train::py_float(data::numpy_mean(a)) == want.get<std::string>(), "n = ", n);
    }
    CHECK(data::numpy_mean({}) == 0);
}

TEST_CASE("kohya run metadata: py_lower is str.lower on ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic") {
    const nlohmann::json lower = read_json("python_text.json").at("lower");
    size_t checked = 0;
    for (const nlohmann::json& r : lower.at("ranges"))
        for (uint32_t cp = r[0].get<uint32_t>(); cp <= r[1].get<uint32_t>(); cp++) {
            char key[8];
            std::snprintf(key, sizeof key, "%04x", cp);
            std::string want = utf8(cp);
            if (lower.at("changed").contains(key)) {
                want.clear();
                std::istringstream cps(lower.at("changed").at(key).get<std::string>());
                for (std::string h; cps >> h;) {
                    const uint32_t c = uint32_t(std::stoul(h, nullptr, 16));
                    want += utf8(c);
                }
            }
            CHECK_MESSAGE(train::py_lower("x" + utf8(cp) + "Y") == "x" + want + "y", key);
            checked++;
        }
    CHECK(checked == 489);  // U+0000-U+007F, U+00C0-U+017F, U+0386-U+03CE, U+0400-U+045F
}

TEST_CASE("kohya run metadata: every key equals what kohya's code writes for the same run, run-specific keys aside") {
    for (const nlohmann::json& c : read_json("run_metadata.json")) {
        const std::string name = c.at("name").get<std::string>();
        gltest::TempDir dir;
        write_case_files(dir.path, c);
        const std::map<std::string, std::string> ours = sdtrain_metadata(c, dir.path);
        std::map<std::string, std::string> theirs;
        for (const auto& [k, v] : c.at("metadata").items())
            theirs[k] = replace_all(v.get<std::string>(), "{root}", dir.path.string());
        // Without --output_name the title is "LoRA@<the save's time>".
        const bool timed_title = theirs.at("modelspec.title").rfind("LoRA@", 0) == 0;
        if (timed_title) {
            const std::string t = ours.at("modelspec.title");
            REQUIRE(t.rfind("LoRA@", 0) == 0);
            CHECK(train::py_float(std::stod(t.substr(5))) == t.substr(5));
        }
        std::string diff;
        for (const auto& [k, v] : theirs)
            if (!kRunSpecific.count(k) && !(timed_title && k == "modelspec.title") &&
                (!ours.count(k) || ours.at(k) != v))
                diff += gl::cat("\n  ", k, ": kohya ", v, "\n  ", std::string(k.size(), ' '), "  ours  ",
                                ours.count(k) ? ours.at(k) : "(missing)");
        for (const auto& [k, v] : ours)
            if (!theirs.count(k)) diff += gl::cat("\n  ", k, ": only ours: ", v);
        CHECK_MESSAGE(diff.empty(), name, diff);
        // The run-specific keys are there, in kohya's forms.
        for (const std::string& k : kRunSpecific) CHECK_MESSAGE(ours.count(k) == theirs.count(k), name, ": ", k);
        if (theirs.count("ss_session_id")) {
            CHECK(ours.at("ss_session_id") == "1234567");
            CHECK(ours.at("ss_training_started_at") == "1700000000.0");
            const std::string commit = ours.at("ss_sd_scripts_commit_hash");
            CHECK(((commit.size() == 40 && all_hex(commit)) || commit == "(unknown)"));
            CHECK(commit == (train::build_commit().empty() ? "(unknown)" : train::build_commit()));
            const std::string finished = ours.at("ss_training_finished_at");
            CHECK(train::py_float(std::stod(finished)) == finished);
        }
        const std::string date = ours.at("modelspec.date");
        CHECK(date.size() == 19);
        CHECK(date[10] == 'T');
        CHECK(ours.at("modelspec.implementation_version") == train::implementation_version());
    }
}

TEST_CASE("kohya run metadata: the implementation version names the project, its version and the commit") {
    const std::string commit = train::build_commit();
    CHECK(((commit.size() == 40 && all_hex(commit)) || commit.empty()));
    CHECK(train::build_version() == GL_VERSION_FOR_TESTS);
    CHECK(train::implementation_version() ==
          "ggml-lite/" + std::string(GL_VERSION_FOR_TESTS) + (commit.empty() ? "" : "+" + commit));
}

TEST_CASE("kohya run metadata: the plan counts regularisation images once, as kohya (balanced or partly unused)") {
    gltest::TempDir dir;
    auto image = [&](const std::string& rel, int w, int h) {
        fs::create_directories((dir.path / rel).parent_path());
        data::write_png((dir.path / rel).string(), {w, h, 3, std::vector<uint8_t>(size_t(w * h * 3), 9)});
    };
    for (int i = 0; i < 3; i++) image("train/4_a/" + std::to_string(i) + ".png", 64, 64);
    for (int i = 0; i < 2; i++) image("reg/1_r/" + std::to_string(i) + ".png", 64, 64);
    for (int i = 0; i < 20; i++) image("many/1_r/" + std::to_string(i) + ".png", 64, 64);
    train::RunConfig c;
    c.pretrained_model_name_or_path = "m.safetensors";
    c.output_dir = (dir.path / "out").string();
    c.network_module = "networks.lora";
    c.resolution = std::array<int, 2>{64, 64};
    c.train_data_dir = (dir.path / "train").string();
    c.reg_data_dir = (dir.path / "reg").string();
    std::string s = train::dataset_summary(train::load_run_data(c, c.seed.value_or(0)));
    CHECK(s.find("train 4_a: 3 images x 4 repeats = 12\n") != std::string::npos);
    CHECK(s.find("reg   1_r: 2 images x 1 repeats = 2\n") != std::string::npos);
    CHECK(s.find("images with repeats: 12 train + 2 regularisation (repeated to 12 per epoch to match the "
                 "training images)\n") != std::string::npos);
    CHECK(s.find("balanced") == std::string::npos);
    // More regularisation images than training images: kohya's counts, and how many an epoch uses.
    c.reg_data_dir = (dir.path / "many").string();
    const train::RunData d = train::load_run_data(c, c.seed.value_or(0));
    CHECK(d.dataset.unused_reg.size() == 8);
    s = train::dataset_summary(d);
    CHECK(s.find("reg   1_r: 20 images x 1 repeats = 20\n") != std::string::npos);
    CHECK(s.find("images with repeats: 12 train + 20 regularisation (12 of them per epoch to match the "
                 "training images)\n") != std::string::npos);
}

TEST_CASE("kohya run metadata: sdtrain's LoRA of a CPU run on the demo model has kohya's formats") {
    gltest::TempDir dir;
    demo::write_model(dir.path / "model", demo::model_config(), 1);
    demo::write_dataset(dir.path / "data", {.repeats = 2, .variants = 1, .side = 64});
    const fs::path out = dir.path / "out";
    const sdtrain::CommandLine cl = sdtrain::parse_command_line(
        {"--pretrained_model_name_or_path", (dir.path / "model").string(), "--train_data_dir",
         (dir.path / "data").string(), "--output_dir", out.string(), "--output_name", "demo", "--network_module",
         "networks.lora", "--resolution", "96", "--enable_bucket", "--bucket_no_upscale", "--bucket_reso_steps", "32",
         "--min_bucket_reso", "32", "--caption_extension", ".txt", "--max_train_steps", "2", "--learning_rate", "1e-4",
         "--text_encoder_lr", "5e-5", "--network_dim", "4", "--network_alpha", "2", "--noise_offset", "1e-5",
         "--lr_scheduler", "constant_with_warmup", "--lr_warmup_steps", "0.5", "--seed", "5", "--backend", "cpu",
         "--max_data_loader_n_workers", "1", "--cache_latents"});
    train::Session s(cl.config, nullptr);
    REQUIRE(s.run().steps == 2);
    const gl::io::SafetensorsFile f((out / "demo.safetensors").string());
    const std::map<std::string, std::string>& md = f.metadata();

    CHECK(md.at("ss_learning_rate") == "0.0001");
    CHECK(md.at("ss_text_encoder_lr") == "5e-05");
    CHECK(md.at("ss_noise_offset") == "1e-05");
    CHECK(md.at("ss_lr_warmup_steps") == "0.5");
    CHECK(md.at("ss_network_alpha") == "2.0");
    // Every float key reads back as the float whose repr it is (Python's str()).
    for (const char* k : {"ss_learning_rate", "ss_text_encoder_lr", "ss_noise_offset", "ss_network_alpha",
                          "ss_max_grad_norm", "ss_prior_loss_weight", "ss_caption_dropout_rate",
                          "ss_caption_tag_dropout_rate", "ss_huber_c", "ss_huber_scale", "ss_multires_noise_discount",
                          "ss_validation_split", "ss_training_started_at", "ss_training_finished_at"})
        CHECK_MESSAGE(train::py_float(std::stod(md.at(k))) == md.at(k), k, " = ", md.at(k));
    // Buckets numbered 0..n-1 in (w, h) order, their counts the images with repeats; the mean error in repr.
    const std::string info = md.at("ss_bucket_info");
    const nlohmann::json buckets = nlohmann::json::parse(info).at("buckets");
    REQUIRE(buckets.size() == 3);
    std::vector<std::pair<int, int>> resos;
    int64_t count = 0;
    for (size_t i = 0; i < buckets.size(); i++) {
        const nlohmann::json& b = buckets.at(std::to_string(i));
        resos.emplace_back(b.at("resolution")[0].get<int>(), b.at("resolution")[1].get<int>());
        count += b.at("count").get<int64_t>();
    }
    CHECK(std::is_sorted(resos.begin(), resos.end()));
    CHECK(std::to_string(count) == md.at("ss_num_train_images"));
    const std::string mean = info.substr(info.find("\"mean_img_ar_error\": ") + 21);
    CHECK(train::py_float(std::stod(mean)) == mean.substr(0, mean.size() - 1));
    // The build's commit and version; only keys kohya writes.
    const std::string commit = md.at("ss_sd_scripts_commit_hash");
    CHECK(((commit.size() == 40 && all_hex(commit)) || commit == "(unknown)"));
    CHECK(md.at("modelspec.implementation_version").rfind("ggml-lite/" + std::string(GL_VERSION_FOR_TESTS), 0) == 0);
    for (const char* k : {"ss_save_precision", "ss_network_train_unet_only", "ss_network_train_text_encoder_only"})
        CHECK_FALSE_MESSAGE(md.count(k), k);
    for (const auto& [k, v] : md)
        CHECK_MESSAGE((k.rfind("ss_", 0) == 0 || k.rfind("modelspec.", 0) == 0 || k.rfind("sshs_", 0) == 0), k);
}
