// The pipeline's internals, shared by pipeline.cpp (models, LoRA, text, denoising) and
// pipeline_output.cpp (VAE decode, tiling, images, infotext). Not part of the public API.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/io/tensor_source.h"
#include "lora/lora.h"
#include "models/sd15/pipeline.h"

namespace sd {

// One model: the holder of its weights (and LoRA parameters), built at a minimal shape, planned,
// allocated and loaded but never run; and the graphs of the shapes in use, whose runtimes share
// the holder's arenas.
struct PipelineModel {
    lora::Part part = lora::Part::unet;  // which LoRA modules it takes (the VAE takes none)
    bool takes_lora = false;
    std::unique_ptr<gl::Graph> graph;  // the holder's graph (its Weights refer to it)
    std::unique_ptr<Weights> weights;
    std::vector<std::unique_ptr<lora::LoraNetwork>> nets;
    std::unique_ptr<gl::Runtime> rt;

    struct Instance {
        std::unique_ptr<gl::Runtime> rt;
        std::vector<gl::ValueId> in;
        gl::ValueId out = gl::kNoValue;
        uint64_t last_use = 0;
    };
    std::map<std::string, Instance> instances;  // by shape key
};

// A graph's inputs and output, as a model builder returns them.
struct BuiltGraph {
    std::vector<gl::ValueId> in;
    gl::ValueId out = gl::kNoValue;
};
using GraphBuilder = std::function<BuiltGraph(Weights&, gl::Graph&)>;

struct LoraSource {
    std::unique_ptr<gl::io::TensorSource> file;
    lora::LoraConfig cfg;
    bool unet = false, text_encoder = false;  // parts the file holds modules for
};

struct Pipeline::Impl {
    RuntimeFactory make_runtime;
    gl::DType dtype = gl::DType::bf16;
    bool runtime_lora = false;  // LoRA branches in every graph (else merged, or no LoRA)
    std::vector<LoraSource> loras;
    PipelineModel text, unet, vae;
    uint64_t clock = 0;  // instance use counter (least recently used goes first)
    std::map<std::string, size_t> decode_bytes;  // planned activations of VAE decode shapes

    // Installs the LoRA networks of `part` on w (hooks chained, one network per file).
    std::vector<std::unique_ptr<lora::LoraNetwork>> attach_loras(PipelineModel& m, Weights& w) const;
    // Builds the holder of m: graph, plan, runtime; the networks attached when m takes LoRA.
    void build_holder(PipelineModel& m, const GraphBuilder& build);
    // The runtime of one shape of m (built on first use, least recently used dropped beyond 4).
    PipelineModel::Instance& instance(PipelineModel& m, const std::string& key, const GraphBuilder& build);
    // The plan of one shape without a runtime (for reports and decisions).
    gl::Plan plan_only(PipelineModel& m, const GraphBuilder& build) const;

    GraphBuilder text_builder(const Sd15Files& f, int n, int chunks, int clip_skip) const;
    GraphBuilder unet_builder(const Sd15Files& f, int batch, int h, int w, int context_len) const;
    GraphBuilder vae_builder(const Sd15Files& f, int batch, int h, int w) const;
};

}  // namespace sd
