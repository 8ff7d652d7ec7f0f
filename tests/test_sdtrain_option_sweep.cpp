// Every option of sdtrain's table (train/run/options.def) against bad values on the
// command line and in a config file: wrong types, out of range, empty, 2^31 / 2^63 / 2^64, NaN and
// infinities, numbers a double holds and a float does not, negative numbers, options given twice.
// Each is refused with the option's name, or accepted into a state the run can use.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "sdtrain_cli_fixtures.h"
#include "sdtrain_fixtures.h"
#include "test_util.h"
#include "tools/common/cli.h"
#include "tools/sdtrain/options.h"
#include "train/run/config_view.h"
#include "train/run/data_plan.h"
#include "train/run/option_table.h"

using namespace sdtrain_test;

namespace {

const std::vector<std::string> kRequired = {"--pretrained_model_name_or_path", "m.safetensors", "--train_data_dir",
                                            "data", "--output_dir", "out", "--network_module", "networks.lora",
                                            "--resolution", "512"};

std::vector<std::string> with_required(const std::vector<std::string>& extra) {
    std::vector<std::string> a = kRequired;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

std::string usage_error(const std::vector<std::string>& extra) {
    try {
        sdtrain::parse_command_line(with_required(extra));
    } catch (const gl::cli::UsageError& e) {
        return e.what();
    }
    return "(no error)";
}

// The whole configuration as text (every option's effective value), to compare two runs.
std::string config_text(const train::RunConfig& c) {
    std::string s;
    for (const train::ConfigSection& sec : train::config_sections(c))
        for (const auto& [k, v] : sec.entries) s += k + "=" + v + "\n";
    return s;
}

// base: kRequired, without the folder options when the dataset config is the option swept.
std::optional<std::string> config_of(const std::vector<std::string>& extra) {
    std::vector<std::string> a = with_required(extra);
    if (std::find(extra.begin(), extra.end(), "--dataset_config") != extra.end()) a.erase(a.begin() + 2, a.begin() + 4);
    try {
        return config_text(sdtrain::parse_command_line(a).config);
    } catch (const gl::cli::UsageError&) {
        return std::nullopt;
    }
}

// The options a user sets by value, by kind of value.
std::vector<const train::Option*> options_where(bool (*pick)(const train::Option&)) {
    std::vector<const train::Option*> out;
    for (const train::Option& o : train::option_table())
        if (!o.group.empty() && o.kind != train::OptionKind::flag && pick(o)) out.push_back(&o);
    return out;
}
bool is_number(const train::Option& o) { return o.numeric; }
bool is_real(const train::Option& o) { return o.numeric && o.type == "NUMBER"; }
bool is_integer(const train::Option& o) { return o.numeric && o.type != "NUMBER"; }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// kohya turns the sampling intervals off when <= 0 (a note, as kohya warns), and takes any float for
// the noise variants: negative values are theirs.
const std::set<std::string> kTakesNegative = {"sample_every_n_steps", "sample_every_n_epochs", "adaptive_noise_scale",
                                              "multires_noise_discount", "ip_noise_gamma", "v_pred_like_loss",
                                              "base_weights_multiplier"};
// Any float, as kohya's type=float: a negative multiplier subtracts its LoRA.
const std::set<std::string> kTakesAnyFloat = {"base_weights_multiplier"};

}  // namespace

TEST_CASE("option sweep: no number option takes text, NaN, infinities or what no type holds") {
    const auto numbers = options_where(is_number);
    REQUIRE(numbers.size() > 40);
    for (const train::Option* o : numbers) {
        for (const std::string bad : {"abc", "", "nan", "-nan", "NaN", "inf", "-inf", "infinity", "-Infinity", "1e39",
                                      "-1e39", "1e400", "-1e400", "-18446744073709551617", "0x10", "5x", " 5", "5 ",
                                      "1_000"}) {
            if (kTakesAnyFloat.count(o->name) && bad == "-18446744073709551617") continue;
            CAPTURE(o->name);
            CAPTURE(bad);
            const std::string e = usage_error({"--" + o->name, bad});
            CHECK(has(e, "--" + o->name));
        }
        if (kTakesNegative.count(o->name)) continue;
        for (const std::string negative : {"-1", "-0.5", "-1e-3"}) {
            CAPTURE(o->name);
            CAPTURE(negative);
            CHECK(has(usage_error({"--" + o->name, negative}), "--" + o->name));
        }
    }
}

TEST_CASE("option sweep: real options hold as a float, integer options as their type") {
    for (const train::Option* o : options_where(is_real)) {
        CAPTURE(o->name);
        // A finite double, an infinite float; a nonzero double, a float 0.
        for (const std::string bad : {"3.5e38", "1e-50"}) {
            CAPTURE(bad);
            CHECK(has(usage_error({"--" + o->name, bad}), "--" + o->name));
        }
        const std::string e = usage_error({"--" + o->name, "1e39"});
        CHECK((has(e, "that a 32-bit float holds") || has(e, "in [0, 1], got '1e39'")));
    }
    // 2^31 and 2^63: refused unless the option's type holds them (steps, warm-up, decay and the
    // validation seed in int64, the seed in uint64).
    const std::set<std::string> int64_wide = {"max_train_steps", "lr_warmup_steps", "lr_decay_steps", "seed",
                                              "validation_seed"};
    for (const train::Option* o : options_where(is_integer)) {
        CAPTURE(o->name);
        for (const std::string bad : {"2.5", "1e3", "-9223372036854775809", "18446744073709551616"}) {
            CAPTURE(bad);
            CHECK(has(usage_error({"--" + o->name, bad}), "--" + o->name));
        }
        if (!int64_wide.count(o->name)) CHECK(has(usage_error({"--" + o->name, "2147483648"}), "--" + o->name));
        if (o->name != "seed") CHECK(has(usage_error({"--" + o->name, "9223372036854775808"}), "--" + o->name));
    }
    const train::RunConfig c = sdtrain::parse_command_line(with_required({"--seed", "18446744073709551615",
                                                                          "--max_train_steps", "2147483648"}))
                                   .config;
    CHECK(c.seed == 18446744073709551615ull);
    CHECK(c.max_train_steps == 2147483648);
}

TEST_CASE("option sweep: negative numbers, -inf and -nan are values, refused by range with the name") {
    const std::pair<std::vector<std::string>, const char*> cases[] = {
        {{"--text_encoder_lr", "-inf"}, "--text_encoder_lr wants a finite number >= 0, got '-inf'"},
        {{"--learning_rate", "-nan"}, "--learning_rate wants a finite number >= 0, got '-nan'"},
        {{"--unet_lr", "-1e-4"}, "--unet_lr wants a finite number >= 0, got '-1e-4'"},
        {{"--seed", "-1"}, "--seed wants an integer in [0, 18446744073709551615], got '-1'"},
        {{"--network_dim", "-Infinity"}, "--network_dim wants an integer in [1, 4096], got '-Infinity'"},
        {{"--huber_c", "1e39"}, "--huber_c wants a finite number in [0, 1], got '1e39'"},
        {{"--prior_loss_weight", "1e39"}, "--prior_loss_weight wants a finite number >= 0 that a 32-bit float holds"},
    };
    for (const auto& [extra, want] : cases) {
        CAPTURE(want);
        CHECK(has(usage_error(extra), want));
    }
    // The values kohya turns off with a warning.
    const train::RunConfig c =
        sdtrain::parse_command_line(with_required({"--sample_every_n_steps", "-5", "--sample_prompts", "p.txt"}))
            .config;
    CHECK_FALSE(c.sample_every_n_steps);
}

TEST_CASE("option sweep: the same bad numbers in a config file are refused naming the file and the key") {
    Scratch s("option-sweep");
    const fs::path f = s.root / "bad.toml";
    const std::string head = "pretrained_model_name_or_path = \"m\"\ntrain_data_dir = \"d\"\noutput_dir = \"o\"\n"
                             "network_module = \"networks.lora\"\nresolution = \"512\"\n";
    auto file_error = [&](const std::string& body) {
        write_text(f, head + "[section]\n" + body + "\n");
        try {
            sdtrain::parse_command_line({"--config_file", f.string()});
        } catch (const gl::cli::UsageError& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    for (const train::Option* o : options_where(is_number)) {
        for (const std::string value : {"1e39", "nan", "inf", "-inf", "\"abc\"", "\"\"", "true", "[1, 2]", "-1.5"}) {
            const bool list = o->kind == train::OptionKind::list;
            if (list && (value == "[1, 2]" || value == "-1.5")) continue;  // a list of numbers takes them
            CAPTURE(o->name);
            CAPTURE(value);
            CHECK(has(file_error(o->name + " = " + value), "bad.toml: " + o->name));
        }
    }
    // An integer beyond TOML's 64 bits is a TOML error; the line shown names the key.
    CHECK(has(file_error("seed = 18446744073709551616"), "'seed = 18446744073709551616'"));
    // A NUL in a string would cut a path short.
    CHECK(has(file_error("output_name = \"a\\u0000b\""), "output_name: a value holds a NUL character"));
}

TEST_CASE("option sweep: an option given twice: each value is checked, the last counts (as kohya)") {
    // Values to try for each option; the first two each option takes (alone) are given in turn.
    const std::vector<std::string> candidates = {
        "1", "2", "0", "0.5", "0.25", "150", "225", "a", "b", ".txt", ".caption", "constant", "linear", "l1", "l2",
        "fp16", "bf16", "float", "ddim", "euler", "snr", "exponential", "AdamW", "Lion", "cpu", "auto", "8G", "4G",
        "512", "512,768", "networks.lora", "safetensors", "tensorboard", "all", "StepLR",
        "torch.optim.lr_scheduler.StepLR", "lanczos", "box"};
    // What some options need beside them to be valid at all.
    const std::map<std::string, std::vector<std::string>> needs = {
        {"save_last_n_steps", {"--save_every_n_steps", "1"}},
        {"save_last_n_steps_state", {"--save_every_n_steps", "1"}},
        {"save_last_n_epochs", {"--save_every_n_epochs", "1"}},
        {"save_last_n_epochs_state", {"--save_every_n_epochs", "1"}},
        {"adaptive_noise_scale", {"--noise_offset", "0.1"}},
        {"log_with", {"--logging_dir", "logs"}},
        {"lr_scheduler_type", {"--lr_scheduler_args", "step_size=1"}},
    };
    for (const train::Option& o : train::option_table()) {
        if (o.group.empty() || o.kind != train::OptionKind::value || o.group.rfind("Accepted", 0) == 0) continue;
        CAPTURE(o.name);
        const std::vector<std::string> base = needs.count(o.name) ? needs.at(o.name) : std::vector<std::string>{};
        auto given = [&](std::vector<std::string> v) {
            v.insert(v.end(), base.begin(), base.end());
            return v;
        };
        std::vector<std::string> ok;
        for (const std::string& v : candidates)
            if (config_of(given({"--" + o.name, v}))) ok.push_back(v);
        CHECK_MESSAGE(!ok.empty(), "no candidate value suits --", o.name);
        if (ok.empty()) continue;
        const std::string a = ok.front(), b = ok.back(), flag = "--" + o.name;
        CHECK(config_of(given({flag, a, flag, b})) == config_of(given({flag, b})));
        CHECK(config_of(given({flag, b, flag, a})) == config_of(given({flag, a})));
        // An earlier bad value is refused, not skipped (kohya's argparse converts every one).
        if (o.numeric) CHECK(has(usage_error(given({flag, "-1e39", flag, a})), flag));
    }
    // Switches given twice are given; a list given twice is refused (kohya keeps only the last),
    // except --network_args, whose last list counts as in kohya (with a note).
    CHECK(config_of({"--cache_latents", "--cache_latents"}) == config_of({"--cache_latents"}));
    CHECK(has(usage_error({"--optimizer_args", "weight_decay=0.1", "--optimizer_args", "eps=1e-6"}),
              "--optimizer_args was given twice"));
    const train::RunConfig twice = sdtrain::parse_command_line(
        with_required({"--network_args", "conv_dim=4", "conv_alpha=1", "--network_args", "rank_dropout=0.1"})).config;
    // As kohya's own parser (tests/golden/make_kohya_network_golden.py) given the same.
    std::ifstream golden(gltest::golden_dir("kohya") + "network_blocks.json");
    REQUIRE(golden);
    CHECK(twice.network_args ==
          nlohmann::json::parse(golden).at("repeated_network_args").get<std::vector<std::string>>());
    CHECK(sdtrain_cli_test::has_note(twice, "--network_args was given 2 times: the last list counts"));
    CHECK(config_of({"--network_args", "conv_dim=4", "--network_args"}) == config_of({}));
}

TEST_CASE("option sweep: text options: empty paths, output names, switches with values, kohya's empty defaults") {
    // Paths: an empty one would name the working folder (kohya reads Path('') as '.').
    for (const char* o : {"pretrained_model_name_or_path", "train_data_dir", "reg_data_dir", "dataset_config",
                          "network_weights", "output_dir", "resume", "sample_prompts"}) {
        CAPTURE(o);
        CHECK(has(usage_error({std::string("--") + o, ""}), std::string("--") + o + " wants a path, got ''"));
    }
    // --output_name: one file name that every name made from it still fits in.
    for (const std::string& bad : {std::string(""), std::string("."), std::string(".."), std::string("a/b"),
                                   std::string("/abs"), std::string(129, 'n')}) {
        CAPTURE(bad);
        CHECK(has(usage_error({"--output_name", bad}), "--output_name"));
    }
    CHECK(usage_error({"--output_name", std::string(128, 'n')}) == "(no error)");
    CHECK(usage_error({"--output_name", ".hidden"}) == "(no error)");  // kohya writes .hidden.safetensors too
    // Switches take no value: kohya's store_true refuses '=yes' and '=false' alike.
    for (const char* a : {"--cache_latents=yes", "--cache_latents=true", "--cache_latents=no", "--dry_run=1"})
        CHECK(has(usage_error({a}), "is a switch and takes no value"));
    // kohya's empty --optimizer_type is AdamW; an empty --caption_extension reads the file named as
    // the image without its extension (kohya adds '' to the stem too), noted in the plan.
    const train::RunConfig c = sdtrain::parse_command_line(with_required({"--optimizer_type", "", "--caption_extension",
                                                                          ""}))
                                   .config;
    CHECK(std::string(c.optimizer().name()) == "AdamW");
    CHECK(c.caption_extension.empty());
    CHECK(std::any_of(c.notes.begin(), c.notes.end(), [](const std::string& n) {
        return has(n, "--caption_extension '': a caption is the file named as its image without the extension");
    }));
    // Numbers inside list options hold as floats too.
    CHECK(has(usage_error({"--optimizer_args", "eps=1e39"}), "eps=1e39: does not fit a 32-bit float"));
    CHECK(has(usage_error({"--optimizer_args", "weight_decay=1e-50"}), "does not fit a 32-bit float"));
    CHECK(has(usage_error({"--network_args", "conv_dim=4", "conv_alpha=1e39"}),
              "--network_args conv_alpha 1e+39 must be a finite number >= 0 that a 32-bit float holds"));
}

TEST_CASE("option sweep: RunConfig::validate applies the same ranges to a configuration built in code") {
    const train::RunConfig ok = sdtrain::parse_command_line(kRequired).config;
    const std::pair<void (*)(train::RunConfig&), const char*> cases[] = {
        {[](train::RunConfig& c) { c.learning_rate = 1e39; }, "--learning_rate 1e+39 must be a finite number >= 0"},
        {[](train::RunConfig& c) { c.unet_lr = 1e39; }, "--unet_lr"},
        {[](train::RunConfig& c) { c.text_encoder_lr = -1; }, "--text_encoder_lr"},
        {[](train::RunConfig& c) { c.network_alpha = 1e39; }, "--network_alpha"},
        {[](train::RunConfig& c) { c.max_grad_norm = 1e39; }, "--max_grad_norm"},
        {[](train::RunConfig& c) { c.prior_loss_weight = 1e39; }, "--prior_loss_weight"},
        {[](train::RunConfig& c) { c.min_snr_gamma = 1e39; }, "--min_snr_gamma"},
        {[](train::RunConfig& c) { c.noise_offset = 1e-50; }, "--noise_offset"},
        {[](train::RunConfig& c) { c.huber_c = 1e39; }, "--huber_c"},
        {[](train::RunConfig& c) { c.huber_scale = std::nan(""); }, "--huber_scale"},
        {[](train::RunConfig& c) { c.lr_scheduler_power = 1e39; }, "--lr_scheduler_power"},
        {[](train::RunConfig& c) {
             c.loss_type = "huber";
             c.huber_c = 0;
         },
         "--huber_c must be in (0, 1] with --loss_type huber"},
        {[](train::RunConfig& c) { c.output_name = ".."; }, "--output_name must be a file name"},
        {[](train::RunConfig& c) { c.output_name = std::string("a\0b", 3); }, "--output_name must be a file name"},
        {[](train::RunConfig& c) { c.resize_interpolation = "foo"; }, "--resize_interpolation: resize_interpolation 'foo'"},
        {[](train::RunConfig& c) { c.resize_interpolation = "bicubic"; }, "is not supported by sdtrain"},
    };
    for (const auto& [change, want] : cases) {
        train::RunConfig c = ok;
        change(c);
        CAPTURE(want);
        CHECK(has(gltest::error_of([&] { c.validate(); }), want));
    }
}

TEST_CASE("option sweep: kohya's network knobs with typical values are implemented, not refused") {
    // As the GUI's Standard and LoCon presets and kohya's docs pass them.
    const std::string ones = "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1";
    const train::RunConfig c = sdtrain::parse_command_line(with_required(
        {"--scale_weight_norms", "1", "--base_weights", "a.safetensors", "b.safetensors", "--base_weights_multiplier",
         "0.5", "-1", "--network_args", "conv_dim=4", "conv_alpha=1",
         "block_dims=2,4,4,4,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,8,4,4,2", "block_alphas=" + ones,
         "conv_block_dims=1,2,2,2,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,2,2,1", "conv_block_alphas=" + ones,
         "down_lr_weight=sine",
         "mid_lr_weight=0.5", "up_lr_weight=cosine+0.1", "block_lr_zero_threshold=0.1", "loraplus_lr_ratio=16",
         "loraplus_unet_lr_ratio=8", "loraplus_text_encoder_lr_ratio=4"})).config;
    CHECK(c.scale_weight_norms == 1.0);
    const std::vector<lora::BaseWeightsFile> files = c.base_weight_files();
    REQUIRE(files.size() == 2);
    CHECK(files[1].multiplier == -1.0f);
    const lora::LoraConfig n = c.lora_config();
    CHECK(n.block_dims.size() == 25);
    CHECK(n.conv_block_dims.size() == 25);
    CHECK(n.block_lr_weights.size() == 25);
    CHECK(n.loraplus_unet == 8.0);
    CHECK(n.loraplus_text_encoder == 4.0);
    CHECK(train::find_option("scale_weight_norms")->group.rfind("Network", 0) == 0);  // in --help, not refused
    CHECK(train::find_option("base_weights")->group.rfind("Network", 0) == 0);
    CHECK(train::find_option("base_weights_multiplier")->group.rfind("Network", 0) == 0);
}

TEST_CASE("option sweep: kohya's model and run options with typical values are implemented, not refused") {
    // As kohya users pass them: the fine-tuned MSE VAE, a start at a later epoch or step, prompts
    // in TOML, torch's format, two text-encoder lrs (networks.lora takes the first), a spaced
    // resolution.
    const train::RunConfig c = sdtrain::parse_command_line(with_required(
        {"--vae", "vae-ft-mse-840000-ema-pruned.safetensors", "--initial_epoch", "3", "--initial_step", "100",
         "--skip_until_initial_step", "--sample_prompts", "prompts.toml", "--save_model_as", "ckpt",
         "--text_encoder_lr", "5e-5", "1e-5", "--resolution", "512, 768"})).config;
    CHECK(c.vae == "vae-ft-mse-840000-ema-pruned.safetensors");
    CHECK(c.initial_epoch == 3);
    CHECK(c.initial_step == 100);
    CHECK(c.skip_until_initial_step);
    CHECK(c.sample_prompts == "prompts.toml");
    CHECK(c.save_model_as == "ckpt");
    CHECK(c.text_encoder_lr == 5e-5);
    CHECK(sdtrain_cli_test::has_note(c, "--text_encoder_lr was given 2 values: the first counts"));
    CHECK(c.resolution == std::array<int, 2>{512, 768});
    CHECK(sdtrain::parse_command_line(with_required({"--save_model_as", "pt"})).config.save_model_as == "pt");
    // A bare --text_encoder_lr is kohya's empty list: unset, the text encoder at --learning_rate.
    CHECK_FALSE(sdtrain::parse_command_line(with_required({"--text_encoder_lr"})).config.text_encoder_lr);
    CHECK(has(usage_error({"--resolution", "512, x"}), "--resolution"));
    // kohya asserts a mixed precision for fp8; the refusal says so.
    CHECK(has(usage_error({"--fp8_base"}), "--fp8_base requires --mixed_precision fp16 or bf16 (kohya asserts it"));
    for (const char* o : {"vae", "initial_epoch", "initial_step", "skip_until_initial_step"}) {
        CAPTURE(o);
        CHECK_FALSE(train::find_option(o)->group.empty());  // in --help, not refused
    }
}

TEST_CASE("option sweep: kohya's dataset options with typical values are implemented or refused with the reason") {
    const train::RunConfig c = sdtrain::parse_command_line(
        with_required({"--enable_wildcard", "--token_warmup_min", "3", "--token_warmup_step", "0.25", "--masked_loss",
                       "--conditioning_data_dir", "masks"})).config;
    CHECK(c.enable_wildcard);
    CHECK(c.token_warmup_min == 3);
    CHECK(c.token_warmup_step == 0.25);
    // The dataset settings reach the subsets through the command line's level.
    const data::ConfigLevel l = train::dataset_command_line(c);
    CHECK(std::get<bool>(l.at("enable_wildcard")));
    CHECK(std::get<int64_t>(l.at("token_warmup_min")) == 3);
    CHECK(std::get<double>(l.at("token_warmup_step")) == 0.25);
    CHECK(sdtrain_cli_test::has_note(c, "--conditioning_data_dir: kohya's train_network does not read it"));
    for (const char* o : {"enable_wildcard", "token_warmup_min", "token_warmup_step"})
        CHECK(train::find_option(o)->group.rfind("Data", 0) == 0);  // in --help, not refused
    CHECK(sdtrain::parse_command_line(with_required({"--weighted_captions"})).config.weighted_captions);
    CHECK(train::find_option("weighted_captions")->group.rfind("Data", 0) == 0);
    CHECK(has(usage_error({"--token_warmup_step", "-1"}), "--token_warmup_step"));
    CHECK(has(usage_error({"--token_warmup_min", "-1"}), "--token_warmup_min"));
    // kohya's face crop: two floats, low <= high, through the dataset level to every subset.
    const train::RunConfig f = sdtrain::parse_command_line(with_required({"--face_crop_aug_range", "2.0,4.0"})).config;
    CHECK(f.face_crop_aug_range == std::array<double, 2>{2.0, 4.0});
    CHECK((std::get<std::array<double, 2>>(train::dataset_command_line(f).at("face_crop_aug_range")) ==
           std::array<double, 2>{2.0, 4.0}));
    CHECK(train::find_option("face_crop_aug_range")->group.rfind("Data", 0) == 0);  // in --help, not refused
    CHECK(has(usage_error({"--face_crop_aug_range", "4,2"}), "--face_crop_aug_range wants 'low,high' with low <= high"));
}
