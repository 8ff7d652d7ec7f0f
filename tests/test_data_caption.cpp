// Caption rules (data/caption.h) as kohya's process_caption applies them: prefix / suffix, kept
// tokens (count and separator), shuffling, dropout rates over many draws, every-N-epochs, the
// secondary separator, and caption files (first line, BOM, UTF-8, unicode and spaces in names).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

#include "data/caption.h"
#include "test_util.h"

namespace fs = std::filesystem;

TEST_CASE("data caption: prefix, suffix, and no rewriting unless shuffling or dropping tags") {
    data::CaptionOptions o;
    data::Rng rng(1);
    CHECK(data::process_caption(o, "a,b,,  c", 1, rng) == "a,b,,  c");
    o.caption_prefix = "sks";
    o.caption_suffix = "photo";
    CHECK(data::process_caption(o, "dog", 1, rng) == "sks dog photo");
    CHECK(data::process_caption(o, "", 1, rng) == "sks  photo");
    o = {};
    o.secondary_separator = ";;;";
    CHECK(data::process_caption(o, "a;;;b, c", 1, rng) == "a,b, c");
}

TEST_CASE("data caption: shuffle keeps the first keep_tokens and draws every order evenly") {
    data::CaptionOptions o;
    o.shuffle_caption = true;
    o.keep_tokens = 2;
    data::Rng rng(7);
    std::map<std::string, int> seen;
    const int draws = 6000;
    for (int i = 0; i < draws; i++) {
        const std::string c = data::process_caption(o, " 1girl , solo,red, blue ,green ", 1, rng);
        REQUIRE(c.rfind("1girl, solo, ", 0) == 0);
        seen[c]++;
    }
    REQUIRE(seen.size() == 6);  // 3! orders of the flexible tags
    for (const auto& [c, n] : seen) {
        CAPTURE(c);
        CHECK(std::abs(n - draws / 6) < 150);  // 4.5 standard deviations
    }
    // Empty tags survive as kohya keeps them (split without filtering).
    o.keep_tokens = 0;
    CHECK(data::process_caption(o, "a", 1, rng) == "a");
    CHECK(data::process_caption(o, "", 1, rng).empty());
}

TEST_CASE("data caption: keep_tokens_separator fixes a prefix and an optional suffix") {
    data::CaptionOptions o;
    o.shuffle_caption = true;
    o.keep_tokens = 5;  // ignored when the separator is present
    o.keep_tokens_separator = "|||";
    data::Rng rng(3);
    std::set<std::string> middles;
    for (int i = 0; i < 200; i++) {
        const std::string c = data::process_caption(o, "sks, dog ||| x, y, , z ||| best, quality", 1, rng);
        REQUIRE(c.rfind("sks, dog, ", 0) == 0);
        REQUIRE(c.size() > 15);
        REQUIRE(c.substr(c.size() - 15) == ", best, quality");
        middles.insert(c.substr(10, c.size() - 25));
    }
    CHECK(middles.size() == 6);  // empty tags dropped on this path, x y z shuffled
    CHECK(middles.count("x, y, z") == 1);
}

TEST_CASE("data caption: dropout rates hold over many draws, every N epochs drops exactly those") {
    data::CaptionOptions o;
    o.caption_dropout_rate = 0.3;
    data::Rng rng(11);
    const int draws = 20000;
    int dropped = 0;
    for (int i = 0; i < draws; i++) dropped += data::process_caption(o, "a, b", 1, rng).empty();
    CHECK(std::abs(double(dropped) / draws - 0.3) < 0.015);  // sd 0.0032

    o = {};
    o.caption_tag_dropout_rate = 0.25;
    o.keep_tokens = 1;
    long kept = 0;
    for (int i = 0; i < draws; i++) {
        const std::string c = data::process_caption(o, "keep, t1, t2, t3, t4", 1, rng);
        REQUIRE(c.rfind("keep", 0) == 0);  // kept tokens are never dropped
        kept += std::count(c.begin(), c.end(), ',');
    }
    CHECK(std::abs(double(kept) / (4.0 * draws) - 0.75) < 0.01);  // sd 0.0015

    o = {};
    o.caption_dropout_every_n_epochs = 3;
    for (int epoch = 1; epoch <= 9; epoch++)
        CHECK(data::process_caption(o, "a", epoch, rng).empty() == (epoch % 3 == 0));
}

TEST_CASE("data caption: the same seed gives the same draws") {
    data::CaptionOptions o;
    o.shuffle_caption = true;
    o.caption_tag_dropout_rate = 0.2;
    o.caption_dropout_rate = 0.1;
    auto run = [&](uint64_t seed) {
        data::Rng rng = data::Rng::derive(seed, {1, 2});
        std::string all;
        for (int i = 0; i < 50; i++) all += data::process_caption(o, "a, b, c, d, e, f", 1, rng) + "|";
        return all;
    };
    CHECK(run(5) == run(5));
    CHECK(run(5) != run(6));
}

TEST_CASE("data caption: caption files") {
    const fs::path dir = fs::temp_directory_path() / ("gl_caption_" + std::to_string(getpid())) / "10_ünï cödé dir";
    fs::create_directories(dir);
    auto write = [&](const std::string& name, const std::string& text) {
        std::ofstream(dir / name, std::ios::binary) << text;
    };
    write("a b.txt", "\xEF\xBB\xBF  first line, tags \r\nsecond line\n");
    write("empty.txt", "");
    write("bad.txt", "ok \xC3\x28 broken");
    write("猫.txt", "ねこ, cat");
    CHECK(data::read_caption_file(dir / "a b.png", ".txt") == "first line, tags");
    CHECK(data::read_caption_file(dir / "empty.jpg", ".txt") == "");
    CHECK(data::read_caption_file(dir / "猫.webp", ".txt") == "ねこ, cat");
    CHECK_FALSE(data::read_caption_file(dir / "missing.png", ".txt").has_value());
    CHECK_FALSE(data::read_caption_file(dir / "a b.png", ".caption").has_value());
    CHECK(gltest::error_of([&] { data::read_caption_file(dir / "bad.png", ".txt"); }).find("bad.txt: not valid UTF-8") !=
          std::string::npos);
    fs::remove_all(dir.parent_path());

    data::CaptionOptions o;
    o.caption_dropout_rate = 1.5;
    CHECK(gltest::error_of([&] { o.validate(); }).find("caption_dropout_rate must be in [0, 1]") != std::string::npos);
}
