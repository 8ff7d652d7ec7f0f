// kohya's weighted captions (models/sd15/prompt_weights.h) against kohya's own code
// (tests/golden/make_kohya_weighted_captions.py): the attention parser, the ids and weights of
// tokenize_with_weights with the CLIP vocabulary, a tiny text encoder's weighted output, and the
// training step's token weights (a trained text encoder) against the host-weighted context.
#include <doctest/doctest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "ggml-lite/core/planner.h"
#include "model_fixtures.h"
#include "models/sd15/sd_config.h"
#include "ggml-lite/io/safetensors.h"
#include "models/sd15/prompt_weights.h"
#include "pipelines/cache_encoders.h"
#include "test_util.h"
#include "train/bucket_trainer.h"
#include "train_fixtures.h"

using namespace gl;

namespace {

nlohmann::json golden(const std::string& file) {
    std::ifstream f(gltest::golden_dir("kohya/weighted") + file);
    REQUIRE_MESSAGE(f, "golden data missing: run tests/golden/make_kohya_weighted_captions.py");
    return nlohmann::json::parse(f);
}

// kohya's weights [n, 77] as the rows of the joined output they multiply: one sequence weighs all
// 77 rows; several weigh each one's 75 inner rows (strategy_sd.py's encode_tokens_with_weights).
std::vector<float> kohya_rows(const std::vector<float>& w, int n) {
    if (n == 1) return w;
    std::vector<float> rows(size_t(n) * 75 + 2, 1.0f);
    for (int b = 0; b < n; b++)
        for (int j = 0; j < 75; j++) rows[size_t(1 + 75 * b + j)] = w[size_t(77 * b + 1 + j)];
    return rows;
}

}  // namespace

TEST_CASE("weighted captions: parse_prompt_attention gives kohya's pieces and weights, bit for bit") {
    const nlohmann::json g = golden("parse.json");
    REQUIRE(g["cases"].size() >= 50);
    for (const auto& c : g["cases"]) {
        const std::string caption = c["caption"];
        CAPTURE(caption);
        const std::vector<sd::WeightedPiece> got = sd::parse_prompt_attention(caption);
        REQUIRE(got.size() == c["pieces"].size());
        for (size_t i = 0; i < got.size(); i++) {
            CHECK(got[i].text == c["pieces"][i][0].get<std::string>());
            CHECK(got[i].weight == c["pieces"][i][1].get<double>());  // the same doubles, not just close
        }
    }
    for (const auto& e : g["errors"]) {
        const std::string caption = e;
        CAPTURE(caption);
        CHECK(gltest::error_of([&] { sd::parse_prompt_attention(caption); }).find("is not a number") !=
              std::string::npos);
    }
    // Spot checks of the rules (kohya's docstring).
    const auto one = sd::parse_prompt_attention("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).");
    REQUIRE(one.size() == 9);
    CHECK(one[1].text == "house");
    CHECK(one[1].weight == 1.3 * 1.1 * 1.1);
    CHECK(sd::parse_prompt_attention("").size() == 1);
    CHECK(sd::parse_prompt_attention("\\(literal\\]")[0].text == "(literal]");
}

TEST_CASE("weighted captions: ids and row weights of kohya's tokenize_with_weights (CLIP vocabulary)") {
    const nlohmann::json g = golden("ids.json");
    const sd::ClipTokenizer& tok = sd::ClipTokenizer::builtin();
    int truncated = 0, weighted = 0;
    for (const auto& c : g["cases"]) {
        const std::string caption = c["caption"];
        const int mtl = c["max_token_length"];
        CAPTURE(caption);
        CAPTURE(mtl);
        const sd::WeightedIds got = sd::encode_weighted(tok, caption, mtl);
        CHECK(got.ids == c["ids"].get<std::vector<int32_t>>());
        const std::vector<float> want = kohya_rows(c["weights"].get<std::vector<float>>(), mtl / 75);
        CHECK(got.weights == want);
        truncated += got.truncated;
        weighted += std::any_of(want.begin(), want.end(), [](float w) { return w != 1.0f; });
    }
    CHECK(truncated >= 3);  // the long captions cut at 75, 150 and 225 tokens are among them
    CHECK(weighted >= 100);
}

TEST_CASE("weighted captions: a tiny text encoder's weighted output matches kohya's encode_tokens_with_weights") {
    const std::string dir = gltest::golden_dir("kohya/weighted");
    const io::SafetensorsFile weights(dir + "clip.safetensors");
    const std::vector<std::string> captions = golden("clip.json")["captions"].get<std::vector<std::string>>();
    const sd::ClipTokenizer tok = sd::ClipTokenizer::from_folder(gltest::golden_dir("tokenizer") + "tiny");
    const sd::ClipConfig cfg{tok.vocab_size(), 16, 2, 2, 32, 77, Act::quick_gelu, 1e-5f};
    double worst = 0;
    for (int mtl : {75, 225})
        for (int skip : {1, 2}) {
            CAPTURE(mtl);
            CAPTURE(skip);
            sd::TextGraphEncoder enc(gltest::text_encoder_model(cfg, weights), "tiny", skip, mtl / 75);
            const std::string plain = enc.identity();
            enc.set_weighted([&tok, mtl](const std::string& s) { return sd::encode_weighted(tok, s, mtl); });
            CHECK(enc.identity() == plain + "|weighted");  // weighted outputs never share a cache entry
            const std::string key = gl::cat("out_", mtl, "_skip", skip);
            std::vector<float> want(size_t(weights.info(key).numel()));
            weights.read(key, want.data(), DType::f32);
            const std::vector<float> got = enc.encode(captions);
            const double e = gltest::rel_error(got, want);
            CHECK(e <= 2e-5);
            worst = std::max(worst, e);
        }
    MESSAGE("weighted captions vs kohya, tiny CLIP: max relative error ", worst);
}

