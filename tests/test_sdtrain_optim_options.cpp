// sdtrain's optimizer and schedule options added for kohya's newer ones: the names accepted or
// refused with a reason, the notes for what changes nothing here, ss_optimizer as kohya writes it,
// and the schedules --lr_scheduler / --lr_scheduler_type build for a run.
#include <doctest/doctest.h>

#include "sdtrain_cli_fixtures.h"

#include <algorithm>

#include "sdtrain_fixtures.h"
#include "tools/common/cli.h"
#include "tools/sdtrain/options.h"
#include "train/run/metadata.h"
#include "train/run/session.h"

using namespace sdtrain_cli_test;

TEST_CASE("sdtrain optimizers: SGDNesterov, DAdaptAdam and the paged forms, ss_optimizer as kohya writes it") {
    // kohya adds momentum=0.9 for SGDNesterov and prints it with the class it builds.
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "SGDNesterov"})) == "torch.optim.sgd.SGD(momentum=0.9)");
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "sgdnesterov", "--optimizer_args", "weight_decay=0.01"})) ==
          "torch.optim.sgd.SGD(weight_decay=0.01,momentum=0.9)");
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "SGDNesterov", "--optimizer_args", "momentum=0.5"})) ==
          "torch.optim.sgd.SGD(momentum=0.5)");
    CHECK(usage_error({"--optimizer_type", "SGDNesterov", "--optimizer_args", "dampening=0.1"}).find("zero dampening") !=
          std::string::npos);
    CHECK(usage_error({"--optimizer_type", "SGDNesterov", "--optimizer_args", "nesterov=True"})
              .find("unknown argument 'nesterov'") != std::string::npos);  // kohya passes it: Python refuses it twice
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "DAdaptAdam", "--learning_rate", "1", "--optimizer_args",
                                             "decouple=True", "weight_decay=0.01"})) ==
          "dadaptation.dadapt_adam.DAdaptAdam(decouple=True,weight_decay=0.01)");

    // The paged forms run unpaged, with a note; kohya's metadata names the paged class.
    for (const char* type : {"PagedAdamW8bit", "PagedAdamW", "PagedAdamW32bit"}) {
        CAPTURE(type);
        const train::RunConfig c = parse({"--optimizer_type", type});
        CHECK(has_note(c, std::string("--optimizer_type ") + type + ": runs as"));
        CHECK(train::kohya_optimizer_text(c) == std::string("bitsandbytes.optim.adamw.") + type);
    }

    // kohya's other 8-bit and experimental optimizer types.
    // SGDNesterov8bit is bitsandbytes' SGD8bit with kohya's momentum=0.9, shown as kohya prints it.
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "SGDNesterov8bit"})) ==
          "bitsandbytes.optim.sgd.SGD8bit(momentum=0.9)");
    CHECK(has_note(parse({"--optimizer_type", "sgdnesterov8bit"}), "ignores nesterov=True"));
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "bitsandbytes.optim.AdEMAMix8bit", "--optimizer_args",
                                             "t_alpha=1000"})) == "bitsandbytes.optim.ademamix.AdEMAMix8bit(t_alpha=1000)");
    CHECK(has_note(parse({"--optimizer_type", "PagedAdEMAMix8bit"}), "runs as AdEMAMix8bit"));
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "DAdaptSGD", "--learning_rate", "1"})) ==
          "dadaptation.dadapt_sgd.DAdaptSGD");
    // kohya's DAdaptation is dadaptation's experimental DAdaptAdamPreprint, in ss_optimizer too.
    const train::RunConfig dadaptation = parse({"--optimizer_type", "DAdaptation", "--learning_rate", "1"});
    CHECK(has_note(dadaptation, "runs dadaptation.experimental.DAdaptAdamPreprint"));
    CHECK(train::kohya_optimizer_text(dadaptation) == "dadaptation.experimental.dadapt_adam_preprint.DAdaptAdamPreprint");
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "DAdaptAdanIP", "--learning_rate", "1",
                                             "--optimizer_args", "no_prox=True"})) ==
          "dadaptation.experimental.dadapt_adan_ip.DAdaptAdanIP(no_prox=True)");
}

