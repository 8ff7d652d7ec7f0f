// gl-txt2img end to end on the tiny model as a diffusers folder (CPU): PNGs with A1111 parameters,
// a grid, prompt files, numbering that continues, the plan, and refusals with clear messages.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "data/png_file.h"

namespace fs = std::filesystem;

#ifdef GL_TXT2IMG_BIN

namespace {

fs::path golden(const std::string& rel) {
    std::string f = __FILE__;
    return fs::path(f.substr(0, f.find_last_of('/'))) / "golden" / "data" / rel;
}

void write_text(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << s;
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The pipeline test's tiny model (tests/test_sampler_pipeline.cpp) as a diffusers folder.
void make_tiny_folder(const fs::path& root) {
    write_text(root / "unet" / "config.json", R"({"_class_name": "UNet2DConditionModel", "attention_head_dim": 2,
      "block_out_channels": [16, 32], "cross_attention_dim": 16, "down_block_types": ["CrossAttnDownBlock2D",
      "DownBlock2D"], "flip_sin_to_cos": true, "freq_shift": 0, "in_channels": 4, "layers_per_block": 1,
      "norm_eps": 1e-05, "norm_num_groups": 8, "out_channels": 4, "sample_size": 8,
      "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "use_linear_projection": false})");
    write_text(root / "text_encoder" / "config.json", R"({"architectures": ["CLIPTextModel"],
      "model_type": "clip_text_model", "vocab_size": 3514, "hidden_size": 16, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 77, "hidden_act": "quick_gelu",
      "layer_norm_eps": 1e-05})");
    write_text(root / "vae" / "config.json", R"({"_class_name": "AutoencoderKL", "block_out_channels": [8, 16],
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"], "in_channels": 3, "latent_channels": 4,
      "layers_per_block": 1, "norm_num_groups": 4, "out_channels": 3, "sample_size": 16, "scaling_factor": 0.18215,
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"]})");
    fs::copy_file(golden("unet/unet_diffusers.safetensors"), root / "unet" / "diffusion_pytorch_model.safetensors");
    fs::copy_file(golden("sampler/text_encoder.safetensors"), root / "text_encoder" / "model.safetensors");
    fs::copy_file(golden("vae/weights_diffusers.safetensors"), root / "vae" / "diffusion_pytorch_model.safetensors");
    fs::create_directories(root / "tokenizer");
    for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(golden("tokenizer/tiny") / f, root / "tokenizer" / f);
}

struct Result {
    int status = -1;
    std::string out, err;
};

Result txt2img(const fs::path& dir, const std::string& args) {
    const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
    const std::string cmd = std::string(GL_TXT2IMG_BIN) + " " + args + " > '" + out.string() + "' 2> '" + err.string() + "'";
    const int rc = std::system(cmd.c_str());
    Result r;
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string parameters(const fs::path& png) {
    for (const auto& [k, v] : data::read_png_info(png.string()).text)
        if (k == "parameters") return v;
    return "(none)";
}

}  // namespace

TEST_CASE("gl-txt2img: images, parameters, grid, prompt file, numbering, refusals") {
    const fs::path dir = fs::temp_directory_path() / ("gl-test-txt2img-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const fs::path model = dir / "tiny-sd";
    make_tiny_folder(model);
    const std::string common = "'" + model.string() + "' --backend cpu --out '" + (dir / "out").string() + "' ";

    Result r = txt2img(dir, common + "--prompt 'a red fox' -n blurry -W 16 -H 16 --steps 2 --seed 7 --batch 2 --grid");
    INFO(r.out, r.err);
    REQUIRE(r.status == 0);
    CHECK(has(r.out, "memory plan (f32, cpu): 16x16, batch 2 with CFG"));
    const data::PngInfo first = data::read_png_info((dir / "out" / "00000-7.png").string());
    CHECK(first.width == 16);
    CHECK(first.height == 16);
    CHECK(parameters(dir / "out" / "00000-7.png") ==
          "a red fox\nNegative prompt: blurry\nSteps: 2, Sampler: Euler a, CFG scale: 7.5, Seed: 7, Size: 16x16, "
          "Model: tiny-sd, Version: gl-txt2img " + std::string(GL_VERSION_FOR_TESTS));
    CHECK(has(parameters(dir / "out" / "00001-8.png"), "Seed: 8,"));
    CHECK(data::read_png_info((dir / "out" / "grid-00000.png").string()).width == 32);

    // A prompt file: per-line options; numbering continues after what the folder holds.
    write_text(dir / "prompts.txt", "# two prompts\na lighthouse --w 24 --h 16 --d 3 --s 3 --l 4 --ss ddim\n\n"
                                    "a castle --n fog --d 5 --w 16 --h 16 --s 2\n");
    r = txt2img(dir, common + "--prompt-file '" + (dir / "prompts.txt").string() + "' --clip-skip 2 --grid");
    INFO(r.out, r.err);
    REQUIRE(r.status == 0);
    CHECK(parameters(dir / "out" / "00002-3.png") ==
          "a lighthouse\nSteps: 3, Sampler: DDIM, CFG scale: 4, Seed: 3, Size: 24x16, Model: tiny-sd, Clip skip: 2, "
          "Version: gl-txt2img " + std::string(GL_VERSION_FOR_TESTS));
    CHECK(has(parameters(dir / "out" / "00003-5.png"), "a castle\nNegative prompt: fog\nSteps: 2, Sampler: Euler a"));
    CHECK(data::read_png_info((dir / "out" / "00002-3.png").string()).width == 24);
    // The grid of both: one row of two 24x16 cells (A1111's layout; the 16x16 image centred in its cell).
    const data::PngInfo grid = data::read_png_info((dir / "out" / "grid-00001.png").string());
    CHECK(grid.width == 48);
    CHECK(grid.height == 16);

    // --plan prints the plan and writes nothing.
    r = txt2img(dir, common + "-p x -W 32 -H 16 --plan");
    CHECK(r.status == 0);
    CHECK(has(r.out, "UNet graph (one model call)"));
    CHECK(!fs::exists(dir / "out" / "00004-0.png"));

    // Refusals: exit status 1 (2 for the command line itself) and a message naming the culprit.
    r = txt2img(dir, common + "-p x -W 12");
    CHECK(r.status == 1);
    CHECK(has(r.err, "gl-txt2img: error: --prompt 'x': width 12 must be a multiple of 8"));
    // kohya's other samplers, from the command line and a prompt file's --ss, with their A1111 names.
    r = txt2img(dir, common + "-p x -W 16 -H 16 --steps 2 --cfg 1 --seed 11 --sampler pndm");
    INFO(r.out, r.err);
    REQUIRE(r.status == 0);
    CHECK(has(parameters(dir / "out" / "00004-11.png"), "Steps: 2, Sampler: PLMS, CFG scale: 1, Seed: 11,"));
    write_text(dir / "kohya.txt", "a castle --w 16 --h 16 --s 2 --l 1 --d 12 --ss k_dpm_2_a_karras\n");
    r = txt2img(dir, common + "--prompt-file '" + (dir / "kohya.txt").string() + "'");
    INFO(r.out, r.err);
    REQUIRE(r.status == 0);
    CHECK(has(parameters(dir / "out" / "00005-12.png"), "Steps: 2, Sampler: DPM2 a Karras, CFG scale: 1, Seed: 12,"));
    r = txt2img(dir, common + "-p x -W 16 -H 16 --steps 2 --sampler-config kohya --sampler pndm");
    CHECK(r.status == 1);
    CHECK(has(r.err, "sampler pndm: 2 steps with the Runge-Kutta warm-up"));
    r = txt2img(dir, common + "-p x --sampler pndm_karras");
    CHECK(r.status == 1);
    CHECK(has(r.err, "prompt 1: sampler 'pndm_karras': pndm has no Karras variant"));
    r = txt2img(dir, common + "-p x --sampler warp");
    CHECK(has(r.err, "unknown sampler 'warp'"));
    r = txt2img(dir, common + "-p x --lora '" + (dir / "missing.safetensors").string() + ":0.5'");
    CHECK(r.status == 1);
    CHECK(has(r.err, "missing.safetensors"));
    r = txt2img(dir, "'" + (dir / "nothing").string() + "' -p x --backend cpu");
    CHECK(r.status == 1);
    CHECK(has(r.err, (dir / "nothing").string()));
    write_text(dir / "bad.txt", "fine\na --w x\n");
    r = txt2img(dir, common + "--prompt-file '" + (dir / "bad.txt").string() + "'");
    CHECK(r.status == 1);
    CHECK(has(r.err, "bad.txt:2: --w 'x' is not a whole number of pixels"));
    r = txt2img(dir, common + "-p x --prompt-file p.txt");
    CHECK(r.status == 2);  // CLI11: --prompt excludes --prompt-file
    r = txt2img(dir, common);
    CHECK(r.status == 2);
    CHECK(has(r.err, "gl-txt2img: error: give --prompt or --prompt-file"));
    fs::remove_all(dir);
}

TEST_CASE("gl-txt2img: --v2 opens SD2.x models and refuses an SD1.x one by name") {
    const fs::path dir = fs::temp_directory_path() / ("gl-test-txt2img-v2-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    make_tiny_folder(dir / "tiny-sd");
    const Result r = txt2img(dir, "'" + (dir / "tiny-sd").string() + "' --v2 --backend cpu --prompt x -W 16 -H 16");
    CHECK(r.status == 1);
    CHECK(has(r.err, "an SD1.x model"));
    CHECK(has(r.err, "not SD2.x"));
    fs::remove_all(dir);
}

TEST_CASE("gl-txt2img: one set of bounds for flags and prompt files") {
    const fs::path dir = fs::temp_directory_path() / ("gl-test-txt2img-bounds-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const fs::path model = dir / "tiny-sd", out = dir / "out";
    make_tiny_folder(model);
    const std::string common = "'" + model.string() + "' --backend cpu --out '" + out.string() + "' ";

    // Flags: a bad command line (2), naming the flag and the range.
    const std::pair<std::string, std::string> flags[] = {
        {"-p x -W 8192 -H 8192 --steps 1", "--width wants an integer in [8, 2048], got '8192'"},
        {"-p x -H 2147483648", "--height wants an integer in [8, 2048], got '2147483648'"},
        {"-p x --steps 1001", "--steps wants an integer in [1, 1000], got '1001'"},
        {"-p x --steps -inf", "--steps wants an integer in [1, 1000], got '-inf'"},
        {"-p x --cfg -inf", "--cfg wants a finite number in [0, 1000], got '-inf'"},
        {"-p x --seed -2", "--seed wants an integer in [0, 18446744073709551615], got '-2'"},
        {"-p x --seed 18446744073709551616", "--seed wants an integer in [0, 18446744073709551615]"},
        {"-p x --batch 65", "--batch wants an integer in [1, 64], got '65'"},
    };
    for (const auto& [args, want] : flags) {
        const Result r = txt2img(dir, common + args);
        INFO(args, " -> ", r.err);
        CHECK(r.status == 2);
        CHECK(has(r.err, want));
    }
    // The prompt file: the same bounds, an error (1) naming the file, the line and the value.
    const std::pair<std::string, std::string> lines[] = {
        {"x --s 0", "p.txt:2: steps 0 must be in [1, 1000]"},
        {"x --s 100000", "p.txt:2: steps 100000 must be in [1, 1000]"},
        {"x --s 2147483648", "p.txt:2: --s 2147483648 is out of range: steps must be in [1, 1000]"},
        {"x --w 8192 --h 8192", "p.txt:2: width 8192 must be a multiple of 8 in [8, 2048]"},
        {"x --l 1001", "p.txt:2: CFG scale 1001 must be in [0, 1000]"},
        {"x --d 18446744073709551616", "p.txt:2: --d 18446744073709551616 is out of range"},
    };
    for (const auto& [line, want] : lines) {
        write_text(dir / "p.txt", "fine --w 16 --h 16\n" + line + "\n");
        const Result r = txt2img(dir, common + "--prompt-file '" + (dir / "p.txt").string() + "'");
        INFO(line, " -> ", r.err);
        CHECK(r.status == 1);
        CHECK(has(r.err, want));
    }
    CHECK(!fs::exists(out));  // nothing was made

    // A seed is any uint64, from a file (kohya's --d) or the command line; the batch wraps.
    write_text(dir / "p.txt", "x --d 9223372036854775808 --s 1 --w 16 --h 16 --l 1\n");
    Result r = txt2img(dir, common + "--prompt-file '" + (dir / "p.txt").string() + "'");
    INFO(r.out, r.err);
    REQUIRE(r.status == 0);
    CHECK(has(parameters(out / "00000-9223372036854775808.png"), "Seed: 9223372036854775808,"));
    r = txt2img(dir, common + "-p x -W 16 -H 16 --steps 1 --cfg 1 --seed 18446744073709551615 --batch 2");
    REQUIRE(r.status == 0);
    CHECK(has(parameters(out / "00001-18446744073709551615.png"), "Seed: 18446744073709551615,"));
    CHECK(has(parameters(out / "00002-0.png"), "Seed: 0,"));
    fs::remove_all(dir);
}

TEST_CASE("gl-txt2img: a plan over the memory is refused before anything is allocated, naming what fits") {
    const fs::path dir = fs::temp_directory_path() / ("gl-test-txt2img-memory-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const fs::path model = dir / "tiny-sd", out = dir / "out";
    make_tiny_folder(model);
    const std::string common = "'" + model.string() + "' --backend cpu --out '" + out.string() + "' ";
    Result r;
    for (const auto& [arg, want] : {std::pair<std::string, std::string>{"lots", "--memory-limit: "},
                                    {"0", "--memory-limit: a limit of 0 bytes fits nothing"}}) {
        r = txt2img(dir, common + "-p x --memory-limit " + arg);
        CHECK(r.status == 2);
        CHECK(has(r.err, want));
    }
    r = txt2img(dir, common + "-p x -W 16 -H 16 --steps 1 --memory-limit 1K");
    CHECK(r.status == 1);
    CHECK(has(r.err, "gl-txt2img: error: memory: 16x16 at batch 1 with CFG needs "));
    CHECK(has(r.err, "of the memory limit; no smaller size fits either (the weights alone take "));
    r = txt2img(dir, common + "-p x -W 16 -H 16 --plan");
    REQUIRE(r.status == 0);
    const size_t at = r.out.find("total          ");
    REQUIRE(at != std::string::npos);
    const double small_mib = std::stod(r.out.substr(at + 15));
    r = txt2img(dir, common + "-p x -W 64 -H 64 --steps 1 --memory-limit " +
                         std::to_string(size_t(small_mib * 1048576.0) + 65536));
    CHECK(r.status == 1);
    CHECK(has(r.err, "memory: 64x64 at batch 1 with CFG needs "));
    CHECK(has(r.err, "of the memory limit; the largest that fits: "));
    CHECK(!fs::exists(out));
    fs::remove_all(dir);
}

#endif
