// sdtrain's command line (tools/sdtrain/options.h): kohya's option names onto the run
// configuration, --config_file (sections ignored, command line wins), --output_config, options
// kohya has that sdtrain refuses or only notes, and kohya's rules for contradictions.
#include <doctest/doctest.h>

#include "sdtrain_cli_fixtures.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "sdtrain_fixtures.h"
#include "ggml-lite/io/files.h"
#include "tools/common/cli.h"
#include "tools/sdtrain/options.h"

using namespace sdtrain_test;

using namespace sdtrain_cli_test;

TEST_CASE("sdtrain options: kohya's names land in the run configuration") {
    const train::RunConfig c = parse({"--reg_data_dir", "reg", "--output_name", "sks", "--resolution", "512,768",
                                      "--train_batch_size", "4", "--gradient_accumulation_steps", "2",
                                      "--max_train_epochs", "10", "--learning_rate", "1e-4", "--unet_lr", "2e-4",
                                      "--text_encoder_lr", "5e-5", "--network_dim", "32", "--network_alpha", "16",
                                      "--network_dropout", "0.1", "--network_args", "conv_dim=8", "conv_alpha=4",
                                      "--optimizer_type", "AdamW8bit", "--optimizer_args", "weight_decay=0.1",
                                      "betas=0.9,0.99", "--lr_scheduler", "cosine_with_restarts",
                                      "--lr_scheduler_num_cycles", "3", "--lr_warmup_steps", "0.1",
                                      "--mixed_precision", "bf16", "--full_bf16", "--save_precision", "fp16",
                                      "--gradient_checkpointing", "--cache_latents_to_disk", "--enable_bucket",
                                      "--min_bucket_reso", "320", "--max_bucket_reso", "960", "--bucket_no_upscale",
                                      "--caption_extention", ".txt", "--shuffle_caption", "--keep_tokens", "1",
                                      "--noise_offset", "0.05", "--min_snr_gamma", "5", "--clip_skip", "2",
                                      "--max_token_length", "225", "--seed", "1234", "--save_every_n_steps", "100",
                                      "--save_last_n_steps", "300", "--save_state", "--training_comment", "hello",
                                      "--loss_type", "huber", "--huber_c", "0.2", "--v_parameterization"});
    CHECK(c.pretrained_model_name_or_path == "m.safetensors");
    CHECK(c.reg_data_dir == "reg");
    CHECK(c.output_name == "sks");
    CHECK(c.resolution == std::array<int, 2>{512, 768});
    CHECK(c.train_batch_size == 4);
    CHECK(c.gradient_accumulation_steps == 2);
    CHECK(c.max_train_epochs == 10);
    CHECK(c.learning_rate == 1e-4);
    CHECK(c.unet_learning_rate() == 2e-4);
    CHECK(c.text_encoder_learning_rate() == 5e-5);
    const lora::LoraConfig l = c.lora_config();
    CHECK(l.rank == 32);
    CHECK(l.alpha == 16.0f);
    CHECK(l.dropout == doctest::Approx(0.1));
    CHECK(l.conv_dim == 8);
    CHECK(l.conv_alpha == 4.0f);
    CHECK(std::string(c.optimizer().name()) == "AdamW8bit");
    CHECK(c.optimizer().weight_decay == doctest::Approx(0.1));
    CHECK(c.optimizer().beta2 == doctest::Approx(0.99));
    CHECK(c.lr_warmup_steps.ratio);
    CHECK(train::lr_schedule(c, 1000).warmup_steps == 100);
    CHECK(train::lr_schedule(c, 1000).num_cycles == 3);
    CHECK(c.precision() == train::Precision::bf16);
    CHECK(c.save_dtype() == lora::SavePrecision::fp16);
    CHECK(c.cache_latents);  // --cache_latents_to_disk turns it on, as kohya
    CHECK(has_note(c, "--cache_latents_to_disk turns --cache_latents on"));
    CHECK(c.caption_extension == ".txt");
    CHECK(c.clip_chunks() == 3);
    CHECK(c.seed == 1234u);
    CHECK(c.objective().prediction == diffusion::Prediction::v_prediction);
    CHECK(c.objective().loss == gl::LossKind::huber);
    CHECK(c.objective().noise_offset == doctest::Approx(0.05));
    CHECK(c.save_state);

    // kohya's defaults.
    const train::RunConfig d = parse({});
    CHECK(d.max_train_steps == 1600);
    CHECK(d.learning_rate == 2e-6);
    CHECK(d.lora_config().rank == 4);
    CHECK(d.lora_config().alpha == 1.0f);
    CHECK(d.mixed_precision == "no");
    CHECK(d.precision() == train::Precision::fp32);
    CHECK(d.save_dtype() == lora::SavePrecision::fp32);
    CHECK(d.caption_extension == ".caption");
    CHECK(d.lr_scheduler == "constant");
    CHECK(std::string(d.optimizer().name()) == "AdamW");
    CHECK(d.max_grad_norm == 1.0);
    CHECK(d.sample_sampler == "ddim");
    CHECK(d.train_text_encoder());
    CHECK(d.lora_config().conv_dim == 0);
    // LoCon's conv_alpha defaults to 1 (networks.lora), not to conv_dim.
    CHECK(parse({"--network_args", "conv_dim=16"}).lora_config().conv_alpha == 1.0f);
    // A text encoder lr of 0 leaves it untrained, as kohya skips its parameters.
    CHECK_FALSE(parse({"--text_encoder_lr", "0"}).train_text_encoder());
    // --lr_warmup_steps: steps, ratio or percentage.
    CHECK(train::lr_schedule(parse({"--lr_scheduler", "linear", "--lr_warmup_steps", "40"}), 1000).warmup_steps == 40);
    CHECK(train::lr_schedule(parse({"--lr_scheduler", "linear", "--lr_warmup_steps", "5%"}), 1000).warmup_steps == 50);
    CHECK(usage_error({"--lr_warmup_steps", "1.5"}).find("--lr_warmup_steps wants an integer") != std::string::npos);
}