TEST_CASE("sdtrain optimizers: the schedule-free ones, DAdaptLion, Lion8bit and PagedLion8bit, ss_optimizer as kohya writes it") {
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "AdamWScheduleFree", "--optimizer_args",
                                             "warmup_steps=100", "betas=0.95,0.99"})) ==
          "schedulefree.adamw_schedulefree.AdamWScheduleFree(warmup_steps=100,betas=(0.95, 0.99))");
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "sgdschedulefree"})) ==
          "schedulefree.sgd_schedulefree.SGDScheduleFree");
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "DAdaptLion", "--learning_rate", "1"})) ==
          "dadaptation.dadapt_lion.DAdaptLion");
    CHECK(train::kohya_optimizer_text(parse({"--optimizer_type", "Lion8bit", "--optimizer_args", "weight_decay=0.1"})) ==
          "bitsandbytes.optim.lion.Lion8bit(weight_decay=0.1)");
    const train::RunConfig paged = parse({"--optimizer_type", "PagedLion8bit"});
    CHECK(has_note(paged, "--optimizer_type PagedLion8bit: runs as Lion8bit"));
    CHECK(train::kohya_optimizer_text(paged) == "bitsandbytes.optim.lion.PagedLion8bit");
    // kohya gives a schedule-free optimizer its dummy scheduler: a constant lr whatever the schedule says.
    const train::RunConfig sf = parse({"--optimizer_type", "AdamWScheduleFree", "--lr_scheduler", "cosine",
                                       "--lr_warmup_steps", "10"});
    CHECK(has_note(sf, "a schedule-free optimizer runs at a constant lr"));
    const optim::LrSchedule s = train::lr_schedule(sf, 100);
    for (int64_t k : {0, 5, 50, 99}) CHECK(s.multiplier(k) == 1.0);
    CHECK(train::lr_schedule(parse({"--lr_scheduler", "cosine"}), 100).multiplier(50) < 1.0);
    CHECK(has_note(parse({"--optimizer_type", "DAdaptLion"}), "too low for DAdaptLion"));
}

TEST_CASE("sdtrain optimizers: --optimizer_args keywords that change nothing are accepted with a note") {
    const train::RunConfig a = parse({"--optimizer_args", "foreach=True", "fused=None", "amsgrad=False"});
    CHECK(has_note(a, "optimizer_args foreach=True: chooses torch's kernel"));
    CHECK(has_note(a, "optimizer_args amsgrad=False"));
    CHECK(usage_error({"--optimizer_args", "amsgrad=True"}).find("only False is supported") != std::string::npos);
    CHECK(usage_error({"--optimizer_args", "maximize=True"}).find("only False") != std::string::npos);
    const train::RunConfig b = parse({"--optimizer_type", "AdamW8bit", "--optimizer_args", "percentile_clipping=100",
                                      "block_wise=True", "is_paged=True"});
    CHECK(has_note(b, "percentile_clipping=100"));
    CHECK(has_note(b, "is_paged=True: bitsandbytes' paging"));
    CHECK(usage_error({"--optimizer_type", "AdamW8bit", "--optimizer_args", "percentile_clipping=95"})
              .find("only 100") != std::string::npos);
    CHECK(usage_error({"--optimizer_type", "AdamW8bit", "--optimizer_args", "min_8bit_size=16384"}).find("only 4096") !=
          std::string::npos);
    // Given inert arguments do not change kohya's metadata: it prints every argument given.
    CHECK(train::kohya_optimizer_text(a) == "torch.optim.adamw.AdamW(foreach=True,fused=None,amsgrad=False)");
}

