// Text-encoder output caching (data/text_cache.h) with a stand-in encoder (fake_encoders.h), no
// model: one encoding per distinct final caption, batched, equal to encoding the caption alone,
// keyed by the encoder's identity, reused from disk, refused when captions vary. The SD1.5 CLIP
// under it: test_pipelines_text_cache.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

#include "data/text_cache.h"
#include "fake_encoders.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

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

TEST_CASE("data text cache: each distinct caption encoded once, batched, keyed by the encoder, reused from disk") {
    const fs::path dir = fs::temp_directory_path() / ("gl_textcache_fake_" + std::to_string(getpid()));
    cachetest::FakeTextEncoder enc("fake");
    const data::Dataset ds = dataset_with({"a dog", "a cat", "a dog", "sky", "a cat"}, "photo,");
    {
        data::LatentCache cache(dir);
        const data::TextCacheReport r = data::cache_text_outputs(ds, cache, enc, 2);
        CHECK(r.captions == 3);
        CHECK(r.encoded == 3);
        CHECK(r.encoder_calls == 2);
        CHECK(enc.batches == std::vector<int>{2, 1});
        CHECK(r.keys[0] == r.keys[2]);
        CHECK(r.keys[0] != r.keys[1]);
        // The batched entry is the caption's own encoding, prefix applied.
        const data::Latent l = *cache.get(r.keys[1]);
        CHECK(l.height == 3);
        CHECK(l.width == 2);
        CHECK(l.channels == 1);
        CHECK(l.data == enc.encode({"photo, a cat"}));
    }
    data::LatentCache again(dir);
    const data::TextCacheReport r2 = data::cache_text_outputs(ds, again, enc, 2);
    CHECK(r2.hits == 3);
    CHECK(r2.encoder_calls == 0);
    cachetest::FakeTextEncoder other("another fake");
    const data::TextCacheReport r3 = data::cache_text_outputs(ds, again, other, 2);
    CHECK(r3.encoded == 3);  // another identity shares nothing
    CHECK(r3.keys[1] != r2.keys[1]);
    fs::remove_all(dir);

    data::Dataset shuffled = ds;
    shuffled.config.subsets[0].caption.shuffle_caption = true;
    CHECK(gltest::error_of([&] { data::cache_text_outputs(shuffled, again, enc); })
              .find("its captions change from step to step") != std::string::npos);
    for (auto change : {+[](data::CaptionOptions& o) { o.enable_wildcard = true; },
                        +[](data::CaptionOptions& o) { o.token_warmup_step = 0.5; }}) {
        data::Dataset drawn = ds;
        change(drawn.config.subsets[0].caption);
        CHECK(gltest::error_of([&] { data::cache_text_outputs(drawn, again, enc); })
                  .find("(shuffled, dropped, wildcards or token warm-up)") != std::string::npos);
    }
}
