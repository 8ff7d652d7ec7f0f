// The graphs of a run and their memory, planned before anything is loaded: one training step per
// (bucket, micro-batch size) that the epochs hold, the frozen text encoder per batch size when its
// outputs are computed on the device each step, the VAE encoder per (bucket, batch size) when the
// latents are not cached; all of them on one gl::SharedLayout (weights, LoRA, optimizer state once;
// one activation arena for the largest graph), so the whole run's device memory is known exactly
// before the first weight is read. Graphs are built (and planned) in parallel. Auto-fit builds a
// set unplanned, fits the whole of it (fit_build) and hands it the plans it fitted (adopt), so the
// run holds exactly what was fitted. A batch size that was not planned (images that failed to load
// shortened a batch) is planned when it comes and runs in the same memory.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/shared_memory.h"
#include "models/sd15/vae.h"
#include "train/step.h"

namespace train {

// A (latent height, latent width, batch) shape.
struct GraphShape {
    int64_t latent_h = 0, latent_w = 0, batch = 0;
    auto operator<=>(const GraphShape&) const = default;
    std::string label(int64_t downscale) const;  // "512x768 batch 2" (pixels)
};

// The VAE encoder as its own graph: x [B, H, W, 3] in [-1, 1] -> moments [B, h, w, 2 * latent].
struct VaeEncoderGraph {
    gl::Graph g;
    std::unique_ptr<nn::Weights> weights;
    gl::ValueId x = gl::kNoValue, moments = gl::kNoValue;
};
std::unique_ptr<VaeEncoderGraph> build_vae_encoder(const sd::VaeConfig& c, gl::DType dtype, int64_t batch,
                                                   int64_t height, int64_t width);

struct GraphSetOptions {
    StepOptions step;            // the configuration; latent sides and batch vary per graph
    bool text_encoder_on_device = false;  // frozen text encoder run each step (not cached)
    bool vae_on_device = false;  // latents encoded each step (not cached)
    sd::VaeConfig vae;
    gl::DType vae_dtype = gl::DType::f32;
    gl::LayoutRules rules;       // the backend's bytes beside the plans (gl::layout_rules("cuda"), ...)
    // How each step graph is planned (recompute policy and budget), by its shape's bucket.
    std::function<gl::PlanOptions(const GraphShape&)> plan_options;
};

class GraphSet {
public:
    struct Step {
        GraphShape shape;
        std::unique_ptr<StepGraph> graph;
        gl::Plan plan;
    };
    struct Text {
        int64_t batch = 0;
        std::unique_ptr<TextEncoderGraph> graph;
        gl::Plan plan;
    };
    struct Vae {
        GraphShape shape;  // latent sides
        std::unique_ptr<VaeEncoderGraph> graph;
        gl::Plan plan;
    };

    // Builds and plans every graph the shapes need; the layout is made from all of them and
    // `others` (the sampler's graphs, planned by their owner, which must outlive nothing here).
    GraphSet(GraphSetOptions o, const std::vector<GraphShape>& shapes, const std::vector<const gl::Plan*>& others = {});
    // The graphs only (no plan, no layout): for auto-fit. o.plan_options is used for shapes planned
    // later (step_index of a shape not given).
    static std::unique_ptr<GraphSet> unplanned(GraphSetOptions o, const std::vector<GraphShape>& shapes,
                                               const std::vector<const gl::Plan*>& others = {});

    // Every graph of the run for gl::auto_fit, in the order adopt() takes their plans: the steps
    // (recomputable; a bucket's shorter last batch like its full one), the text and VAE encoders,
    // then `others` (as planned). Weights per graph: its runs per optimizer update over an epoch
    // (`runs_per_epoch` of each step shape: how many batches of it an epoch holds; `updates`: the
    // epoch's optimizer updates). owner: what keeps this set alive.
    gl::FitBuild fit_build(std::shared_ptr<void> owner, const std::map<GraphShape, int64_t>& runs_per_epoch,
                           double updates) const;
    // The plans auto-fit chose (one per fit_build graph; others' are dropped: their owner holds
    // them) and their layout.
    void adopt(std::vector<gl::Plan> plans, gl::SharedLayout layout);

    const GraphSetOptions& options() const { return o_; }
    const gl::SharedLayout& layout() const { return layout_; }
    std::vector<Step>& steps() { return steps_; }
    const std::vector<Step>& steps() const { return steps_; }
    const std::vector<Text>& text() const { return text_; }
    const std::vector<Vae>& vae() const { return vae_; }
    // The graph of a shape, planned now when it was not (it must fit the layout: checked when its
    // runtime binds to the memory). Returns its index in steps() / text() / vae().
    size_t step_index(const GraphShape& s);
    size_t text_index(int64_t batch);
    size_t vae_index(const GraphShape& s);
    // The step graph whose activation arena is the largest (what the layout's activations are).
    size_t largest_step() const;

private:
    GraphSet(GraphSetOptions o, const std::vector<GraphShape>& shapes, const std::vector<const gl::Plan*>& others,
             bool plan);
    void plan_all();
    Step& add_step(const GraphShape& s);  // built, not planned

    GraphSetOptions o_;
    std::vector<const gl::Plan*> others_;
    std::vector<Step> steps_;
    std::vector<Text> text_;
    std::vector<Vae> vae_;
    gl::SharedLayout layout_;
};

}  // namespace train
