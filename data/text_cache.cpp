#include "data/text_cache.h"

#include <future>
#include <map>
#include <memory>
#include <set>

#include "data/workers.h"

#include "ggml-lite/io/sha256.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "models/sd15/tokenizer.h"

namespace data {

struct ClipGraphEncoder::Shape {
    int batch;
    gl::Graph g;
    std::unique_ptr<sd::Weights> w;
    gl::ValueId ids, hidden;
    std::unique_ptr<gl::Runtime> rt;
};

ClipGraphEncoder::ClipGraphEncoder(sd::ClipConfig config, const gl::io::TensorSource& weights, std::string identity,
                                   int clip_skip, int n_chunks, gl::DType dtype,
                                   gl::Backend backend, Tokenize tokenize)
    : config_(config), weights_(weights), identity_(std::move(identity)), clip_skip_(clip_skip),
      n_chunks_(n_chunks), dtype_(dtype), backend_(backend), tokenize_(std::move(tokenize)) {
    GL_CHECK(n_chunks >= 1 && n_chunks <= 3, "text encoder: 1 to 3 chunks of 75 tokens, got ", n_chunks);
    GL_CHECK(clip_skip >= 1 && clip_skip <= config.layers, "text encoder: clip_skip ", clip_skip, " out of range");
    if (!tokenize_) {
        const int max_tokens = 75 * n_chunks;
        tokenize_ = [max_tokens](const std::string& s) {
            return sd::ClipTokenizer::builtin().encode_chunks(s, max_tokens);
        };
    }
}
ClipGraphEncoder::~ClipGraphEncoder() = default;

std::string ClipGraphEncoder::identity() const {
    return gl::cat(identity_, "|clip_skip ", clip_skip_, "|chunks ", n_chunks_);
}

void ClipGraphEncoder::release() { current_.reset(); }

std::vector<float> ClipGraphEncoder::encode(const std::vector<std::string>& captions) {
    const int b = int(captions.size());
    GL_CHECK(b >= 1, "text encoder: no captions");
    if (!current_ || current_->batch != b) {
        current_.reset();
        auto s = std::make_unique<Shape>();
        s->batch = b;
        s->w = std::make_unique<sd::Weights>(s->g, dtype_);
        s->ids = s->g.input("ids", gl::DType::i32, {int64_t(b) * n_chunks_, 77});
        s->hidden = sd::build_clip_chunked(*s->w, s->g, s->ids, n_chunks_, config_, clip_skip_);
        s->g.mark_output(s->hidden);
        s->rt = gl::make_runtime(gl::make_plan(s->g), backend_);
        sd::load_clip(*s->w, weights_, *s->rt);
        current_ = std::move(s);
    }
    std::vector<int32_t> ids;
    for (const std::string& c : captions) {
        const std::vector<int32_t> one = tokenize_(c);
        GL_CHECK(one.size() == size_t(77) * n_chunks_, "text encoder: the tokenizer gave ", one.size(), " ids, not ",
                 77 * n_chunks_);
        ids.insert(ids.end(), one.begin(), one.end());
    }
    current_->rt->write(current_->ids, ids.data(), gl::DType::i32);
    current_->rt->run();
    return current_->rt->read_f32(current_->hidden);
}

TextCacheReport cache_text_outputs(const Dataset& ds, LatentCache& cache, TextEncoder& enc, int batch_size) {
    GL_CHECK(batch_size >= 1, "text encoder batch size must be >= 1");
    for (const SubsetConfig& s : ds.config.subsets)
        GL_CHECK(!s.caption.varies(), "text-encoder outputs cannot be cached for ", s.image_dir.string(),
                 ": its captions are shuffled or dropped");
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