TEST_CASE("sdtrain options: kohya options refused, accepted with a note, unknown") {
    CHECK(usage_error({"--frobnicate"}).find("--frobnicate") != std::string::npos);
    CHECK(usage_error({"--deepspeed"}).find("--deepspeed: kohya's option is not supported by sdtrain (") !=
          std::string::npos);
    CHECK(parse({"--v2"}).v2);  // kohya's, implemented: the SD2.x family
    CHECK(parse({"--v2"}).family().name() == "sd2");
    CHECK(train::RunConfig{}.family().name() == "sd15");
    CHECK(usage_error({"--wandb_run_name", "r"}).find("--wandb_run_name: kohya's option is not supported") !=
          std::string::npos);
    CHECK(parse({"--multires_noise_iterations", "6"}).objective().multires_noise_iterations == 6);  // kohya's, implemented
    // The values that change nothing are accepted (GUIs write them into config files).
    CHECK(usage_error({"--multires_noise_iterations", "0", "--multires_noise_discount", "0.3", "--wandb_run_name", "",
                       "--lr_scheduler_args"}) == "(no error)");
    const train::RunConfig c = parse({"--xformers", "--sdpa", "--mem_eff_attn", "--lowram"});
    CHECK(has_note(c, "--xformers: not needed"));
    CHECK(has_note(c, "--lowram: not needed"));
    CHECK(usage_error({"--network_args", "block_dims=2,2,2"}).find("--network_args block_dims must have 25 elements "
                                                                   "but 3 elements are given") != std::string::npos);
    CHECK(has_note(parse({"--network_args", "frobnicate=1"}), "--network_args frobnicate=1: networks.lora does not "
                                                              "read this key, so it has no effect"));
    CHECK(usage_error({"--network_args", "nonsense"}).find("'nonsense' is not key=value") != std::string::npos);
    CHECK(usage_error({"--optimizer_type", "FancyOpt"}).find("FancyOpt") != std::string::npos);
    CHECK(usage_error({"--optimizer_args", "bogus=1"}).find("bogus") != std::string::npos);
    CHECK(usage_error({"--train_batch_size", "0"}).find("--train_batch_size wants an integer in [1, 65536]") !=
          std::string::npos);
    // kohya's nargs="*": networks.lora takes the first; each value is still a number.
    CHECK(parse({"--text_encoder_lr", "1e-4", "5e-5"}).text_encoder_lr == 1e-4);
    CHECK(usage_error({"--text_encoder_lr", "1e-4", "x"}).find("--text_encoder_lr") != std::string::npos);
}

