// kohya's network options as lora/network_args.h parses them: lycoris.kohya as LyCORIS's
// create_network reads its kwargs (defaults, Python's `x or default`, str_bool, the deprecated
// Tucker names, LoKr's own args, presets), and what sdtrain refuses by name or notes.
#include <doctest/doctest.h>

#include "lora/network_args.h"
#include "test_util.h"

namespace {

lora::LoraConfig lyco(std::vector<std::pair<std::string, std::string>> args, std::optional<int> dim = 8,
                      double alpha = 4.0, std::optional<double> dropout = std::nullopt) {
    return lora::network_config({"lycoris.kohya", dim, alpha, dropout, std::move(args)});
}

std::string refusal(std::vector<std::pair<std::string, std::string>> args) {
    return gltest::error_of([&] { lyco(std::move(args)); });
}

}  // namespace

TEST_CASE("network args: lycoris.kohya's defaults are LyCORIS's (algo lora, preset full, conv dim and alpha = the network's)") {
    const lora::LoraConfig c = lyco({});
    CHECK(c.lycoris());
    CHECK(std::string(c.module_type().algo()) == "lora");
    CHECK(c.preset == "full");
    CHECK(c.rank == 8);
    CHECK(c.conv_dim == 8);
    CHECK(c.conv_alpha == 4.0f);
    CHECK_FALSE(c.dora);
    CHECK(c.dora_on_output);
    CHECK_FALSE(c.tucker);
    CHECK(lyco({}, std::nullopt).rank == 4);  // --network_dim None: LyCORIS's 4
    // A preset without enable_conv has no k x k modules, whatever conv_dim says.
    CHECK(lyco({{"preset", "attn-mlp"}, {"conv_dim", "4"}}).conv_dim == 0);
    CHECK(lyco({{"conv_dim", "4"}, {"conv_alpha", "1"}}).conv_dim == 4);
    CHECK(lyco({{"conv_dim", ""}}).conv_dim == 8);  // `int(x or network_dim)`
}

TEST_CASE("network args: LyCORIS's booleans are str_bool (any text but 'false'), Tucker's old names turn it on") {
    CHECK(lyco({{"dora_wd", "True"}}).dora);
    CHECK(lyco({{"dora_wd", "0"}}).dora);  // not "false": true, as in LyCORIS
    CHECK_FALSE(lyco({{"dora_wd", "FALSE"}}).dora);
    CHECK_FALSE(lyco({{"wd_on_output", "False"}}).dora_on_output);
    for (const char* k : {"use_tucker", "use_cp", "use_conv_cp", "disable_conv_cp"}) {
        CAPTURE(k);
        CHECK(lyco({{k, "True"}}).tucker);
        CHECK_FALSE(lyco({{k, "false"}}).tucker);
    }
    CHECK(std::string(lyco({{"algo", "LoCon"}}).module_type().algo()) == "lora");
    CHECK(std::string(lyco({{"algo", "loha"}}).module_type().title()) == "LoHa");
    CHECK(std::string(lyco({{"algo", "lokr"}, {"factor", "8"}, {"decompose_both", "False"}}).module_type().title()) ==
          "LoKr");
}

TEST_CASE("network args: what sdtrain does not do is refused by name, what has no effect is noted") {
    CHECK(refusal({{"algo", "boft"}}).find("algo=boft: sdtrain trains LyCORIS's lora, loha, lokr") != std::string::npos);
    CHECK(refusal({{"preset", "ia3"}}).find("preset=ia3") != std::string::npos);
    CHECK(refusal({{"preset", "my_preset.toml"}}).find("preset files and ia3 are not supported") != std::string::npos);
    CHECK(refusal({{"use_scalar", "True"}}).find("use_scalar") != std::string::npos);
    CHECK_NOTHROW(lyco({{"use_scalar", "False"}}));
    CHECK(refusal({{"bypass_mode", "True"}}).find("bypass_mode") != std::string::npos);
    CHECK(refusal({{"rs_lora", "1"}}).find("rs_lora") != std::string::npos);
    CHECK(refusal({{"train_norm", "True"}}).find("train_norm") != std::string::npos);
    CHECK(refusal({{"loraplus_lr_ratio", "4"}}).find("LoRA+ is not supported") != std::string::npos);
    CHECK(refusal({{"conv_dim", "4.5"}}).find("conv_dim=4.5") != std::string::npos);
    CHECK(refusal({{"factor", "x"}}).find("factor=x: LoKr's factor is an integer") != std::string::npos);
    CHECK(refusal({{"rank_dropout", "1.5"}}).find("rank_dropout must be in [0, 1)") != std::string::npos);
    // A key LyCORIS does not read: ignored with a note, as LyCORIS's create_network ignores it.
    const lora::LoraConfig unknown = lyco({{"frobnicate", "1"}});
    REQUIRE(unknown.notes.size() == 1);
    CHECK(unknown.notes[0].find("frobnicate=1: lycoris.kohya does not read this key, so it has no effect") !=
          std::string::npos);
    // LoKr's args are taken (and checked) for any algo, as LyCORIS passes every kwarg to every module.
    CHECK_NOTHROW(lyco({{"algo", "loha"}, {"factor", "8"}}));
    CHECK(refusal({{"algo", "loha"}, {"factor", "eight"}}).find("factor=eight") != std::string::npos);
    const lora::LoraConfig n = lyco({{"block_size", "4"}}, 8, 4.0, 0.1);
    CHECK(n.notes.size() == 2);  // block_size (BOFT's), and network dropout's lack of effect
    CHECK(gltest::error_of([] { lora::network_config({"networks.dylora", 4, 1.0, std::nullopt, {}}); })
              .find("--network_module networks.dylora is not supported") != std::string::npos);
}
