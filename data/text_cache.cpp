#include "data/text_cache.h"

#include <future>
#include <map>
#include <memory>
#include <set>

#include "data/workers.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/sha256.h"

namespace data {

TextCacheReport cache_text_outputs(const Dataset& ds, LatentCache& cache, TextEncoder& enc, int batch_size) {
    GL_CHECK(batch_size >= 1, "text encoder batch size must be >= 1");
    for (const SubsetConfig& s : ds.config.subsets)
        GL_CHECK(!s.caption.varies(), "text-encoder outputs cannot be cached for ", s.label(),
                 ": its captions change from step to step (shuffled, dropped, wildcards or token warm-up)");
    TextCacheReport rep;
    rep.keys.resize(ds.images.size());
    std::map<std::string, std::string> todo;  // key -> caption of the misses
    std::set<std::string> seen;
    for (size_t i = 0; i < ds.images.size(); i++) {
        const ImageEntry& e = ds.images[i];
        Rng unused(0);  // captions that do not vary draw nothing
        const std::string caption = process_caption(ds.config.subsets[size_t(e.subset)].caption, e.caption, 1, unused);
        const std::string key =
            gl::io::sha256_hex(gl::cat("text v1|", enc.identity(), "|", caption));
        rep.keys[i] = key;
        if (!seen.insert(key).second) continue;  // each distinct caption once
        rep.captions++;
        if (cache.get(key)) rep.hits++;
        else todo[key] = caption;
    }
    std::vector<std::pair<std::string, std::string>> list(todo.begin(), todo.end());
    // Entries are written (an fsync each on disk) by workers while the encoder runs the next batch.
    std::vector<std::future<void>> writes;
    Workers pool(default_worker_threads());
    for (size_t at = 0; at < list.size(); at += size_t(batch_size)) {
        const size_t n = std::min(list.size() - at, size_t(batch_size));
        std::vector<std::string> captions;
        for (size_t k = 0; k < n; k++) captions.push_back(list[at + k].second);
        auto h = std::make_shared<const std::vector<float>>(enc.encode(captions));
        rep.encoder_calls++;
        const int tokens = enc.tokens(), width = enc.width();
        const size_t per = size_t(tokens) * size_t(width);
        GL_CHECK(h->size() == per * n, "text encoder returned ", h->size(), " values, expected ", per * n);
        for (size_t k = 0; k < n; k++) {
            writes.push_back(pool.submit([&cache, h, key = list[at + k].first, tokens, width, at = k * per, per] {
                cache.put(key, Latent{tokens, width, 1, std::vector<float>(h->begin() + long(at), h->begin() + long(at + per))});
            }));
            rep.encoded++;
        }
    }
    for (std::future<void>& w : writes) w.get();
    return rep;
}

}  // namespace data