TEST_CASE("sdtrain options: --debiased_estimation_loss weights the objective") {
    CHECK_FALSE(parse({}).objective().debiased_estimation);
    const train::RunConfig c = parse({"--debiased_estimation_loss", "--min_snr_gamma", "5"});
    CHECK(c.objective().debiased_estimation);
    CHECK(c.objective().min_snr_gamma == 5.0);
    Scratch s("options-debiased");
    write_text(s.root / "run.toml", "[training_arguments]\ndebiased_estimation_loss = true\n");
    CHECK(parse({"--config_file", (s.root / "run.toml").string()}).objective().debiased_estimation);
}

TEST_CASE("sdtrain options: D-Adaptation and Prodigy warn about a learning rate of 0.1 or less, as kohya") {
    CHECK(has_note(parse({"--optimizer_type", "Prodigy", "--learning_rate", "1e-4"}), "is too low for Prodigy"));
    CHECK(has_note(parse({"--optimizer_type", "DAdaptAdam", "--learning_rate", "0.1"}), "is too low for DAdaptAdam"));
    CHECK_FALSE(has_note(parse({"--optimizer_type", "Prodigy", "--learning_rate", "1"}), "is too low"));
    CHECK_FALSE(has_note(parse({"--optimizer_type", "AdamW", "--learning_rate", "1e-4"}), "is too low"));
    // The first parameter group's: the text encoder's when it is trained.
    CHECK(has_note(parse({"--optimizer_type", "Prodigy", "--learning_rate", "1", "--text_encoder_lr", "0.05"}),
                   "learning rate 0.05 is too low"));
    CHECK_FALSE(has_note(parse({"--optimizer_type", "Prodigy", "--learning_rate", "1", "--text_encoder_lr", "0.05",
                                "--network_train_unet_only"}),
                         "is too low"));
}

TEST_CASE("sdtrain options: kohya's console logging options change nothing here: accepted, each with a note") {
    const train::RunConfig n =
        parse({"--console_log_level", "DEBUG", "--console_log_file", "log.txt", "--console_log_simple"});
    CHECK(has_note(n, "--console_log_level: not needed"));
    CHECK(has_note(n, "--console_log_file: not needed"));
    CHECK(has_note(n, "--console_log_simple: not needed"));
}

