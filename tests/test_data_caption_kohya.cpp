// Wildcards and token warm-up (data/caption.h) against kohya's own process_caption and
// read_caption (tests/golden/make_kohya_caption_golden.py): caption files read whole for
// wildcards, every caption a wildcard draws (the set, kohya's generator being Python's), and the
// tags token warm-up keeps at each step.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "data/caption.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

nlohmann::json golden() {
    std::ifstream f(gltest::golden_dir("kohya") + "captions.json");
    REQUIRE(f);
    return nlohmann::json::parse(f);
}

std::string text_or_empty(const nlohmann::json& j) { return j.is_null() ? std::string() : j.get<std::string>(); }

}  // namespace

TEST_CASE("data caption kohya: caption files as read_caption reads them, every line with enable_wildcard") {
    const fs::path dir = fs::temp_directory_path() / ("gl_caption_kohya_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const nlohmann::json g = golden();
    REQUIRE(g["read"].size() >= 5);
    for (const nlohmann::json& c : g["read"]) {
        const std::string text = c["text"];
        CAPTURE(text);
        std::ofstream(dir / "img.txt", std::ios::binary) << text;
        CHECK(data::read_caption_file(dir / "img.png", ".txt") == c["plain"].get<std::string>());
        CHECK(data::read_caption_file(dir / "img.png", ".txt", true) == c["wildcard"].get<std::string>());
    }
    fs::remove_all(dir);
}

TEST_CASE("data caption kohya: wildcards draw what kohya's draw, escapes and unmatched braces as kohya's regex") {
    const nlohmann::json g = golden();
    REQUIRE(g["wildcard"].size() >= 10);
    for (const nlohmann::json& c : g["wildcard"]) {
        data::CaptionOptions o;
        o.caption_prefix = text_or_empty(c["prefix"]);
        o.caption_suffix = text_or_empty(c["suffix"]);
        const std::string caption = c["caption"];
        CAPTURE(caption);
        data::Rng rng(11);
        CHECK(data::process_caption(o, caption, 1, rng) == c["plain"].get<std::string>());  // off: the first line
        o.enable_wildcard = true;
        std::set<std::string> seen;
        for (int i = 0; i < 400; i++) seen.insert(data::process_caption(o, caption, 1, rng));
        const std::set<std::string> want(c["draws"].begin(), c["draws"].end());
        CHECK(seen == want);
    }
}

TEST_CASE("data caption kohya: token warm-up keeps kohya's count of tags at each step") {
    const nlohmann::json g = golden();
    REQUIRE(g["warmup"].size() >= 50);
    int shortened = 0;
    for (const nlohmann::json& c : g["warmup"]) {
        data::CaptionOptions o;
        o.token_warmup_min = c["min"];
        o.token_warmup_step = c["step"];
        o.keep_tokens = c["keep_tokens"];
        const std::string caption = c["caption"];
        if (caption.find("|||") != std::string::npos) o.keep_tokens_separator = "|||";
        const data::CaptionStep at{c["at"].get<int64_t>(), c["max_train_steps"].get<int64_t>()};
        CAPTURE(caption);
        CAPTURE(at.step);
        CAPTURE(o.token_warmup_step);
        data::Rng rng(3);
        const std::string got = data::process_caption(o, caption, 1, rng, at);
        CHECK(got == c["out"].get<std::string>());
        shortened += got.size() < caption.size() - 4;
    }
    CHECK(shortened > 20);  // the cases cover the warm-up itself, not only its end
    data::CaptionOptions o;
    o.token_warmup_step = 0.25;
    CHECK(o.token_warmup_steps(40) == 10);
    CHECK(o.token_warmup_steps(3) == 0);
    CHECK(o.varies());
    o.token_warmup_min = -1;
    CHECK(gltest::error_of([&] { o.validate(); }).find("token_warmup_min must be >= 0") != std::string::npos);
}

TEST_CASE("data caption kohya: wildcards and warm-up draw from the generator in kohya's order, with shuffling") {
    data::CaptionOptions o;
    o.enable_wildcard = true;
    o.shuffle_caption = true;
    o.keep_tokens = 1;
    o.token_warmup_step = 4;
    data::Rng rng(5);
    std::set<std::string> at0, at4;
    for (int i = 0; i < 300; i++) {
        at0.insert(data::process_caption(o, "{cat|dog}, x, y, z", 1, rng, {0, 100}));
        at4.insert(data::process_caption(o, "{cat|dog}, x, y, z", 1, rng, {4, 100}));
    }
    // Step 0: the kept tag and one more (token_warmup_min 1), the wildcard drawn first.
    CHECK(at0 == std::set<std::string>{"cat, x", "dog, x"});
    CHECK(at4.size() == 12);  // 2 wildcard draws x 3! orders
}
