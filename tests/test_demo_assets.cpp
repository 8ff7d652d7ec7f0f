// The embedded demo's assets (tools/common/demo_assets.h): the model opens with open_sd15 as an
// SD1.5 diffusers folder with the demo's configs, written the same for the same seed; the hand-set
// VAE averages 8x8 pixel blocks and repeats them back; the dataset goes through kohya's folder
// layout, bucketing and the latent and text caches, and a LoRA trains a few steps on it.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "data/bucket.h"
#include "models/sd15/sd_config.h"
#include "data/config.h"
#include "data/dataset.h"
#include "data/latent_cache.h"
#include "data/text_cache.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "models/sd15/model_files.h"
#include "pipelines/cache_encoders.h"
#include "test_util.h"
#include "tools/common/demo_assets.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using gltest::TempDir;
using gltest::slurp;

namespace {



}  // namespace

TEST_CASE("demo assets: the model opens as an SD1.5 diffusers folder, the same bytes for the same seed") {
    TempDir dir;
    const demo::ModelConfig c = demo::model_config();
    demo::write_model(dir.path / "a", c, 7);
    const sd::Sd15Files m = sd::open_sd15((dir.path / "a").string());
    CHECK(m.layout == sd::Sd15Layout::diffusers);
    CHECK(m.tokenizer_path.empty());  // the built-in CLIP tokenizer
    CHECK(m.unet_cfg.block_out == c.unet.block_out);
    CHECK(m.unet_cfg.down == c.unet.down);
    CHECK(m.unet_cfg.up == c.unet.up);
    CHECK(m.unet_cfg.heads == c.unet.heads);
    CHECK(m.unet_cfg.cross_attention_dim == 32);
    CHECK(m.clip_cfg.vocab == 49408);
    CHECK(m.clip_cfg.width == 32);
    CHECK(m.clip_cfg.layers == 2);
    CHECK(m.vae_cfg.block_out == c.vae.block_out);
    CHECK(m.vae_cfg.downscale() == 8);
    CHECK(m.vae_cfg.scaling_factor == 1.0f);

    demo::write_model(dir.path / "b", c, 7);
    demo::write_model(dir.path / "c", c, 8);
    for (const char* f : {"unet/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors",
                          "vae/diffusion_pytorch_model.safetensors", "unet/config.json", "model_index.json"})
        CHECK(slurp(dir.path / "a" / f) == slurp(dir.path / "b" / f));
    CHECK(slurp(dir.path / "a" / "unet/diffusion_pytorch_model.safetensors") !=
          slurp(dir.path / "c" / "unet/diffusion_pytorch_model.safetensors"));
    CHECK(slurp(dir.path / "a" / "vae/diffusion_pytorch_model.safetensors") ==
          slurp(dir.path / "c" / "vae/diffusion_pytorch_model.safetensors"));  // set by hand, not drawn
}

TEST_CASE("demo assets: the hand-set VAE averages 8x8 blocks and repeats them back") {
    TempDir dir;
    const demo::ModelConfig c = demo::model_config();
    demo::write_model(dir.path, c, 1);
    const sd::Sd15Files m = sd::open_sd15(dir.path.string());
    const int64_t B = 2, H = 24, W = 40, h = H / 8, w = W / 8;
    gl::Graph g;
    nn::Weights wts(g, gl::DType::f32);
    const gl::ValueId x = g.input("x", gl::DType::f32, {B, H, W, 3}), z = g.input("z", gl::DType::f32, {B, h, w, 4});
    const sd::VaeEncoded e = sd::vae_encode(wts, m.vae_cfg, x);
    const gl::ValueId img = sd::vae_decode(wts, m.vae_cfg, z);
    g.mark_output(e.moments);
    g.mark_output(img);
    auto rt = gl::make_cpu_runtime(gl::make_plan(g));
    const nn::LoadReport r = sd::load_vae(wts, m.vae_cfg, *m.vae, *rt);
    CHECK(r.missing.empty());
    CHECK(r.unexpected.empty());

    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> xs(size_t(B * H * W * 3)), zs(size_t(B * h * w * 4));
    for (float& v : xs) v = u(rng);
    for (float& v : zs) v = u(rng);
    rt->write_f32(x, xs);
    rt->write_f32(z, zs);
    rt->run();
    const std::vector<float> mo = rt->read_f32(e.moments), out = rt->read_f32(img);
    double worst_enc = 0, worst_dec = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < h; i++)
            for (int64_t j = 0; j < w; j++) {
                const float* mv = &mo[size_t(((b * h + i) * w + j) * 8)];
                for (int64_t k = 0; k < 3; k++) {
                    double avg = 0;
                    for (int64_t y = 0; y < 8; y++)
                        for (int64_t xx = 0; xx < 8; xx++) avg += xs[size_t(((b * H + i * 8 + y) * W + j * 8 + xx) * 3 + k)];
                    worst_enc = std::max(worst_enc, std::fabs(mv[k] - avg / 64));
                }
                CHECK(mv[3] == 0.0f);
                for (int k = 4; k < 8; k++) CHECK(mv[k] == -30.0f);  // log-variance: a point distribution
                for (int64_t y = 0; y < 8; y++)
                    for (int64_t xx = 0; xx < 8; xx++)
                        for (int64_t k = 0; k < 3; k++)
                            worst_dec = std::max(worst_dec, double(std::fabs(out[size_t(((b * H + i * 8 + y) * W + j * 8 + xx) * 3 + k)] -
                                                                        zs[size_t(((b * h + i) * w + j) * 4 + k)])));
            }
    CHECK(worst_enc < 2e-4);
    CHECK(worst_dec < 2e-4);
    CHECK(demo::analytic_vae_weights(m.vae_cfg).size() == r.tensors);
}

