#include "train/run/graphs.h"

#include <algorithm>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"

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
    : GraphSet(std::move(o), shapes, others, true) {}

std::unique_ptr<GraphSet> GraphSet::unplanned(GraphSetOptions o, const std::vector<GraphShape>& shapes,
                                              const std::vector<const gl::Plan*>& others) {
    return std::unique_ptr<GraphSet>(new GraphSet(std::move(o), shapes, others, false));
}

GraphSet::GraphSet(GraphSetOptions o, const std::vector<GraphShape>& shapes, const std::vector<const gl::Plan*>& others,
                   bool plan)
    : o_(std::move(o)), others_(others) {
    GL_CHECK(!shapes.empty(), "graphs: no shapes to plan");
    GL_CHECK(bool(o_.plan_options), "graphs: no plan options");
    // Each bucket's largest batch first: a shorter batch of it borrows its recompute set (fit_build).
    std::vector<GraphShape> order(shapes.begin(), shapes.end());
    std::sort(order.begin(), order.end(), [](const GraphShape& a, const GraphShape& b) {
        if (a.latent_h != b.latent_h || a.latent_w != b.latent_w) return a < b;
        return a.batch > b.batch;
    });
    order.erase(std::unique(order.begin(), order.end()), order.end());
    std::set<int64_t> batches;
    for (const GraphShape& s : order) {
        steps_.push_back({s, nullptr, {}});
        batches.insert(s.batch);
        if (o_.vae_on_device) vae_.push_back({s, nullptr, {}});
    }
    if (o_.text_encoder_on_device && !o_.step.train_text_encoder)
        for (int64_t b : batches) text_.push_back({b, nullptr, {}});
    // Building is most of the cost of a set: every graph at once, on the CPU's threads.
    const size_t ns = steps_.size(), nt = text_.size(), nv = vae_.size();
    gl::parallel_for(int64_t(ns + nt + nv), 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const size_t k = size_t(i);
            if (k < ns) {
                StepOptions so = o_.step;
                so.latent_h = steps_[k].shape.latent_h;
                so.latent_w = steps_[k].shape.latent_w;
                so.batch = steps_[k].shape.batch;
                steps_[k].graph = build_step(so);
            } else if (k < ns + nt) {
                const StepOptions& so = o_.step;
                text_[k - ns].graph = build_text_encoder(*so.config, so.precision, text_[k - ns].batch, so.clip_chunks,
                                                         so.clip_skip, so.text_encoder_format);
            } else {
                Vae& v = vae_[k - ns - nt];
                const int64_t f = o_.vae.downscale();
                v.graph = build_vae_encoder(o_.vae, o_.vae_dtype, v.shape.batch, v.shape.latent_h * f,
                                            v.shape.latent_w * f);
            }
        }
    });
    if (plan) plan_all();
}

void GraphSet::plan_all() {
    const size_t ns = steps_.size(), nt = text_.size(), nv = vae_.size();
    gl::parallel_for(int64_t(ns + nt + nv), 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const size_t k = size_t(i);
            if (k < ns) {
                steps_[k].plan = gl::make_plan(steps_[k].graph->g, o_.plan_options(steps_[k].shape));
            } else {
                gl::PlanOptions po;
                po.cost = o_.plan_options(GraphShape{o_.step.latent_h, o_.step.latent_w, 1}).cost;
                if (k < ns + nt) text_[k - ns].plan = gl::make_plan(text_[k - ns].graph->g, po);
                else vae_[k - ns - nt].plan = gl::make_plan(vae_[k - ns - nt].graph->g, po);
            }
        }
    });
    std::vector<const gl::Plan*> plans;
    for (const Step& s : steps_) plans.push_back(&s.plan);
    for (const Text& t : text_) plans.push_back(&t.plan);
    for (const Vae& v : vae_) plans.push_back(&v.plan);
    plans.insert(plans.end(), others_.begin(), others_.end());
    layout_ = gl::make_shared_layout(plans, o_.rules);
}

gl::FitBuild GraphSet::fit_build(std::shared_ptr<void> owner, const std::map<GraphShape, int64_t>& runs_per_epoch,
                                 double updates) const {
    GL_CHECK(updates > 0, "graphs: an epoch of ", updates, " updates");
    gl::FitBuild b;
    b.owner = std::move(owner);
    const int64_t f = o_.vae.downscale();
    std::map<int64_t, double> batch_runs;  // runs of each batch size per update
    for (size_t i = 0; i < steps_.size(); i++) {
        const GraphShape& s = steps_[i].shape;
        const auto it = runs_per_epoch.find(s);
        const double runs = it == runs_per_epoch.end() ? 0.0 : double(it->second) / updates;
        batch_runs[s.batch] += runs;
        int like = -1;  // the bucket's full batch: built first (the constructor's order)
        for (size_t k = 0; k < i && like < 0; k++)
            if (steps_[k].shape.latent_h == s.latent_h && steps_[k].shape.latent_w == s.latent_w) like = int(k);
        b.graphs.push_back({&steps_[i].graph->g, "step " + s.label(f), true, runs, like});
    }
    for (const Text& t : text_) b.graphs.push_back({&t.graph->g, gl::cat("text encoder batch ", t.batch), false,
                                                    batch_runs[t.batch], -1});
    for (const Vae& v : vae_) {
        const auto it = runs_per_epoch.find(v.shape);
        b.graphs.push_back({&v.graph->g, "VAE encoder " + v.shape.label(f), false,
                            it == runs_per_epoch.end() ? 0.0 : double(it->second) / updates, -1});
    }
    for (const gl::Plan* p : others_) {
        gl::FitGraph g{&p->graph, "sampling", false, 0, -1};
        g.planned = p;
        b.graphs.push_back(g);
    }
    return b;
}

void GraphSet::adopt(std::vector<gl::Plan> plans, gl::SharedLayout layout) {
    const size_t ns = steps_.size(), nt = text_.size(), nv = vae_.size();
    GL_CHECK(plans.size() == ns + nt + nv + others_.size(), "graphs: ", plans.size(), " plans for ",
             ns + nt + nv + others_.size(), " graphs");
    for (size_t k = 0; k < ns; k++) steps_[k].plan = std::move(plans[k]);
    for (size_t k = 0; k < nt; k++) text_[k].plan = std::move(plans[ns + k]);
    for (size_t k = 0; k < nv; k++) vae_[k].plan = std::move(plans[ns + nt + k]);
    layout_ = std::move(layout);
}

GraphSet::Step& GraphSet::add_step(const GraphShape& s) {
    StepOptions so = o_.step;
    so.latent_h = s.latent_h;
    so.latent_w = s.latent_w;
    so.batch = s.batch;
    steps_.push_back({s, build_step(so), {}});
    return steps_.back();
}

size_t GraphSet::step_index(const GraphShape& s) {
    for (size_t i = 0; i < steps_.size(); i++)
        if (steps_[i].shape == s) return i;
    Step& st = add_step(s);
    st.plan = gl::make_plan(st.graph->g, o_.plan_options(s));
    if (o_.text_encoder_on_device && !o_.step.train_text_encoder) text_index(s.batch);
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
        build_text_encoder(*so.config, so.precision, batch, so.clip_chunks, so.clip_skip, so.text_encoder_format);
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
