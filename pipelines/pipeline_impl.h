// The pipeline's internals, shared by pipeline.cpp (models, LoRA, memory, text, denoising) and
// pipeline_output.cpp (VAE decode, tiling, images, infotext). Not part of the public API.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/shared_memory.h"
#include "ggml-lite/io/tensor_source.h"
#include "lora/lora.h"
#include "pipelines/pipeline.h"

namespace sd {

// A graph's inputs and output, as a model builder returns them.
struct BuiltGraph {
    std::vector<gl::ValueId> in;
    gl::ValueId out = gl::kNoValue;
};
using GraphBuilder = std::function<BuiltGraph(nn::Weights&, gl::Graph&)>;

// A memory layout over the budget, thrown by Impl::ensure before anything is allocated; the
// requests' callers (reserve, generate) turn it into a refusal naming the sizes that fit.
class OverBudget : public gl::Error {
public:
    OverBudget(size_t need_bytes, Pipeline::Budget b);
    size_t need = 0;
    Pipeline::Budget budget;
};

// The pipeline's memory budget on a backend ("cpu" or "cuda"): Pipeline::memory_budget().
Pipeline::Budget memory_budget_of(const PipelineOptions& o, const std::string& backend);

struct LoraSource {
    std::shared_ptr<gl::io::TensorSource> file;
    lora::LoraConfig cfg;
    bool unet = false, text_encoder = false;  // parts the file holds modules for
};

// One model's weight holder: its graph at a minimal shape, planned with every weight (and, with
// LoRA, every LoRA parameter) in it, whose runtime loads them into the shared memory.
// PipelineHolder::net_file of the trained LoRA (PipelineOptions::trained_lora): no file.
inline constexpr size_t kTrainedLora = size_t(-1);

struct PipelineHolder {
    std::string key;  // its plan's key
    lora::Part part = lora::Part::unet;
    bool takes_lora = false;  // the VAE takes none
    gl::WeightFormat format = gl::WeightFormat::dense;  // of its matrices
    std::unique_ptr<gl::Graph> graph;  // its nn::Weights refer to it
    std::unique_ptr<nn::Weights> weights;
    std::vector<std::unique_ptr<lora::LoraNetwork>> nets;  // one per LoRA file holding this part
    std::vector<size_t> net_file;                          // the file of each net (kTrainedLora: none)
};

struct Pipeline::Impl {
    std::string backend;
    gl::DType dtype = gl::DType::bf16;
    bool runtime_lora = false;  // LoRA branches in every graph (else merged, or no LoRA)
    std::vector<LoraSource> loras;
    PipelineHolder text, unet, vae;

    struct Planned {
        gl::Plan plan;
        BuiltGraph io;
    };
    std::map<std::string, Planned> plans;  // every shape planned so far (the memory's layout is made of them)
    std::shared_ptr<gl::SharedMemory> mem;  // nullptr until the first run needs it
    struct Instance {
        std::unique_ptr<gl::Runtime> rt;
        BuiltGraph io;
    };
    std::map<std::string, Instance> runtimes;  // on mem, by plan key
    std::map<std::string, size_t> decode_bytes;  // planned activations of VAE decode shapes
    bool external_memory = false;  // use_memory(): the caller's, never laid out again
    std::optional<lora::LoraConfig> trained;  // PipelineOptions::trained_lora, dropouts off
    bool trained_unet = false, trained_text_encoder = false;
    bool profiling = false;  // Pipeline::set_profiling: every runtime made profiles too

    // Builds a graph of m's model with `build` (LoRA networks attached when they run as branches)
    // and plans it; plan() also keeps it under `key` (so the memory's layout includes it).
    Planned plan_graph(const PipelineHolder& m, const GraphBuilder& build) const;
    const Planned& plan(const PipelineHolder& m, const std::string& key, const GraphBuilder& build);
    // The holder's graph: built once, kept with its Weights and networks.
    void build_holder(PipelineHolder& m, const std::string& key, const GraphBuilder& build);
    // Installs the LoRA networks of m's part on w (hooks chained, one network per file).
    std::vector<std::unique_ptr<lora::LoraNetwork>> attach_loras(const PipelineHolder& m, nn::Weights& w,
                                                                 std::vector<size_t>* files = nullptr) const;

    // Makes sure the memory holds every plan of `keys` (planned before): allocates it (from all
    // plans so far) when there is none or one does not fit, then loads the weights and LoRA files.
    // Throws OverBudget, before allocating, when that layout is over memory_budget_of(o).
    void ensure(const models::ModelFiles& f, const PipelineOptions& o, const std::vector<std::string>& keys);
    // The runtime of a planned key on the memory (ensure() first).
    Instance& runtime(const std::string& key);

    GraphBuilder text_builder(const models::ModelFiles& f, int n, int chunks, int clip_skip) const;
    GraphBuilder unet_builder(const models::ModelFiles& f, int batch, int h, int w, int context_len) const;
    GraphBuilder vae_builder(const models::ModelFiles& f, int batch, int h, int w) const;
    static std::string text_key(int n, int chunks);
    static std::string unet_key(int batch, int h, int w, int context_len);
    static std::string vae_key(int batch, int h, int w);

    // Loads the weights of the parts named (every part when the pipeline owns its memory).
    void load(const models::ModelFiles& f, const PipelineOptions& o, Pipeline::LoadParts parts = {});
};

}  // namespace sd