TEST_CASE("demo assets: the UNet starts as eps = x_t beside its random features") {
    TempDir dir;
    demo::write_model(dir.path, demo::model_config(), 1);
    const sd::Sd15Files m = sd::open_sd15(dir.path.string());
    const int64_t B = 2, S = 16;
    gl::Graph g;
    nn::Weights w(g, gl::DType::f32);
    const gl::ValueId x = g.input("x", gl::DType::f32, {B, S, S, 4}), t = g.input("t", gl::DType::f32, {B}),
                      ctx = g.input("ctx", gl::DType::f32, {B, 77, m.unet_cfg.cross_attention_dim});
    const gl::ValueId eps = sd::unet_forward(w, m.unet_cfg, x, t, ctx);
    g.mark_output(eps);
    auto rt = gl::make_cpu_runtime(gl::make_plan(g));
    CHECK(sd::load_unet(w, m.unet_cfg, *m.unet, *rt).missing.empty());
    std::mt19937 rng(4);
    std::normal_distribution<float> n;
    std::vector<float> xs(size_t(B * S * S * 4)), cs(size_t(B * 77 * m.unet_cfg.cross_attention_dim));
    for (float& v : xs) v = n(rng);
    for (float& v : cs) v = n(rng);
    rt->write_f32(x, xs);
    rt->write_f32(t, {999.0f, 500.0f});
    rt->write_f32(ctx, cs);
    rt->run();
    const std::vector<float> out = rt->read_f32(eps);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < xs.size(); i++) diff += (out[i] - xs[i]) * (out[i] - xs[i]), norm += xs[i] * xs[i];
    MESSAGE("relative distance of the UNet's output from its input: ", std::sqrt(diff / norm));
    CHECK(std::sqrt(diff / norm) < 0.1);
    CHECK(std::sqrt(diff / norm) > 1e-3);  // the random features are there
}

