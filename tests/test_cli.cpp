// The programs' command-line layer (tools/common/cli.h): numbers read whole into exactly their type
// and range, --backend, lists, unknown flags and missing values named, --help, and what run_main
// prints and returns for each kind of error. The programs' own flags: tests/cli/ (CTest label cli).
#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/common/cli.h"

using gl::cli::HelpRequested;
using gl::cli::Parser;
using gl::cli::UsageError;

namespace {

// The UsageError message of parsing args, or "(accepted)".
std::string usage_error(Parser& p, const std::vector<std::string>& args) {
    try {
        p.parse(args);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "(accepted)";
}

template <class T>
std::string int_error(const char* text, T lo, T hi) {
    try {
        gl::cli::parse_int<T>("--n", text, lo, hi);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "(accepted)";
}

// A program's options as the tools declare them.
struct Demo {
    int steps = 120, depth = 3, size = 12;
    int64_t rank = 16;
    uint32_t seed = 1;
    float lr = 3e-3f;
    double multiplier = 1.0;
    std::vector<int64_t> batches;
    std::vector<gl::Recompute> recompute = {gl::Recompute::blocks};
    std::string dtype = "bf16";
    gl::Backend backend = gl::Backend::automatic;
    Parser p{"demo", "a test program"};
    Demo() {
        p.add_int("--steps", steps, 1, 1'000'000'000, "training steps");
        p.add_int("--depth", depth, 1, 256, "blocks");
        p.add_int("--size", size, 4, 1024, "pixels");
        p.add_int("--rank", rank, int64_t(1), int64_t(4096), "LoRA rank");
        p.add_int("--seed", seed, 0u, UINT32_MAX, "seed");
        p.add_real("--lr", lr, 0.0f, std::numeric_limits<float>::max(), "learning rate");
        p.add_real("--multiplier", multiplier, std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max(),
                   "strength");
        p.add_int_list("--batch", batches, int64_t(1), int64_t(4096), "batch sizes");
        p.add_parsed_list("--recompute", recompute, &gl::parse_recompute, "none|blocks|cheap,...", "policies");
        p.add_choice("--dtype", dtype, {"bf16", "f32"}, "dtype");
        p.add_backend(backend);
    }
};

struct Merge {
    std::string base, lora, out;
    float multiplier = 1.0f;
    Parser p{"merge", "positionals"};
    Merge() {
        p.add_path("BASE", base, "base");
        p.add_path("LORA", lora, "lora");
        p.add_path("OUT", out, "out");
        p.add_real("--multiplier", multiplier, std::numeric_limits<float>::lowest(), std::numeric_limits<float>::max(),
                   "strength");
    }
};

}  // namespace

TEST_CASE("cli numbers: overflow beyond the type and the flag's range is refused, naming both") {
    // The hardening issue's cases: each used to wrap or truncate into a small or negative value.
    CHECK(int_error<int>("4294967297", 1, INT_MAX) == "--n wants an integer in [1, 2147483647], got '4294967297'");
    CHECK(int_error<int>("2147483648", 1, INT_MAX) != "(accepted)");
    CHECK(int_error<int>("4294967808", 8, 16384) != "(accepted)");
    CHECK(int_error<int64_t>("4294967296", 1, 4096) == "--n wants an integer in [1, 4096], got '4294967296'");
    CHECK(int_error<int64_t>("99999999999999999999999", 1, INT64_MAX) != "(accepted)");
    CHECK(int_error<uint64_t>("18446744073709551616", 0, UINT64_MAX) != "(accepted)");
    CHECK(int_error<uint8_t>("256", 0, 255) == "--n wants an integer in [0, 255], got '256'");
    // The edges themselves are accepted, into exactly the type.
    CHECK(gl::cli::parse_int<int>("--n", "2147483647", 1, INT_MAX) == INT_MAX);
    CHECK(gl::cli::parse_int<uint64_t>("--n", "18446744073709551615", 0, UINT64_MAX) == UINT64_MAX);
    CHECK(gl::cli::parse_int<int64_t>("--n", "-9223372036854775808", INT64_MIN, 0) == INT64_MIN);
    CHECK(gl::cli::parse_int<int>("--n", "4096", 1, 4096) == 4096);
    CHECK(int_error<int>("4097", 1, 4096) != "(accepted)");

    Demo d;
    CHECK(usage_error(d.p, {"--steps", "4294967297"}) == "--steps wants an integer in [1, 1000000000], got '4294967297'");
    CHECK(usage_error(d.p, {"--depth", "4294967296"}).starts_with("--depth wants an integer in [1, 256]"));
    CHECK(usage_error(d.p, {"--size", "4294967808"}).starts_with("--size wants an integer in [4, 1024]"));
    CHECK(usage_error(d.p, {"--rank", "2147483648"}).starts_with("--rank wants an integer in [1, 4096]"));
    CHECK(usage_error(d.p, {"--batch", "1,4294967296"}).starts_with("--batch wants an integer in [1, 4096]"));
    CHECK(usage_error(d.p, {"--lr", "1e999"}) == "--lr wants a finite number >= 0, got '1e999'");
}

TEST_CASE("cli numbers: negative values are refused by range, not wrapped") {
    CHECK(int_error<uint32_t>("-1", 0, UINT32_MAX) == "--n wants an integer in [0, 4294967295], got '-1'");
    CHECK(int_error<uint64_t>("-0", 0, UINT64_MAX) != "(accepted)");
    CHECK(int_error<int>("-5", 1, 100) != "(accepted)");
    Demo d;
    CHECK(usage_error(d.p, {"--rank", "-1"}).find("--rank") != std::string::npos);
    CHECK(usage_error(d.p, {"--seed=-1"}) == "--seed wants an integer in [0, 4294967295], got '-1'");
    CHECK(usage_error(d.p, {"--lr=-0.5"}) == "--lr wants a finite number >= 0, got '-0.5'");
    // Where the range allows it, a negative value is a value, not an option.
    Merge m;
    CHECK(usage_error(m.p, {"b", "l", "o", "--multiplier", "-0.5"}) == "(accepted)");
    CHECK(m.multiplier == -0.5f);
}

TEST_CASE("cli numbers: garbage is refused naming the flag, no raw conversion text") {
    for (const char* bad : {"abc", "12x", "0x10", " 5", "5 ", "+5", "1e3", "", "-", "1.5", "١٢"})
        CHECK_MESSAGE(int_error<int>(bad, 0, 1000).starts_with("--n wants an integer in [0, 1000], got '"), bad);
    CHECK(gl::cli::parse_int<int>("--n", "010", 0, 1000) == 10);  // decimal, never octal
    for (const char* bad : {"abc", "nan", "inf", "-inf", "0x1p3", "1e999", "", "1,5", "3e-3x", " 1"})
        CHECK_THROWS_WITH_AS(gl::cli::parse_real<double>("--lr", bad, 0.0, 10.0),
                             doctest::Contains("--lr wants a finite number in [0, 10], got '"), UsageError);
    CHECK(gl::cli::parse_real<double>("--lr", "3e-3", 0.0, 10.0) == 3e-3);
    CHECK(gl::cli::parse_real<float>("--lr", ".5", 0.0f, 1.0f) == 0.5f);
    CHECK_THROWS_WITH_AS(gl::cli::parse_real<float>("--m", "x", std::numeric_limits<float>::lowest(),
                                                    std::numeric_limits<float>::max()),
                         "--m wants a finite number, got 'x'", UsageError);
    Demo d;
    CHECK(usage_error(d.p, {"--lr", "abc"}) == "--lr wants a finite number >= 0, got 'abc'");
    CHECK(usage_error(d.p, {"--steps", "12x"}) == "--steps wants an integer in [1, 1000000000], got '12x'");
    CHECK(usage_error(d.p, {"--batch", "1,,8"}) == "--batch has an empty item in '1,,8'");
    CHECK(usage_error(d.p, {"--recompute", "none,sometimes"}).starts_with("--recompute: unknown recompute policy"));
    CHECK(usage_error(d.p, {"--dtype", "f16"}) == "--dtype wants one of bf16, f32, got 'f16'");
}

TEST_CASE("cli: values land in their variables, lists, repeats and --flag=value") {
    Demo d;
    CHECK(usage_error(d.p, {"--steps", "7", "--depth=2", "--batch", "1,8", "--recompute", "none,cheap", "--lr", "0.01",
                            "--seed", "4294967295", "--dtype", "f32", "--backend", "cpu", "--steps", "9"}) == "(accepted)");
    CHECK(d.steps == 9);  // a repeated flag: the last one counts
    CHECK(d.depth == 2);
    CHECK(d.batches == std::vector<int64_t>{1, 8});
    CHECK(d.recompute == std::vector<gl::Recompute>{gl::Recompute::none, gl::Recompute::cheap});
    CHECK(d.lr == 0.01f);
    CHECK(d.seed == UINT32_MAX);
    CHECK(d.dtype == "f32");
    CHECK(d.backend == gl::Backend::cpu);
    CHECK(d.size == 12);  // untouched: the default
}

TEST_CASE("cli: an unknown flag is named, also before positionals") {
    Merge m;
    const std::string e = usage_error(m.p, {"--frobnicate", "B", "L", "O"});
    CHECK(e.find("--frobnicate") != std::string::npos);
    CHECK(e.find("'O'") == std::string::npos);
    Merge m2;
    CHECK(usage_error(m2.p, {"B", "L", "O", "extra"}).find("extra") != std::string::npos);
    Demo d;
    CHECK(usage_error(d.p, {"--stpes", "5"}).find("--stpes") != std::string::npos);
    Demo d2;
    CHECK(usage_error(d2.p, {"-x"}).find("-x") != std::string::npos);
}

TEST_CASE("cli: --backend takes auto, cpu or cuda and nothing else") {
    for (const char* name : {"auto", "cpu", "cuda"}) {
        Demo d;
        CHECK(usage_error(d.p, {"--backend", name}) == "(accepted)");
        CHECK(d.backend == gl::parse_backend(name));
    }
    for (const char* bad : {"gpu", "CUDA", "", "cpu,cuda"}) {
        Demo d;
        CHECK_MESSAGE(usage_error(d.p, {"--backend", bad}) ==
                          std::string("--backend: unknown backend '") + bad + "' (expected auto, cpu or cuda)",
                      bad);
    }
}

TEST_CASE("cli: a missing value or argument is named") {
    Demo d;
    CHECK(usage_error(d.p, {"--steps"}).find("--steps") != std::string::npos);
    Demo d2;
    CHECK(usage_error(d2.p, {"--backend"}).find("--backend") != std::string::npos);
    Demo d3;  // CLI11 takes the next word as the value, as getopt does: it is refused as one
    CHECK(usage_error(d3.p, {"--steps", "--depth", "2"}) == "--steps wants an integer in [1, 1000000000], got '--depth'");
    Merge m;
    CHECK(usage_error(m.p, {"B", "L"}).find("OUT") != std::string::npos);
    Merge m2;
    CHECK(usage_error(m2.p, {"B", "L", "O", "--multiplier"}).find("--multiplier") != std::string::npos);
}

TEST_CASE("cli: --help gives the options with their ranges and defaults") {
    Demo d;
    std::string help;
    try {
        d.p.parse({"--steps", "5", "--help"});
    } catch (const HelpRequested& h) {
        help = h.what();
    }
    for (const char* want : {"a test program", "--steps", "[1, 1000000000]", "120", "--backend", "auto|cpu|cuda",
                             "--recompute", "--dtype", "bf16|f32", "-h,--help"})
        CHECK_MESSAGE(help.find(want) != std::string::npos, want, " in\n", help);
    Merge m;
    CHECK_THROWS_AS(m.p.parse({"-h"}), HelpRequested);  // without the required positionals
}

TEST_CASE("cli run_main: exit status and one line per kind of error") {
    using gl::cli::exit_for;
    auto of = [](auto e, int failure = 1) { return exit_for(std::make_exception_ptr(e), "gl-x", failure); };
    const auto usage = of(UsageError("--steps wants an integer in [1, 10], got 'x'"));
    CHECK(usage.status == 2);
    CHECK(usage.text.starts_with("gl-x: error: --steps wants an integer in [1, 10], got 'x'\n"));
    CHECK_FALSE(usage.to_stdout);
    const auto fail = of(gl::Error("model.safetensors: truncated header"));
    CHECK(fail.status == 1);
    CHECK(fail.text == "gl-x: error: model.safetensors: truncated header\n");
    CHECK(of(gl::Error("x"), 2).status == 2);  // gl-sd15check: 1 means out of tolerance, 2 an error
    // A library's bare what() ("stof") never reaches the user without saying what it is.
    const auto raw = of(std::invalid_argument("stof"));
    CHECK(raw.status == 1);
    CHECK(raw.text == "gl-x: error: unexpected std::invalid_argument: stof\n");
    CHECK(of(std::bad_alloc()).text == "gl-x: error: out of memory (a host allocation failed)\n");
    CHECK(exit_for(std::make_exception_ptr(42), "gl-x", 1).text == "gl-x: error: unexpected exception of an unknown type\n");
    const auto help = of(HelpRequested("usage: gl-x\n"));
    CHECK(help.status == 0);
    CHECK(help.to_stdout);
    CHECK(help.text == "usage: gl-x\n");
    CHECK(gl::cli::run_main("gl-x", [] { return 3; }) == 3);
    CHECK(gl::cli::run_main("gl-x", []() -> int { throw HelpRequested(""); }) == 0);
}

TEST_CASE("cli: a LoRA argument FILE[:MULT] takes the multiplier only when it reads whole as a number") {
    auto check = [](const std::string& arg, const std::string& path, float mult) {
        const gl::cli::LoraArg l = gl::cli::parse_lora_arg(arg);
        CHECK_MESSAGE(l.path == path, arg);
        CHECK_MESSAGE(l.multiplier == mult, arg);
    };
    check("a.safetensors", "a.safetensors", 1.0f);
    check("a.safetensors:0.5", "a.safetensors", 0.5f);
    check("C:/loras/a.safetensors:-1", "C:/loras/a.safetensors", -1.0f);
    check("dir:x/a.safetensors", "dir:x/a.safetensors", 1.0f);
    check("a.safetensors:", "a.safetensors:", 1.0f);
    check("a.safetensors:0.5x", "a.safetensors:0.5x", 1.0f);
}