TEST_CASE("sdtrain options: contradictions and missing options are errors naming them") {
    const std::pair<std::vector<std::string>, const char*> cases[] = {
        {{"--full_bf16"}, "--full_bf16 needs --mixed_precision bf16"},
        {{"--full_fp16", "--mixed_precision", "bf16"}, "--full_fp16 needs --mixed_precision fp16"},
        {{"--network_train_unet_only", "--network_train_text_encoder_only"}, "contradict each other"},
        {{"--lr_warmup_steps", "100"}, "--lr_scheduler constant does not take --lr_warmup_steps"},
        {{"--use_8bit_adam", "--optimizer_type", "Lion"}, "--optimizer_type and --use_8bit_adam"},
        {{"--save_last_n_steps", "3"}, "--save_last_n_steps needs --save_every_n_steps"},
        {{"--save_last_n_epochs", "3"}, "--save_last_n_epochs needs --save_every_n_epochs"},
        {{"--dataset_config", "d.toml"}, "--dataset_config and --train_data_dir"},
        {{"--loss_type", "smooth_l2"}, "--loss_type must be l1, l2, huber or smooth_l1"},
        {{"--lr_scheduler", "adafactor"}, "--lr_scheduler adafactor needs --optimizer_type Adafactor"},
        {{"--max_token_length", "100"}, "--max_token_length wants an integer in [150, 225]"},
        {{"--max_token_length", "160"}, "--max_token_length must be 150 or 225"},
        {{"--cache_text_encoder_outputs"}, "needs a frozen text encoder: add --network_train_unet_only"},
        {{"--sample_every_n_steps", "100"}, "needs --sample_prompts"},
        {{"--save_model_as", "bin"}, "--save_model_as must be safetensors, ckpt or pt (kohya's choices), got 'bin'"},
        {{"--network_module", "networks.dylora"}, "--network_module networks.dylora is not supported"},
        {{"--mixed_precision", "fp8"}, "--mixed_precision must be no, fp16 or bf16"},
        {{"--random_crop", "--cache_latents"}, "--cache_latents cannot be used with --random_crop"},
        {{"--vram_limit", "lots"}, "lots"},
        {{"--dim_from_weights"}, "--dim_from_weights needs --network_weights"},
        {{"--backend", "gpu"}, "--backend: unknown backend 'gpu'"},
    };
    for (const auto& [extra, want] : cases) {
        CAPTURE(std::string(want));
        CAPTURE(usage_error(extra));
        CHECK(usage_error(extra).find(want) != std::string::npos);
    }
    CHECK(usage_error({"--output_dir", "o", "--network_module", "networks.lora"}, false)
              .find("--pretrained_model_name_or_path is required") != std::string::npos);
    CHECK(usage_error({"--pretrained_model_name_or_path", "m", "--network_module", "networks.lora"}, false)
              .find("--output_dir is required") != std::string::npos);
    CHECK(usage_error({"--pretrained_model_name_or_path", "m", "--output_dir", "o", "--train_data_dir", "d",
                       "--resolution", "512"},
                      false)
              .find("--network_module is required") != std::string::npos);
    CHECK(usage_error({"--pretrained_model_name_or_path", "m", "--output_dir", "o", "--network_module",
                       "networks.lora", "--train_data_dir", "d"},
                      false)
              .find("--resolution is required") != std::string::npos);
    // kohya turns sample intervals <= 0 off with a warning.
    const train::RunConfig c = parse({"--sample_every_n_steps", "0", "--sample_prompts", "p.txt"});
    CHECK_FALSE(c.sample_every_n_steps);
    // validate() is idempotent.
    train::RunConfig twice = parse({"--cache_latents_to_disk"});
    const size_t notes = twice.notes.size();
    twice.validate();
    CHECK(twice.notes.size() == notes);
}