TEST_CASE("sdtrain schedules: kohya's options build the schedule of the run, errors name the option") {
    auto schedule = [](std::vector<std::string> extra) { return train::lr_schedule(parse(std::move(extra)), 1000); };
    const optim::LrSchedule wsd = schedule({"--lr_scheduler", "warmup_stable_decay", "--lr_warmup_steps", "100",
                                            "--lr_decay_steps", "0.2", "--lr_scheduler_min_lr_ratio", "0.1"});
    CHECK(wsd.kind == optim::LrKind::WarmupStableDecay);
    CHECK(wsd.decay_steps == 200);   // a ratio of the total, truncated
    CHECK(wsd.stable_steps == 700);  // total - warmup - decay, as kohya passes it
    CHECK(wsd.multiplier(0) == doctest::Approx(0.1));
    CHECK(wsd.multiplier(500) == 1.0);
    CHECK(wsd.multiplier(999) == doctest::Approx(0.1).epsilon(1e-3));
    CHECK(schedule({"--lr_scheduler", "inverse_sqrt", "--lr_warmup_steps", "10", "--lr_scheduler_timescale", "40"})
              .timescale == 40);
    CHECK(schedule({"--lr_scheduler", "inverse_sqrt", "--lr_warmup_steps", "10"}).timescale == 10);
    const optim::LrSchedule step = schedule({"--lr_scheduler_type", "StepLR", "--lr_scheduler_args", "step_size=100",
                                             "gamma=0.5"});
    CHECK(step.multiplier(250) == 0.25);
    CHECK(schedule({"--lr_scheduler", "piecewise_constant", "--lr_scheduler_args", "step_rules='1:10,0.1'"})
              .multiplier(20) == doctest::Approx(0.1));

    // Errors at parse time name the option.
    CHECK(usage_error({"--lr_scheduler", "cosine_with_min_lr"}).find("--lr_scheduler_min_lr_ratio") != std::string::npos);
    CHECK(usage_error({"--lr_scheduler_type", "StepLR", "--lr_scheduler_args", "step_size=10", "--lr_warmup_steps", "5"})
              .find("does not take --lr_warmup_steps") != std::string::npos);
    CHECK(usage_error({"--lr_scheduler_type", "CosineAnnealingLR", "--lr_scheduler_args", "T_max=10", "eta_min=1e-6",
                       "--unet_lr", "1e-4", "--text_encoder_lr", "5e-5"})
              .find("eta_min is an absolute lr") != std::string::npos);
    CHECK(usage_error({"--lr_scheduler_type", "CosineAnnealingLR", "--lr_scheduler_args", "T_max=10", "eta_min=1e-6",
                       "--unet_lr", "1e-4", "--text_encoder_lr", "5e-5", "--network_train_unet_only"}) == "(no error)");
    CHECK(usage_error({"--lr_decay_steps", "-3"}).find("--lr_decay_steps") != std::string::npos);
    CHECK(usage_error({"--lr_scheduler_timescale", "0"}).find("--lr_scheduler_timescale") != std::string::npos);
    const train::RunConfig p = parse({"--lr_scheduler", "piecewise_constant", "--lr_scheduler_args",
                                      "step_rules='1:10,0.1'", "--lr_warmup_steps", "5"});
    CHECK(has_note(p, "piecewise_constant; ignored"));
}

TEST_CASE("sdtrain --dry_run: the memory plan counts each optimizer's state (SGDNesterov < AdamW < DAdaptAdam)") {
    using namespace sdtrain_test;
    Scratch s("optim-plan");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    auto state_line = [&](const std::string& type) {
        train::RunConfig c = tiny_config(model, data, s.root / "out");
        c.optimizer_type = type;
        c.dry_run = true;
        const std::string t = train::Session(c).prepare().memory.by_category;
        const size_t at = t.find("optimizer state");
        REQUIRE(at != std::string::npos);
        const std::string line = t.substr(at, t.find('\n', at) - at);
        CHECK(line.find(type) != std::string::npos);
        // "optimizer state   <number> <unit>" (gl::format_bytes): bytes.
        size_t used = 0;
        const std::string rest = line.substr(line.find_first_of("0123456789"));
        const double x = std::stod(rest, &used);
        const char unit = rest.at(used + 1);
        return x * (unit == 'G' ? 1 << 30 : unit == 'M' ? 1 << 20 : unit == 'K' ? 1 << 10 : 1);
    };
    const double sgd = state_line("SGDNesterov"), adamw = state_line("AdamW"), dadapt = state_line("DAdaptAdam");
    // SGDScheduleFree holds z (one param-sized tensor, as SGDNesterov), AdamWScheduleFree and
    // DAdaptLion two (z, exp_avg_sq; exp_avg, s: as AdamW); Lion8bit a byte per element (the tiny
    // model's LoRA tensors are under 4096 elements, so it keeps Lion's f32 exp_avg: as SGDNesterov).
    CHECK(state_line("SGDScheduleFree") == doctest::Approx(sgd).epsilon(0.05));
    CHECK(state_line("AdamWScheduleFree") == doctest::Approx(adamw).epsilon(0.05));
    CHECK(state_line("DAdaptLion") == doctest::Approx(adamw).epsilon(0.05));
    CHECK(state_line("Lion8bit") == doctest::Approx(sgd).epsilon(0.05));
    // One param-sized state tensor set more each: momentum_buffer; exp_avg, exp_avg_sq; exp_avg,
    // exp_avg_sq, s (+ the d state). The category holds the run's other state leaves too, and the
    // arena aligns each tensor, so the steps agree to a few percent.
    CHECK(adamw > sgd);
    CHECK(dadapt - adamw == doctest::Approx(adamw - sgd).epsilon(0.05));
}
