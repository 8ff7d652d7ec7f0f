// kohya's .toml and .json sample-prompt files (pipelines/sample_prompt_files.h): the shared keys
// of [prompt] with each [[prompt.subset]], JSON objects and lines, kohya's defaults, and what is
// refused with the file, the prompt and the key named.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "pipelines/sample_prompt_files.h"
#include "test_util.h"

using diffusion::SamplePrompt;
using gltest::error_of;
namespace fs = std::filesystem;

namespace {

// The files of a test, in a folder removed afterwards.
struct PromptDir : gltest::TempDir {
    std::filesystem::path dir = path;
    std::string write(const std::string& name, const std::string& text) const { return file(name, text); }
};

std::vector<SamplePrompt> read(const std::string& path) {
    return sd::read_sample_prompt_file(path, diffusion::kohya_prompt_defaults());
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("prompt files: kohya's .toml, shared [prompt] keys under each subset's own") {
    PromptDir d;
    const std::string f = d.write("p.toml", R"(
[prompt]
negative_prompt = "lowres, bad hands"
width = 640
height = 768
scale = 7
sample_steps = 28

[[prompt.subset]]
prompt = "a cat on a sofa"
seed = 42

[[prompt.subset]]
prompt = "a lighthouse"
sample_sampler = "euler_a"
)");
    const std::vector<SamplePrompt> ps = read(f);
    REQUIRE(ps.size() == 2);
    CHECK(ps[0].prompt == "a cat on a sofa");
    CHECK(ps[0].negative == "lowres, bad hands");
    CHECK(ps[0].width == 640);
    CHECK(ps[0].height == 768);
    CHECK(ps[0].cfg_scale == 7.0);
    CHECK(ps[0].steps == 28);
    CHECK(ps[0].seed == 42u);
    CHECK(ps[0].sampler.empty());
    CHECK(ps[0].where == f + ": prompt 1");
    CHECK(ps[1].prompt == "a lighthouse");
    CHECK_FALSE(ps[1].seed);
    CHECK(ps[1].sampler == "euler_a");
    CHECK(ps[1].steps == 28);
    // A key in both: kohya's dict(**prompt, **subset) raises for it.
    CHECK(has(error_of([&] {
                  read(d.write("twice.toml", "[prompt]\nwidth = 512\n[[prompt.subset]]\nprompt = \"a\"\nwidth = 640\n"));
              }),
              "twice.toml: prompt 1: width is given in [prompt] and in its subset"));
    CHECK(has(error_of([&] { read(d.write("none.toml", "[other]\nprompt = \"a\"\n")); }), "no [prompt] table"));
    CHECK(has(error_of([&] { read(d.write("nosub.toml", "[prompt]\nprompt = \"a\"\n")); }), "no [[prompt.subset]]"));
    CHECK(has(error_of([&] { read(d.write("bad.toml", "[prompt\n")); }), "bad.toml: invalid TOML"));
}

TEST_CASE("prompt files: kohya's .json, objects with kohya's defaults and lines read as .txt lines") {
    PromptDir d;
    const std::string f = d.write("p.json", R"([
  {"prompt": "a cat", "negative_prompt": "blurry", "width": 576, "height": 448, "scale": 5.5, "seed": 18446744073709551615,
   "sample_steps": 12, "sample_sampler": "k_euler"},
  {"prompt": "a dog"},
  "a bird --w 320 --h 256 --d 7 --s 9 --n low quality"
])");
    const std::vector<SamplePrompt> ps = read(f);
    REQUIRE(ps.size() == 3);
    CHECK(ps[0].prompt == "a cat");
    CHECK(ps[0].negative == "blurry");
    CHECK(ps[0].width == 576);
    CHECK(ps[0].height == 448);
    CHECK(ps[0].cfg_scale == 5.5);
    CHECK(ps[0].seed == 18446744073709551615ull);
    CHECK(ps[0].steps == 12);
    CHECK(ps[0].sampler == "k_euler");
    // kohya's sample_image_inference defaults: 512x512, 30 steps, CFG 7.5, no seed.
    const SamplePrompt def = diffusion::kohya_prompt_defaults();
    CHECK(ps[1].prompt == "a dog");
    CHECK(ps[1].width == def.width);
    CHECK(ps[1].height == def.height);
    CHECK(ps[1].steps == def.steps);
    CHECK(ps[1].cfg_scale == def.cfg_scale);
    CHECK_FALSE(ps[1].seed);
    CHECK(ps[2].prompt == "a bird");
    CHECK(ps[2].width == 320);
    CHECK(ps[2].height == 256);
    CHECK(ps[2].seed == 7u);
    CHECK(ps[2].steps == 9);
    CHECK(ps[2].negative == "low quality");
    CHECK(ps[2].where == f + ": prompt 3");
}

TEST_CASE("prompt files: bad keys, types and values are refused naming the file, the prompt and the key") {
    PromptDir d;
    auto json_error = [&](const std::string& body) { return error_of([&] { read(d.write("e.json", body)); }); };
    CHECK(has(json_error(R"([{"prompt": "a", "width": 512.5}])"), "e.json: prompt 1: width must be a whole number, got a float"));
    CHECK(has(json_error(R"([{"prompt": "a"}, {"prompt": 3}])"), "e.json: prompt 2: prompt must be a string, got an integer"));
    CHECK(has(json_error(R"([{"prompt": "a", "seed": -1}])"), "seed -1 must be in [0, 18446744073709551615]"));
    CHECK(has(json_error(R"([{"prompt": "a", "scale": "7"}])"), "scale must be a number, got a string"));
    CHECK(has(json_error(R"([{"prompt": "a", "width": 500}])"), "e.json: prompt 1: width 500 must be"));
    CHECK(has(json_error(R"([{"prompt": "a", "sample_steps": 0}])"), "steps 0 must be in [1, 1000]"));
    CHECK(has(json_error(R"([{"prompt": "a", "steps": 20}])"), "unknown key 'steps' (known: prompt, negative_prompt"));
    CHECK(has(json_error(R"([{"prompt": "a", "guidance_scale": 3.5}])"),
              "guidance_scale is one of kohya's keys for other model families"));
    CHECK(has(json_error(R"([{"prompt": "a", "sample_sampler": "fancy"}])"), "unknown sampler 'fancy'"));
    CHECK(has(json_error(R"({"prompt": "a"})"), "a JSON prompt file is a list of prompts"));
    CHECK(has(json_error(R"([3])"), "e.json: prompt 1: must be an object of prompt keys or a prompt line"));
    CHECK(has(json_error(R"([])"), "holds no prompt"));
    CHECK(has(json_error(R"([)"), "not valid JSON"));
    CHECK(has(json_error(R"(["a --x 1"])"), "e.json: prompt 1: unknown option --x"));
    CHECK(has(error_of([&] { read(d.write("e.toml", "[prompt]\n[[prompt.subset]]\nprompt = \"a\"\nheight = [1]\n")); }),
              "e.toml: prompt 1: height must be a whole number, got an array"));
    // Any other extension is the line format, as before.
    CHECK(read(d.write("p.txt", "a castle --w 64 --h 64\n")).at(0).where == (d.dir / "p.txt").string() + ":1");
}