TEST_CASE("weighted captions: a trained text encoder's token weights give the loss of the host-weighted context") {
    using namespace train_test;
    train::StepOptions o = tiny_options(train::Precision::fp32, 2, 1, 1e-3f);
    o.config = sd::sd_config(sd::sd_config(*o.config).unet, sd::ClipConfig{1000, 16, 2, 2, 32, 77, Act::quick_gelu, 1e-5f});
    o.context_tokens = 77;
    train::StepOptions trained = o;
    trained.train_text_encoder = true;
    trained.token_weights = true;
    auto a = train::build_step(trained), b = train::build_step(o);
    REQUIRE(a->token_weights != kNoValue);
    CHECK(a->g.shape(a->token_weights) == Shape{2, 77, 1});
    auto te = train::build_text_encoder(*o.config, o.precision, 2);
    auto rta = make_cpu_runtime(make_plan(a->g)), rtb = make_cpu_runtime(make_plan(b->g)),
         rtt = make_cpu_runtime(make_plan(te->g));
    const io::SafetensorsFile unet(kTinyUnet);
    sd::load_unet(*a->unet_weights, sd::sd_config(*o.config).unet, unet, *rta);
    sd::load_unet(*b->unet_weights, sd::sd_config(*o.config).unet, unet, *rtb);
    // The same text encoder weights in both graphs, drawn by name.
    const auto write_text = [](nn::Weights& w, const Graph& g, Runtime& rt) {
        for (const nn::WeightEntry& e : w.entries()) {
            std::vector<float> v = normal(size_t(g.shape(e.id).numel()), uint32_t(std::hash<std::string>{}(e.name)), 0.2f);
            if (e.name.find("norm") != std::string::npos && e.name.ends_with(".weight"))
                for (float& x : v) x += 1.0f;
            rt.write_f32(e.id, v);
        }
    };
    write_text(*a->text_weights, a->g, *rta);
    write_text(*te->weights, te->g, *rtt);
    train::BucketTrainer ta({{a.get(), rta.get()}}, {}), tb({{b.get(), rtb.get()}}, {});
    ta.init(5);  // LoRA up weights start at 0: the text encoder's LoRA changes nothing yet
    tb.init(5);

    const sd::ClipTokenizer& tok = sd::ClipTokenizer::builtin();
    std::vector<int32_t> ids;
    std::vector<float> w;
    for (const char* c : {"a (red:1.5) car, [blurry]", "((masterpiece)), a (cat:0.5) on a mat"}) {
        sd::WeightedIds e = sd::encode_weighted(tok, c, 75);
        for (int32_t& id : e.ids) id %= 1000;  // the tiny encoder's vocabulary
        ids.insert(ids.end(), e.ids.begin(), e.ids.end());
        w.insert(w.end(), e.weights.begin(), e.weights.end());
    }
    rtt->write(te->ids, ids.data(), DType::i32);
    rtt->run();
    std::vector<float> context = rtt->read_f32(te->context);
    const std::vector<float> plain_context = context;
    sd::apply_token_weights(context, w, 2, 77, 16);
    CHECK(gltest::rel_error(context, plain_context) > 0.01);

    const std::vector<float> x0 = structured_latents(2, 4);
    const auto loss_a = [&](std::span<const float> weights) {
        diffusion::NoiseRng rng{11, 0};
        return ta.evaluate({0, x0, std::span<const int32_t>(ids), {}, {}, weights}, 300, rng);
    };
    const auto loss_b = [&](const std::vector<float>& ctx) {
        diffusion::NoiseRng rng{11, 0};
        return tb.evaluate({0, x0, std::span<const float>(ctx), {}, {}, {}}, 300, rng);
    };
    const double weighted = loss_a(w), unweighted = loss_a({});
    CHECK(weighted == doctest::Approx(loss_b(context)).epsilon(1e-5));
    CHECK(unweighted == doctest::Approx(loss_b(plain_context)).epsilon(1e-5));
    CHECK(std::abs(weighted - unweighted) > 1e-4 * std::abs(unweighted));  // the weights reach the UNet
    // Weights of the wrong size, or for a graph built without them, are refused.
    CHECK_THROWS_WITH_AS(loss_a(std::vector<float>(5, 1.0f)), doctest::Contains("token weights"), gl::Error);
    diffusion::NoiseRng rng{11, 0};
    CHECK_THROWS_WITH_AS(tb.evaluate({0, x0, std::span<const float>(context), {}, {}, w}, 300, rng),
                         doctest::Contains("built without them"), gl::Error);
}