TEST_CASE("sdtrain options: --config_file as kohya reads it, --output_config") {
    Scratch s("options");
    const fs::path f = s.root / "run.toml";
    write_text(f, R"(pretrained_model_name_or_path = "from_file.safetensors"
[model_arguments]
v_parameterization = true
[dataset_arguments]
train_data_dir = "data"
resolution = "640,512"
train_batch_size = 3
caption_extension = ".txt"
[training_arguments]
output_dir = "out"
max_train_steps = 777
learning_rate = 3e-4
mixed_precision = "bf16"
xformers = true
log_with = ""
multires_noise_iterations = 0
[network_arguments]
network_module = "networks.lora"
network_dim = 8
network_args = ["conv_dim=4", "conv_alpha=2"]
[optimizer_arguments]
optimizer_type = "Lion"
optimizer_args = ["weight_decay=0.05"]
)");
    // ".toml" is appended as kohya does; the command line wins over the file.
    const train::RunConfig c =
        sdtrain::parse_command_line({"--config_file", (s.root / "run").string(), "--max_train_steps", "5"}).config;
    CHECK(c.pretrained_model_name_or_path == "from_file.safetensors");
    CHECK(c.v_parameterization);
    CHECK(c.train_data_dir == "data");
    CHECK(c.resolution == std::array<int, 2>{640, 512});
    CHECK(c.train_batch_size == 3);
    CHECK(c.max_train_steps == 5);
    CHECK(c.learning_rate == 3e-4);
    CHECK(c.mixed_precision == "bf16");
    CHECK(c.lora_config().rank == 8);
    CHECK(c.lora_config().conv_dim == 4);
    CHECK(std::string(c.optimizer().name()) == "Lion");
    CHECK(has_note(c, "--xformers"));

    auto file_error = [&](const std::string& text) {
        write_text(s.root / "bad.toml", text);
        try {
            sdtrain::parse_command_line({"--config_file", (s.root / "bad.toml").string()});
        } catch (const gl::cli::UsageError& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    CHECK(file_error("[a]\nfrobnicate = 1\n").find("bad.toml: frobnicate: unknown option") != std::string::npos);
    CHECK(file_error("[a]\n[a.b]\nseed = 1\n").find("bad.toml: [a] b: a table is not an option value (b takes a value; "
                                                    "tables nest one level") != std::string::npos);
    // A value no option takes is named by what it is, beside what the option wants.
    CHECK(file_error("seed = 2024-01-31\n").find("bad.toml: seed: a date (2024-01-31) is not an option value (seed "
                                                 "takes a number)") != std::string::npos);
    CHECK(file_error("[s]\noutput_dir = { a = 1 }\n").find("[s] output_dir: a table is not an option value "
                                                           "(output_dir takes a string") != std::string::npos);
    CHECK(file_error("network_args = [[\"a\"], [\"b\"]]\n").find("network_args: an array of 2 arrays is not an "
                                                                    "option value (network_args takes an array of "
                                                                    "strings)") != std::string::npos);
    CHECK(file_error("cache_latents = 12:30:00\n").find("a time (12:30:00) is not an option value (cache_latents "
                                                        "takes true or false)") != std::string::npos);
    CHECK(file_error("seed = \n").find("invalid TOML") != std::string::npos);
    CHECK(file_error("deepspeed = true\n").find("bad.toml: deepspeed: kohya's option is not supported") != std::string::npos);
    CHECK(file_error("max_train_steps = \"x\"\n").find("bad.toml: max_train_steps wants an integer") !=
          std::string::npos);
    try {
        sdtrain::parse_command_line({"--config_file", (s.root / "missing.toml").string()});
        FAIL("a missing config file was accepted");
    } catch (const gl::cli::UsageError& e) {
        CHECK(std::string(e.what()).find("missing.toml: cannot be read") != std::string::npos);
    }
    // A FIFO or a folder as the config file is refused, not waited on.
    REQUIRE(::mkfifo((s.root / "fifo.toml").c_str(), 0644) == 0);
    fs::create_directory(s.root / "folder.toml");
    for (const fs::path& p : {s.root / "fifo.toml", s.root / "folder.toml"}) {
        try {
            sdtrain::parse_command_line({"--config_file", p.string()});
            FAIL("a config file that is not a regular file was accepted");
        } catch (const gl::cli::UsageError& e) {
            CHECK(std::string(e.what()).find("not a regular file") != std::string::npos);
        }
    }

    // --output_config writes the command line's options; reading it back gives the same run.
    std::vector<std::string> a = kRequired;
    for (const char* x : {"--network_args", "conv_dim=4", "--max_train_steps", "9", "--cache_latents", "--seed", "7",
                          "--learning_rate", "2e-6", "--max_bucket_reso", "1024"})
        a.push_back(x);
    std::vector<std::string> w = a;
    w.insert(w.end(), {"--config_file", (s.root / "written.toml").string(), "--output_config"});
    CHECK(sdtrain::parse_command_line(w).wrote_config == (s.root / "written.toml").string());
    const train::RunConfig back =
        sdtrain::parse_command_line({"--config_file", (s.root / "written.toml").string()}).config;
    const train::RunConfig direct = sdtrain::parse_command_line(a).config;
    CHECK(back.max_train_steps == 9);
    CHECK(back.cache_latents);
    CHECK(back.seed == 7u);
    CHECK(back.network_args == direct.network_args);
    CHECK(back.resolution == direct.resolution);
    CHECK(back.output_dir == direct.output_dir);
    // kohya leaves out what equals its default, however it was spelled.
    const std::string written = gl::io::read_small_file((s.root / "written.toml").string());
    CHECK(written.find("max_train_steps = 9") != std::string::npos);
    CHECK(written.find("learning_rate") == std::string::npos);
    CHECK(written.find("max_bucket_reso") == std::string::npos);
    try {  // kohya refuses to overwrite it
        sdtrain::parse_command_line(w);
        FAIL("--output_config overwrote a file");
    } catch (const gl::cli::UsageError& e) {
        CHECK(std::string(e.what()).find("exists already") != std::string::npos);
    }
}

TEST_CASE("sdtrain options: --help groups the options") {
    try {
        sdtrain::parse_command_line({"--help"});
        FAIL("--help did not stop");
    } catch (const gl::cli::HelpRequested& h) {
        const std::string t = h.what();
        for (const char* g : {"Model:", "Data (", "Network (LoRA / LoCon):", "Training (", "Optimizer and learning rate:",
                              "Memory (", "Output (", "Sampling:"})
            CHECK(t.find(g) != std::string::npos);
        CHECK(t.find("--pretrained_model_name_or_path") < t.find("--train_data_dir"));
        CHECK(t.find("--deepspeed") == std::string::npos);  // refused options stay out of the help
        CHECK(t.find("--v2") != std::string::npos);
        // Each option once, under the group a user looks in.
        std::map<std::string, std::string> group_of;  // option -> the section heading above it
        std::istringstream lines(t);
        std::string line, section;
        while (std::getline(lines, line)) {
            if (!line.empty() && line[0] != ' ' && line.back() == ':') section = line;
            if (line.rfind("  --", 0) != 0) continue;
            const std::string name = line.substr(2, line.find(' ', 2) - 2);
            CHECK_MESSAGE(group_of.count(name) == 0, name);
            group_of[name] = section;
        }
        const std::pair<const char*, const char*> placed[] = {
            {"--train_data_dir", "Data ("},
            {"--dataset_config", "Data ("},
            {"--cache_latents", "Data ("},
            {"--enable_bucket", "Data ("},
            {"--pretrained_model_name_or_path", "Model:"},
            {"--clip_skip", "Model:"},
            {"--network_dim", "Network ("},
            {"--network_args", "Network ("},
            {"--network_weights", "Network ("},
            {"--optimizer_type", "Optimizer and"},
            {"--learning_rate", "Optimizer and"},
            {"--lr_scheduler", "Optimizer and"},
            {"--gradient_checkpointing", "Memory ("},
            {"--vram_limit", "Memory ("},
            {"--output_dir", "Output ("},
            {"--save_every_n_steps", "Output ("},
            {"--save_state", "Output ("},
            {"--resume", "Output ("},
            {"--sample_prompts", "Sampling:"},
            {"--sample_every_n_steps", "Sampling:"},
            {"--sample_sampler", "Sampling:"},
            {"--max_train_steps", "Training ("},
            {"--mixed_precision", "Training ("},
            {"--xformers", "Accepted for kohya"}};
        for (const auto& [option, group] : placed) {
            CAPTURE(option);
            REQUIRE(group_of.count(option));
            CHECK(group_of[option].rfind(group, 0) == 0);
        }
    }
    const std::vector<std::string> names = sdtrain::known_option_names();
    for (const char* k : {"pretrained_model_name_or_path", "network_weights", "save_last_n_epochs", "sample_sampler",
                          "lr_scheduler_power", "huber_schedule", "max_data_loader_n_workers"})
        CHECK(std::find(names.begin(), names.end(), k) != names.end());
}
