// kohya's sample-prompt file format: every option, defaults, comments, CRLF, and malformed lines
// refused with the file and line named.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "ggml-lite/core/error.h"
#include "models/diffusion/sampler_prompts.h"
#include "test_util.h"

using gltest::error_of;
using diffusion::SamplePrompt;

namespace {
SamplePrompt parse(const std::string& line) {
    auto p = diffusion::parse_prompt_line(line, diffusion::kohya_prompt_defaults(), "prompts.txt", 3);
    REQUIRE(p.has_value());
    return *p;
}
std::string error_line(const std::string& line) {
    return error_of([&] { diffusion::parse_prompt_line(line, diffusion::kohya_prompt_defaults(), "prompts.txt", 3); });
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("prompt file: every option of a line") {
    const SamplePrompt p =
        parse("  masterpiece, a cat --n lowres, bad hands --w 640 --h 768 --d 42 --l 6.5 --s 28 --ss euler_a  ");
    CHECK(p.prompt == "masterpiece, a cat");
    CHECK(p.negative == "lowres, bad hands");
    CHECK(p.width == 640);
    CHECK(p.height == 768);
    CHECK(p.seed == 42u);
    CHECK(p.cfg_scale == 6.5);
    CHECK(p.steps == 28);
    CHECK(p.sampler == "euler_a");
    CHECK(p.line == 3);
    // Every name of kohya's get_my_scheduler, with our Karras suffix where the class takes it.
    for (const char* ss : {"pndm", "k_lms", "lms_karras", "dpm_2_a", "k_dpm_2_a_karras", "dpmsolver", "dpmsingle", "ddpm"})
        CHECK(parse(std::string("a cat --ss ") + ss).sampler == ss);

    // kohya's defaults where a line says nothing; flags in any case; the last of a repeated flag wins.
    const SamplePrompt d = parse("a dog");
    CHECK(d.prompt == "a dog");
    CHECK(d.negative.empty());
    CHECK((d.width == 512 && d.height == 512 && d.steps == 30 && d.cfg_scale == 7.5));
    CHECK(!d.seed.has_value());
    CHECK(d.sampler.empty());
    const SamplePrompt u = parse("a dog --W 576 --S 12 --w 448 --L 7 --D 18446744073709551615");
    CHECK(u.width == 448);
    CHECK(u.steps == 12);
    CHECK(u.cfg_scale == 7.0);
    CHECK(u.seed == 18446744073709551615ull);
    // A dash inside the prompt is text.
    CHECK(parse("well-lit room, a--b").prompt == "well-lit room, a--b");
    CHECK(parse("x --l .5").cfg_scale == 0.5);

    // The caller's defaults (a tool's command line) fill the gaps.
    SamplePrompt defaults = diffusion::kohya_prompt_defaults();
    defaults.steps = 20;
    defaults.negative = "blurry";
    defaults.sampler = "ddim";
    auto q = diffusion::parse_prompt_line("a fox --s 9", defaults);
    REQUIRE(q.has_value());
    CHECK(q->steps == 9);
    CHECK(q->negative == "blurry");
    CHECK(q->sampler == "ddim");
}

TEST_CASE("prompt file: comments, blank lines, CRLF and a byte-order mark") {
    const std::string text =
        "\xEF\xBB\xBF# samples for the run\r\n\r\na red car --d 1\r\n   # indented comment\n\t\nblue sky --n cloud --s 5\n";
    const auto ps = diffusion::parse_prompt_text(text, diffusion::kohya_prompt_defaults(), "p.txt");
    REQUIRE(ps.size() == 2);
    CHECK(ps[0].prompt == "a red car");
    CHECK(ps[0].line == 3);
    CHECK(ps[0].seed == 1u);
    CHECK(ps[1].prompt == "blue sky");
    CHECK(ps[1].negative == "cloud");
    CHECK(ps[1].line == 6);
    CHECK(!diffusion::parse_prompt_line("# only a comment", diffusion::kohya_prompt_defaults()).has_value());
    CHECK(!diffusion::parse_prompt_line("   ", diffusion::kohya_prompt_defaults()).has_value());
}

TEST_CASE("prompt file: malformed lines name the file, the line and the option") {
    CHECK(has(error_line("a --w abc"), "prompts.txt:3: --w 'abc' is not a whole number of pixels"));
    CHECK(has(error_line("a --h -64"), "prompts.txt:3: --h '-64' is not a whole number"));
    CHECK(has(error_line("a --w 500"), "prompts.txt:3: width 500 must be a multiple of 8"));
    CHECK(has(error_line("a --h 0"), "height 0 must be a multiple of 8 in [8, 2048]"));
    CHECK(has(error_line("a --d 1.5"), "prompts.txt:3: --d '1.5' is not a seed"));
    CHECK(has(error_line("a --l 7.5.1"), "--l '7.5.1' is not a CFG scale"));
    CHECK(has(error_line("a --l nan"), "--l 'nan' is not a CFG scale"));
    CHECK(has(error_line("a --s ten"), "--s 'ten' is not a whole number of steps"));
    CHECK(has(error_line("a --n"), "prompts.txt:3: --n has no value"));
    CHECK(has(error_line("a --ss pndm_karras"), "prompts.txt:3: sampler 'pndm_karras': pndm has no Karras variant"));
    CHECK(has(error_line("a --ss fancy"), "prompts.txt:3: unknown sampler 'fancy'"));
    CHECK(has(error_line("a --x 1"), "prompts.txt:3: unknown option --x (known: --n --w --h --d --l --s --ss)"));
    CHECK(has(error_line("a --w512"), "unknown option --w512"));
    CHECK(has(error_line("a --g 3.5"), "--g is one of kohya's options for other model families"));
    CHECK(has(error_line("a --cn img.png"), "--cn is one of kohya's options"));
    CHECK(has(error_line("a -- --w 64"), "an empty option"));
    // A text with a bad third line: the error names line 3 of that file.
    CHECK(has(error_of([] { diffusion::parse_prompt_text("a\n\nb --s x\n", diffusion::kohya_prompt_defaults(), "f.txt"); }),
              "f.txt:3: --s 'x'"));
}

TEST_CASE("prompt file: reading files") {
    const std::string path = "/tmp/gl-test-prompts-" + std::to_string(::getpid()) + ".txt";
    {
        std::ofstream(path) << "# nothing but comments\n\n";
    }
    CHECK(has(error_of([&] { diffusion::read_prompt_file(path, diffusion::kohya_prompt_defaults()); }), "holds no prompt"));
    {
        std::ofstream(path) << "one --d 7\ntwo\n";
    }
    const auto ps = diffusion::read_prompt_file(path, diffusion::kohya_prompt_defaults());
    REQUIRE(ps.size() == 2);
    CHECK(ps[1].prompt == "two");
    std::remove(path.c_str());
    CHECK(has(error_of([&] { diffusion::read_prompt_file(path, diffusion::kohya_prompt_defaults()); }), "cannot open"));
    CHECK(has(error_of([] { diffusion::read_prompt_file("/tmp/p.toml", diffusion::kohya_prompt_defaults()); }),
              "kohya's .toml prompt files are not read here"));
}

TEST_CASE("prompt file: values out of kSampleBounds are refused naming the file, the line and the value") {
    const diffusion::SampleBounds& b = diffusion::kSampleBounds;
    const std::pair<std::string, std::string> cases[] = {
        // kohya clamps the steps to [1, 1000]; the command line's --steps has that range, so the file too.
        {"a --s 0", "prompts.txt:3: steps 0 must be in [1, 1000]"},
        {"a --s 1001", "prompts.txt:3: steps 1001 must be in [1, 1000]"},
        {"a --s 100000", "prompts.txt:3: steps 100000 must be in [1, 1000]"},
        {"a --s 2147483648", "prompts.txt:3: --s 2147483648 is out of range: steps must be in [1, 1000]"},
        {"a --s 99999999999999999999999", "--s 99999999999999999999999 is out of range"},
        {"a --w 8192 --h 8192", gl::cat("prompts.txt:3: width 8192 must be a multiple of 8 in [8, ", b.side_max, "]")},
        {"a --h 2056", gl::cat("height 2056 must be a multiple of 8 in [8, ", b.side_max, "]")},
        {"a --w 2147483648", "--w 2147483648 is out of range: a side is a multiple of 8 in [8, 2048]"},
        {"a --d 18446744073709551616",
         "prompts.txt:3: --d 18446744073709551616 is out of range: a seed is an integer in [0, 18446744073709551615]"},
        {"a --l 1000.5", "prompts.txt:3: CFG scale 1000.5 must be in [0, 1000]"},
        {"a --l 1" + std::string(400, '0'), "is out of range: the CFG scale must be in [0, 1000]"},
    };
    for (const auto& [line, want] : cases) {
        CAPTURE(line);
        CHECK(has(error_line(line), want));
    }
    // The edges are in; any seed a uint64 holds is one (kohya's torch.manual_seed takes [0, 2^64 - 1]).
    const SamplePrompt p = parse("a --s 1000 --w 2048 --h 8 --l 1000 --d 9223372036854775808");
    CHECK((p.steps == 1000 && p.width == b.side_max && p.height == b.side_min && p.cfg_scale == b.cfg_max));
    CHECK(p.seed == 9223372036854775808ull);
    CHECK(parse("a --s 1").steps == 1);
    // Defaults a tool passes in are checked the same way.
    SamplePrompt d = diffusion::kohya_prompt_defaults();
    d.steps = 0;
    CHECK(has(error_of([&] { diffusion::parse_prompt_line("a", d, "f.txt", 1); }), "f.txt:1: steps 0 must be in [1, 1000]"));
}
