#include "train/run/graphs.h"

#include <algorithm>
#include <set>

#include "ggml-lite/core/error.h"

namespace train {

std::string GraphShape::label(int64_t downscale) const {
    return gl::cat(latent_w * downscale, "x", latent_h * downscale, " batch ", batch);
}

std::unique_ptr<VaeEncoderGraph> build_vae_encoder(const sd::VaeConfig& c, gl::DType dtype, int64_t batch,
                                                   int64_t height, int64_t width) {
    GL_CHECK(batch >= 1 && height >= 1 && width >= 1, "VAE encoder graph: batch and size must be positive");
    auto v = std::make_unique<VaeEncoderGraph>();
    v->weights = std::make_unique<nn::Weights>(v->g, dtype);
    v->x = v->g.input("vae.x", gl::DType::f32, {batch, height, width, c.in_channels});
    v->moments = sd::vae_encode(*v->weights, c, v->x).moments;
    v->g.mark_output(v->moments);
    return v;
}

GraphSet::GraphSet(GraphSetOptions o, const std::vector<GraphShape>& shapes, const std::vector<const gl::Plan*>& others)
    : o_(std::move(o)) {
    GL_CHECK(!shapes.empty(), "graphs: no shapes to plan");
    GL_CHECK(bool(o_.plan_options), "graphs: no plan options");
    for (const GraphShape& s : std::set<GraphShape>(shapes.begin(), shapes.end())) step_index(s);
    std::vector<const gl::Plan*> plans;
    for (const Step& s : steps_) plans.push_back(&s.plan);
    for (const Text& t : text_) plans.push_back(&t.plan);
    for (const Vae& v : vae_) plans.push_back(&v.plan);
    plans.insert(plans.end(), others.begin(), others.end());
    layout_ = gl::make_shared_layout(plans, o_.backend);
}

size_t GraphSet::step_index(const GraphShape& s) {
    for (size_t i = 0; i < steps_.size(); i++)
        if (steps_[i].shape == s) return i;
    StepOptions so = o_.step;
    so.latent_h = s.latent_h;
    so.latent_w = s.latent_w;
    so.batch = s.batch;
    Step st;
    st.shape = s;
    st.graph = build_step(so);
    st.plan = gl::make_plan(st.graph->g, o_.plan_options(s));
    steps_.push_back(std::move(st));
    if (o_.text_encoder_on_device && !so.train_text_encoder) text_index(s.batch);
    if (o_.vae_on_device) vae_index(s);
    return steps_.size() - 1;
}

size_t GraphSet::text_index(int64_t batch) {
    for (size_t i = 0; i < text_.size(); i++)
        if (text_[i].batch == batch) return i;
    const StepOptions& so = o_.step;
    Text t;
    t.batch = batch;
    t.graph =
        build_text_encoder(so.clip, so.precision, batch, so.clip_chunks, so.clip_skip, so.text_encoder_format);
    gl::PlanOptions po;
    po.cost = o_.plan_options(GraphShape{so.latent_h, so.latent_w, batch}).cost;
    t.plan = gl::make_plan(t.graph->g, po);
    text_.push_back(std::move(t));
    return text_.size() - 1;
}

size_t GraphSet::vae_index(const GraphShape& s) {
    for (size_t i = 0; i < vae_.size(); i++)
        if (vae_[i].shape == s) return i;
    const int64_t f = o_.vae.downscale();
    Vae v;
    v.shape = s;
    v.graph = build_vae_encoder(o_.vae, o_.vae_dtype, s.batch, s.latent_h * f, s.latent_w * f);
    gl::PlanOptions po;
    po.cost = o_.plan_options(s).cost;
    v.plan = gl::make_plan(v.graph->g, po);
    vae_.push_back(std::move(v));
    return vae_.size() - 1;
}

size_t GraphSet::largest_step() const {
    size_t best = 0;
    for (size_t i = 1; i < steps_.size(); i++)
        if (steps_[i].plan.arena_bytes[size_t(gl::Category::activations)] >
            steps_[best].plan.arena_bytes[size_t(gl::Category::activations)])
            best = i;
    return best;
}

}  // namespace train
