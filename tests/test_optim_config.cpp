// The optimizer table: kohya's --optimizer_type names and Python class paths through the registry,
// --optimizer_args parsed against each descriptor's arguments (defaults as the Python classes'), and
// the errors a descriptor's own mistakes give. Trajectories and state files: test_optim.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/optim_types.h"
#include "optim/optimizer.h"
#include "test_util.h"

using gltest::error_of;

TEST_CASE("parse_optimizer: kohya's names and optimizer_args, unknown ones refused by name") {
    CHECK(std::string(optim::parse_optimizer("adamw8BIT", {}).name()) == "AdamW8bit");
    auto lion = optim::parse_optimizer("Lion", {});
    CHECK((lion.beta2 == 0.99f && lion.weight_decay == 0.0f));
    auto af = optim::parse_optimizer("Adafactor", {"relative_step=False", "scale_parameter=false", "beta1=0.9",
                                                    "eps=(1e-30, 2e-3)", "clip_threshold=2", "decay_rate=-0.5"});
    CHECK((!af.flag("relative_step") && !af.flag("scale_parameter") && !af.is_none("beta1")));
    CHECK((af.beta1 == 0.9f && float(af.pair("eps").second) == 2e-3f && af.number("clip_threshold") == 2.0));
    CHECK(optim::parse_optimizer("Adafactor", {}).flag("relative_step"));  // transformers' (and kohya's) default
    auto pd = optim::parse_optimizer("prodigy", {"d_coef=2", "betas=[0.9, 0.99]", "growth_rate=inf", "beta3=None",
                                                 "use_bias_correction=True", "slice_p=1"});
    CHECK((pd.number("d_coef") == 2.0 && pd.beta2 == 0.99f && std::isinf(pd.number("growth_rate"))));
    CHECK((pd.is_none("beta3") && pd.flag("use_bias_correction") && pd.weight_decay == 0.0f));
    CHECK(error_of([] { optim::parse_optimizer("AdamW", {"momentum=0.9"}); }).find("'momentum'") != std::string::npos);
    // dadaptation's experimental classes: DAdaptAdanIP takes DAdaptAdan's arguments; DAdaptAdamPreprint
    // (kohya's DAdaptation) has no momentum argument, though its docstring lists one.
    CHECK(optim::parse_optimizer("DAdaptAdanIP", {"betas=0.9,0.9,0.95"}).triple("betas", 2) == 0.95);
    CHECK(optim::parse_optimizer("DAdaptAdanIP", {}).weight_decay == 0.02f);
    auto pre = optim::parse_optimizer("DAdaptation", {"decouple=True", "betas=(0.9, 0.99)", "fsdp_in_use=False"});
    CHECK((pre.flag("decouple") && pre.beta2 == 0.99f && pre.weight_decay == 0.0f && pre.number("d0") == 1e-6));
    CHECK(std::string(pre.name()) == "DAdaptation");
    CHECK(error_of([] { optim::parse_optimizer("DAdaptAdamPreprint", {"momentum=0.9"}); }).find("'momentum'") !=
          std::string::npos);
    // DAdaptAdan's betas are three numbers, DAdaptSGD's momentum feeds the hyper's first slot.
    auto an = optim::parse_optimizer("DAdaptAdan", {"betas=(0.9, 0.9, 0.95)", "no_prox=True"});
    CHECK((an.beta1 == 0.9f && an.beta2 == 0.9f && an.triple("betas", 2) == 0.95 && an.flag("no_prox")));
    CHECK(optim::parse_optimizer("DAdaptAdan", {}).triple("betas", 2) == 0.99);
    CHECK(optim::parse_optimizer("DAdaptAdan", {}).weight_decay == 0.02f);
    CHECK(error_of([] { optim::parse_optimizer("DAdaptAdan", {"betas=0.9,0.9"}); }).find("three numbers") !=
          std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("DAdaptAdan", {"betas=0.9,0.9,1.0"}); }).find("betas") !=
          std::string::npos);
    CHECK(optim::parse_optimizer("dadaptsgd", {"momentum=0.5"}).beta1 == 0.5f);
    CHECK(optim::parse_optimizer("DAdaptAdaGrad", {}).eps == 1e-6f);
    CHECK(optim::parse_optimizer("radamschedulefree", {}).flag("silent_sgd_phase"));
    CHECK(error_of([] { optim::parse_optimizer("RAdamScheduleFree", {"warmup_steps=10"}); }).find("warmup_steps") !=
          std::string::npos);  // RAdamScheduleFree takes none
    CHECK(error_of([] { optim::parse_optimizer("AdamW", {"betas=0.9"}); }).find("betas") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("AdamW", {"betas=0.9,1.5"}); }).find("betas") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("Lion", {"weight_decay=abc"}); }).find("weight_decay") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("Adafactor", {"relative_step=maybe"}); }).find("relative_step") !=
          std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("AdamW", {"eps=1e-8", "eps=1e-6"}); }).find("twice") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("Adafactor", {"relative_step=False", "warmup_init=True"}); })
              .find("warmup_init") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("Prodigy", {"slice_p=11"}); }).find("slice_p") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("Adafactor", {"betas=0.9,0.99"}); }).find("'betas'") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("AdamW", {"weight_decay"}); }).find("name=value") != std::string::npos);
}

