// TextGraphEncoder: the model family's text encoder graph, one per batch size.
#include "pipelines/cache_encoders.h"

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "models/sd15/tokenizer.h"

namespace sd {

struct TextGraphEncoder::Shape {
    int batch;
    gl::Graph g;
    std::unique_ptr<nn::Weights> w;
    gl::ValueId ids, hidden;
    std::unique_ptr<gl::Runtime> rt;
};

TextGraphEncoder::TextGraphEncoder(const models::ModelFiles& model, std::string identity, int clip_skip, int n_chunks,
                                   gl::DType dtype, gl::Backend backend, Tokenize tokenize)
    : model_(model), identity_(std::move(identity)), clip_skip_(clip_skip), n_chunks_(n_chunks), dtype_(dtype),
      backend_(backend), tokenize_(std::move(tokenize)) {
    const models::TokenLayout& tl = model_.fam().tokens();
    GL_CHECK(model_.text_encoder != nullptr, "text encoder: the model has no text encoder weights");
    GL_CHECK(n_chunks >= 1 && n_chunks <= tl.max_sequences, "text encoder: 1 to ", tl.max_sequences, " chunks of ",
             tl.content, " tokens, got ", n_chunks);
    GL_CHECK(clip_skip >= 1 && clip_skip <= model_.cfg().text_layers(), "text encoder: clip_skip ", clip_skip,
             " out of range");
    if (!tokenize_) {
        const int max_tokens = tl.content * n_chunks;
        std::shared_ptr<const ClipTokenizer> tok = model_.tokenizer;
        tokenize_ = [max_tokens, tok](const std::string& s) {
            return (tok ? *tok : ClipTokenizer::builtin()).encode_chunks(s, max_tokens);
        };
    }
}
TextGraphEncoder::~TextGraphEncoder() = default;

void TextGraphEncoder::set_weighted(WeightedTokenize tokenize) { weighted_ = std::move(tokenize); }

std::string TextGraphEncoder::identity() const {
    return gl::cat(identity_, "|clip_skip ", clip_skip_, "|chunks ", n_chunks_, weighted_ ? "|weighted" : "");
}

void TextGraphEncoder::release() { current_.reset(); }

std::vector<float> TextGraphEncoder::encode(const std::vector<std::string>& captions) {
    const int b = int(captions.size());
    GL_CHECK(b >= 1, "text encoder: no captions");
    if (!current_ || current_->batch != b) {
        current_.reset();
        auto s = std::make_unique<Shape>();
        s->batch = b;
        s->w = std::make_unique<nn::Weights>(s->g, dtype_);
        const models::Family& f = model_.fam();
        s->ids = s->g.input("ids", gl::DType::i32, {int64_t(b) * n_chunks_, f.tokens().sequence});
        s->hidden = f.text_context(*s->w, s->g, s->ids, n_chunks_, model_.cfg(), clip_skip_);
        s->g.mark_output(s->hidden);
        s->rt = gl::make_runtime(gl::make_plan(s->g), backend_);
        f.load(models::Part::text_encoder, *s->w, model_, *s->rt);
        current_ = std::move(s);
    }
    std::vector<int32_t> ids;
    std::vector<float> weights;
    for (const std::string& c : captions) {
        std::vector<int32_t> one;
        if (weighted_) {
            WeightedIds w = weighted_(c);
            GL_CHECK(w.weights.size() == size_t(tokens()), "text encoder: ", w.weights.size(),
                     " token weights, not ", tokens());
            one = std::move(w.ids);
            weights.insert(weights.end(), w.weights.begin(), w.weights.end());
        } else {
            one = tokenize_(c);
        }
        const size_t want = size_t(model_.fam().tokens().ids(n_chunks_));
        GL_CHECK(one.size() == want, "text encoder: the tokenizer gave ", one.size(), " ids, not ", want);
        ids.insert(ids.end(), one.begin(), one.end());
    }
    current_->rt->write(current_->ids, ids.data(), gl::DType::i32);
    current_->rt->run();
    std::vector<float> out = current_->rt->read_f32(current_->hidden);
    if (weighted_) apply_token_weights(out, weights, b, tokens(), width());
    return out;
}

}  // namespace sd