TEST_CASE("demo assets: the shapes dataset in kohya's layout caches and trains a LoRA") {
    TempDir dir;
    demo::write_model(dir.path / "model", demo::model_config(), 1);
    const demo::DatasetInfo info = demo::write_dataset(dir.path / "dataset", {.repeats = 3, .variants = 1, .side = 128});
    CHECK(info.subset_dir.filename() == "3_shapes");
    REQUIRE(info.images.size() == 12);
    CHECK(info.captions[0] == "a red circle");
    CHECK(info.captions[11] == "a yellow triangle");
    demo::write_prompts(dir.path / "prompts.txt", 128);
    const std::string prompts = slurp(dir.path / "prompts.txt");
    CHECK(prompts.find("a green triangle --w 160 --h 96 --d 3") != std::string::npos);
    CHECK(prompts.find("a yellow circle --w 96 --h 160 --d 4") != std::string::npos);

    std::vector<std::string> warnings;
    const data::ConfigLevel cl = {{"caption_extension", std::string(".txt")}, {"resolution", int64_t(128)},
                                  {"enable_bucket", true},  {"min_bucket_reso", int64_t(64)},
                                  {"max_bucket_reso", int64_t(256)}, {"bucket_reso_steps", int64_t(32)},
                                  {"batch_size", int64_t(2)}};
    const data::Dataset ds = data::build_dataset(data::folder_dataset_config(dir.path / "dataset", std::nullopt, cl, warnings));
    CHECK(warnings.empty());
    REQUIRE(ds.images.size() == 12);
    CHECK(ds.num_train_images == 36);
    CHECK(ds.images[0].caption == "a red circle");
    const data::BucketAssignment a = data::assign_buckets(ds);
    REQUIRE(a.buckets.size() == 3);  // square, wide, tall
    CHECK(a.buckets[0].reso == data::Reso{96, 160});
    CHECK(a.buckets[1].reso == data::Reso{128, 128});
    CHECK(a.buckets[2].reso == data::Reso{160, 96});
    for (const data::Bucket& b : a.buckets) CHECK(b.distinct == 4);

    const models::ModelFiles m = models::sd15_family().open((dir.path / "model").string());
    data::LatentCache cache;
    sd::VaeGraphEncoder vae(m.vae_config(), *m.vae, "demo-vae");
    const data::CacheReport lat = data::cache_latents(ds, a, cache, vae);
    CHECK(lat.encoded == 12);
    sd::TextGraphEncoder clip(m, "demo-clip");
    const data::TextCacheReport txt = data::cache_text_outputs(ds, cache, clip);
    CHECK(txt.encoded == 12);

    // The square bucket's first two images as one batch; latents 16x16, each the 8x8 block means
    // of the image as prepared for training.
    const data::Bucket& sq = a.buckets[1];
    std::vector<float> latents, context;
    for (int k = 0; k < 2; k++) {
        const int i = sq.images[size_t(k)];
        const std::optional<data::Latent> l = cache.get(lat.keys[size_t(i) * 2]);
        REQUIRE(l.has_value());
        REQUIRE(l->height == 16);
        REQUIRE(l->width == 16);
        const data::PreparedImage im = data::prepare_image(ds.images[size_t(i)], a.choice[size_t(i)], false, false);
        std::vector<float> px(im.rgb.size());
        data::to_unit_range(im.rgb, px.data());
        double worst = 0;
        for (int by = 0; by < 16; by++)
            for (int bx = 0; bx < 16; bx++)
                for (int ch = 0; ch < 3; ch++) {
                    double avg = 0;
                    for (int y = 0; y < 8; y++)
                        for (int x = 0; x < 8; x++) avg += px[size_t(((by * 8 + y) * 128 + bx * 8 + x) * 3 + ch)];
                    worst = std::max(worst, std::fabs(l->data[size_t((by * 16 + bx) * 4 + ch)] - avg / 64));
                }
        CHECK(worst < 2e-4);
        latents.insert(latents.end(), l->data.begin(), l->data.end());
        const std::optional<data::Latent> t = cache.get(txt.keys[size_t(i)]);
        REQUIRE(t.has_value());
        context.insert(context.end(), t->data.begin(), t->data.end());
    }

    train::StepOptions o;
    o.config = m.config;
    o.batch = 2;
    o.latent_h = o.latent_w = 16;
    o.precision = train::Precision::fp32;
    o.context_tokens = 77;
    o.lora = lora::LoraConfig{8, 8.0f, 1.0f};
    o.unet_lr = 1e-3f;
    auto s = train::build_step(o);
    auto rt = gl::make_cpu_runtime(gl::make_plan(s->g));
    const nn::LoadReport r = sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, *m.unet, *rt);
    CHECK(r.missing.empty());
    train::Trainer tr(*s, *rt, {});
    tr.init(1);
    std::vector<float> before;
    for (gl::ValueId p : s->net->parameters())
        for (float v : rt->read_f32(p)) before.push_back(v);
    for (int step = 0; step < 3; step++) {
        const train::StepReport rep = tr.step(latents, context);
        CHECK(std::isfinite(rep.loss));
        CHECK(rep.applied);
    }
    std::vector<float> after;
    for (gl::ValueId p : s->net->parameters())
        for (float v : rt->read_f32(p)) after.push_back(v);
    CHECK(after != before);
}