TEST_CASE("optimizer registry: kohya's names in any case and the Python class paths it imports, others refused") {
    std::set<std::string> names;
    for (const optim::OptimizerDef* d : optim::optimizer_defs()) names.insert(d->name);
    CHECK(names == std::set<std::string>{"AdamW", "AdamW8bit", "Lion", "Adafactor", "Prodigy", "DAdaptAdam",
                                         "SGDNesterov", "PagedAdamW8bit", "PagedAdamW", "PagedAdamW32bit",
                                         "AdamWScheduleFree", "SGDScheduleFree", "DAdaptLion", "Lion8bit",
                                         "PagedLion8bit", "DAdaptSGD", "DAdaptAdaGrad", "DAdaptAdan",
                                         "RAdamScheduleFree", "DAdaptAdamPreprint", "DAdaptation",
                                         "DAdaptAdanIP", "SGDNesterov8bit", "AdEMAMix8bit",
                                         "PagedAdEMAMix8bit"});
    const std::pair<const char*, const char*> accepted[] = {
        {"adamw", "AdamW"},
        {" ADAMW8BIT ", "AdamW8bit"},
        {"LION", "Lion"},
        {"adafactor", "Adafactor"},
        {"prodigy", "Prodigy"},
        {"torch.optim.AdamW", "AdamW"},
        {"torch.optim.adamw.AdamW", "AdamW"},
        {"bitsandbytes.optim.AdamW8bit", "AdamW8bit"},
        {"bitsandbytes.optim.adamw.AdamW8bit", "AdamW8bit"},
        {"lion_pytorch.Lion", "Lion"},
        {"lion_pytorch.lion_pytorch.Lion", "Lion"},
        {"transformers.optimization.Adafactor", "Adafactor"},
        {"transformers.Adafactor", "Adafactor"},
        {"prodigyopt.Prodigy", "Prodigy"},
        {"prodigyopt.prodigy.Prodigy", "Prodigy"},
        {"dadaptadam", "DAdaptAdam"},
        {"dadaptation.DAdaptAdam", "DAdaptAdam"},
        {"dadaptation.dadapt_adam.DAdaptAdam", "DAdaptAdam"},
        {"SGDNESTEROV", "SGDNesterov"},
        {"bitsandbytes.optim.PagedAdamW8bit", "PagedAdamW8bit"},
        {"bitsandbytes.optim.PagedAdamW", "PagedAdamW"},
        {"pagedadamw32bit", "PagedAdamW32bit"},
        {"DADAPTATION", "DAdaptation"},
        {"dadaptation.experimental.DAdaptAdamPreprint", "DAdaptAdamPreprint"},
        {"dadaptadamPreprint", "DAdaptAdamPreprint"},
        {"dadaptation.experimental.dadapt_adan_ip.DAdaptAdanIP", "DAdaptAdanIP"},
        {"dadaptadanip", "DAdaptAdanIP"},
    };
    for (auto [type, name] : accepted) CHECK_MESSAGE(std::string(optim::find_optimizer(type).name) == name, type);
    // torch.optim.SGD is plain SGD in kohya (momentum 0, no Nesterov), not SGDNesterov.
    CHECK(error_of([] { optim::find_optimizer("torch.optim.SGD"); }).find("is not supported") != std::string::npos);
    // Unknown names, and torch's own Adafactor (another algorithm than transformers'): the supported listed.
    for (const char* type : {"torch.optim.Adafactor", "Foo", ""}) {
        const std::string e = error_of([&] { optim::parse_optimizer(type, {}); });
        CHECK_MESSAGE(e.find(std::string("'") + type + "' is not supported (") == std::string::npos, e);
        CHECK_MESSAGE(e.find(std::string("'") + type + "' is not supported; supported") != std::string::npos, e);
        CHECK_MESSAGE(e.find("AdamW8bit (bitsandbytes.optim.AdamW8bit)") != std::string::npos, e);
    }
    // kohya reaches AdEMAMix8bit by its class path only; the bare names are accepted too.
    for (auto [type, name] : {std::pair{"bitsandbytes.optim.AdEMAMix8bit", "AdEMAMix8bit"},
                              {"ademamix8bit", "AdEMAMix8bit"},
                              {"bitsandbytes.optim.ademamix.PagedAdEMAMix8bit", "PagedAdEMAMix8bit"}})
        CHECK_MESSAGE(std::string(optim::find_optimizer(type).name) == name, type);
    auto am = optim::parse_optimizer("AdEMAMix8bit", {"t_alpha=100", "betas=0.9,0.99,0.999"});
    CHECK((am.number("t_alpha") == 100 && am.is_none("t_beta3") && am.number("alpha") == 5.0 && am.weight_decay == 1e-2f));
    CHECK(am.triple("betas", 2) == 0.999);
    CHECK(error_of([] { optim::parse_optimizer("AdEMAMix8bit", {"t_beta3=2.5"}); }).find("whole number") !=
          std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("AdEMAMix8bit", {"t_beta3=10", "betas=0,0.999,0.9999"}); })
              .find("logarithms") != std::string::npos);
    CHECK(error_of([] { optim::parse_optimizer("PagedAdEMAMix8bit", {"is_paged=True"}); }).find("is_paged") !=
          std::string::npos);  // PagedAdEMAMix8bit's signature has none
    CHECK(std::string(optim::OptimizerConfig().name()) == "AdamW");  // the default, as kohya's
}

