// The SD1.5 CLIP text encoder (pipelines/cache_encoders.h) under the text-encoder output cache,
// with the tiny CLIP golden weights on the CPU: one encoding per distinct final caption, batched,
// equal to encoding the caption alone, reused from disk, refused when captions vary. The cache's
// own logic with a stand-in encoder: test_data_text_cache.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

#include "data/text_cache.h"
#include "model_fixtures.h"
#include "ggml-lite/io/safetensors.h"
#include "models/sd15/tokenizer.h"
#include "pipelines/cache_encoders.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::string golden(const std::string& rel) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/" + rel;
}

// The tiny CLIP has 1000 tokens: fold the real tokenizer's ids into them.
std::vector<int32_t> tiny_ids(const std::string& s) {
    std::vector<int32_t> ids = sd::ClipTokenizer::builtin().encode(s);
    for (int32_t& i : ids) i %= 1000;
    return ids;
}

data::Dataset dataset_with(const std::vector<std::string>& captions, const std::string& prefix) {
    data::Dataset ds;
    data::SubsetConfig s;
    s.caption.caption_prefix = prefix;
    ds.config.subsets.push_back(s);
    for (const std::string& c : captions) {
        data::ImageEntry e;
        e.caption = c;
        ds.images.push_back(e);
    }
    return ds;
}

}  // namespace

TEST_CASE("pipelines text cache: each distinct caption encoded once, batched, reused from disk") {
    const fs::path dir = fs::temp_directory_path() / ("gl_textcache_" + std::to_string(getpid()));
    gl::io::SafetensorsFile weights(golden("clip/clip_tiny.safetensors"));
    sd::TextGraphEncoder enc(gltest::text_encoder_model(sd::ClipConfig::tiny(), weights), "tiny-clip", 1, 1,
                             gl::DType::f32, gl::Backend::cpu, tiny_ids);
    const data::Dataset ds = dataset_with({"a dog", "a cat", "a dog", "sky", "a cat"}, "photo,");
    {
        data::LatentCache cache(dir);
        const data::TextCacheReport r = data::cache_text_outputs(ds, cache, enc, 2);
        CHECK(r.captions == 3);
        CHECK(r.encoded == 3);
        CHECK(r.encoder_calls == 2);
        CHECK(r.keys[0] == r.keys[2]);
        CHECK(r.keys[0] != r.keys[1]);
        // The batched entry equals the caption encoded alone, prefix applied.
        const std::vector<float> alone = enc.encode({"photo, a cat"});
        const data::Latent l = *cache.get(r.keys[1]);
        CHECK(l.height == 77);
        CHECK(l.width == 32);
        REQUIRE(alone.size() == l.data.size());
        double worst = 0;
        for (size_t i = 0; i < alone.size(); i++) worst = std::max(worst, double(std::fabs(alone[i] - l.data[i])));
        CHECK(worst < 1e-5);
    }
    data::LatentCache again(dir);
    const data::TextCacheReport r2 = data::cache_text_outputs(ds, again, enc, 2);
    CHECK(r2.hits == 3);
    CHECK(r2.encoder_calls == 0);
    fs::remove_all(dir);

    data::Dataset shuffled = ds;
    shuffled.config.subsets[0].caption.shuffle_caption = true;
    CHECK(gltest::error_of([&] { data::cache_text_outputs(shuffled, again, enc); })
              .find("its captions change from step to step") != std::string::npos);
}