// Defaults come from each descriptor's table (the Python signatures' literals): they must equal the
// compiled-in defaults of the ops and the values the classes use, bit for bit.
TEST_CASE("every optimizer's defaults are its Python class's") {
    for (const char* type : {"AdamW", "AdamW8bit"}) {
        const optim::OptimizerConfig c = optim::parse_optimizer(type, {});
        CHECK((c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f && c.weight_decay == 0.01f));
    }
    // schedulefree 1.4's and dadaptation 3.2's signatures; momentum feeds SGDScheduleFree's beta1 slot.
    const optim::OptimizerConfig sf = optim::parse_optimizer("AdamWScheduleFree", {});
    CHECK((sf.beta1 == 0.9f && sf.beta2 == 0.999f && sf.eps == 1e-8f && sf.weight_decay == 0.0f));
    CHECK((sf.number("warmup_steps") == 0 && sf.number("r") == 0 && sf.number("weight_lr_power") == 2));
    const optim::OptimizerConfig sgd_sf = optim::parse_optimizer("schedulefree.SGDScheduleFree", {});
    CHECK((sgd_sf.beta1 == 0.9f && sgd_sf.weight_decay == 0.0f && sgd_sf.number("weight_lr_power") == 2));
    CHECK(optim::parse_optimizer("SGDScheduleFree", {"momentum=0.8"}).beta1 == 0.8f);
    const optim::OptimizerConfig dlion = optim::parse_optimizer("DAdaptLion", {});
    CHECK((dlion.beta1 == 0.9f && dlion.beta2 == 0.99f && dlion.weight_decay == 0.0f && dlion.number("d0") == 1e-6));
    const optim::OptimizerConfig lion8 = optim::parse_optimizer("bitsandbytes.optim.Lion8bit", {});
    CHECK((lion8.beta1 == 0.9f && lion8.beta2 == 0.99f && lion8.weight_decay == 0.0f));
    // Lion8bit takes no amsgrad or optim_bits (bitsandbytes' AdamW8bit does); a momentum of 1 or 0 has
    // no eval weight for the schedule-free ones.
    for (auto [type, arg] : {std::pair{"Lion8bit", "amsgrad=False"}, {"Lion8bit", "optim_bits=32"},
                             {"SGDScheduleFree", "momentum=1"}, {"AdamWScheduleFree", "betas=0,0.999"},
                             {"AdamWScheduleFree", "warmup_steps=-1"}}) {
        CAPTURE(arg);
        CHECK_THROWS_AS(optim::parse_optimizer(type, {arg}), gl::Error);
    }
    const optim::OptimizerConfig lion = optim::parse_optimizer("Lion", {});
    CHECK((lion.beta1 == 0.9f && lion.beta2 == 0.99f && lion.weight_decay == 0.0f));

    const optim::OptimizerConfig af = optim::parse_optimizer("Adafactor", {});
    const gl::AdafactorOptions ao;
    CHECK((af.eps == 1e-30f && af.beta1 == 0.0f && af.is_none("beta1") && af.weight_decay == 0.0f));
    CHECK(float(af.pair("eps").second) == ao.eps2);
    CHECK(float(af.number("decay_rate")) == ao.decay_rate);
    CHECK(float(af.number("clip_threshold")) == ao.clip_threshold);
    CHECK((af.flag("relative_step") == ao.relative_step && af.flag("scale_parameter") == ao.scale_parameter &&
           af.flag("warmup_init") == ao.warmup_init));

    const optim::OptimizerConfig pd = optim::parse_optimizer("Prodigy", {});
    const gl::ProdigyOptions po;
    CHECK((pd.beta1 == 0.9f && pd.beta2 == 0.999f && pd.eps == 1e-8f && pd.weight_decay == 0.0f));
    CHECK((pd.is_none("beta3") && po.beta3 < 0.0f));
    CHECK((float(pd.number("d0")) == po.d0 && float(pd.number("d_coef")) == po.d_coef));
    CHECK((std::isinf(pd.number("growth_rate")) && std::isinf(po.growth_rate)));
    CHECK((pd.flag("decouple") == po.decouple && pd.flag("use_bias_correction") == po.use_bias_correction &&
           pd.flag("safeguard_warmup") == po.safeguard_warmup));
    CHECK(pd.number("slice_p") == 1.0);
    CHECK(pd.args.empty());  // defaults are not "given" args: state files record only the user's
}

TEST_CASE("OptimizerConfig reads an argument only by its name and type") {
    const optim::OptimizerConfig pd = optim::parse_optimizer("Prodigy", {"d_coef=3"});
    CHECK(pd.number("d_coef") == 3.0);
    CHECK(error_of([&] { pd.number("momentum"); }).find("Prodigy has no argument 'momentum'") != std::string::npos);
    CHECK(error_of([&] { pd.flag("betas"); }).find("'betas' read as another type") != std::string::npos);
    CHECK(error_of([&] { pd.number("beta3"); }).find("'beta3' is None") != std::string::npos);
}

namespace {
// An optimizer whose append breaks the rules: the Optimizer must refuse it, naming the state.
void append_twice(optim::UpdateBuilder& b) {
    for (const optim::UpdateParam& p : b.params) {
        b.state(p, "m", gl::DType::f32, gl::Shape{4});
        b.state(p, "m", gl::DType::f32, gl::Shape{4});
    }
}
void append_short_init(optim::UpdateBuilder& b) {
    b.shared_state("start", gl::DType::f32, gl::Shape{4}, optim::StateInit::exactly({1.0f, 2.0f, 3.0f}));
}
std::string finish_error(const optim::OptimizerDef& def) {
    gl::Graph g;
    const gl::ValueId w = g.param("w", gl::DType::f32, gl::Shape{4});
    optim::Optimizer opt{optim::OptimizerConfig(def)};
    opt.add_group(g, "all", {w}, {g.input("gw", gl::DType::f32, gl::Shape{4})}, 1e-3);
    return error_of([&] { opt.finish(g); });
}
}  // namespace

TEST_CASE("a descriptor's state mistakes are errors naming the state") {
    const optim::OptimizerDef twice{"Twice", {}, {}, nullptr, append_twice};
    CHECK(finish_error(twice).find("two state tensors named 'optim.w.m'") != std::string::npos);
    const optim::OptimizerDef short_init{"ShortInit", {}, {}, nullptr, append_short_init};
    CHECK(finish_error(short_init).find("'optim.start' [4] given 3 initial values") != std::string::npos);
}
