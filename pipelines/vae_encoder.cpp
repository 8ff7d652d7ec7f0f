// VaeGraphEncoder: the VAE encoder's graphs, one per input shape, on one shared memory.
#include "pipelines/cache_encoders.h"

#include <chrono>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/shared_memory.h"

namespace sd {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

struct VaeGraphEncoder::Planned {
    gl::Graph g;
    std::unique_ptr<nn::Weights> w;
    gl::ValueId x = 0, moments = 0;
    std::unique_ptr<gl::Plan> plan;
    std::unique_ptr<gl::Runtime> rt;  // on mem_, made on first use
};

VaeGraphEncoder::VaeGraphEncoder(VaeConfig config, const gl::io::TensorSource& weights, std::string identity,
                                 gl::DType dtype, gl::Backend backend)
    : config_(std::move(config)), weights_(weights), identity_(std::move(identity)), dtype_(dtype),
      backend_(gl::resolve_backend(backend)) {
    config_.validate();
    GL_CHECK(dtype_ == gl::DType::f32 || dtype_ == gl::DType::bf16 || dtype_ == gl::DType::f16,
             "VAE encoder: weights in f32, bf16 or f16, not ", gl::dtype_name(dtype_));
}
VaeGraphEncoder::~VaeGraphEncoder() = default;

data::LatentSpec VaeGraphEncoder::latent_spec() const {
    return {config_.latent_channels, int(config_.downscale()), config_.scaling_factor, 0.0f};
}

void VaeGraphEncoder::release() {
    shapes_.clear();  // the runtimes first: they hold the memory
    mem_.reset();
}

VaeGraphEncoder::Planned& VaeGraphEncoder::planned(const data::EncoderShape& s) {
    const int64_t f = config_.downscale();
    GL_CHECK(s.batch > 0 && s.height > 0 && s.width > 0 && s.height % f == 0 && s.width % f == 0,
             "VAE encoder: input ", s.batch, "x", s.height, "x", s.width, " must be positive multiples of ", f);
    std::unique_ptr<Planned>& p = shapes_[s];
    if (!p) {
        auto n = std::make_unique<Planned>();
        n->w = std::make_unique<nn::Weights>(n->g, dtype_);
        n->x = n->g.input("x", dtype_, {s.batch, s.height, s.width, config_.in_channels});
        n->moments = vae_encode(*n->w, config_, n->x).moments;
        n->g.mark_output(n->moments);
        n->plan = std::make_unique<gl::Plan>(gl::make_plan(n->g));
        p = std::move(n);
        graphs_built_++;
    }
    return *p;
}

bool VaeGraphEncoder::fits(const Planned& p) const {
    if (!mem_) return false;
    const gl::SharedLayout& L = mem_->layout();
    const size_t act = size_t(gl::Category::activations);
    return p.plan->arena_bytes[act] <= L.arena_bytes[act] &&
           (backend_ != gl::Backend::cuda || gl::cuda_workspace_bytes(p.plan->graph) <= L.scratch_bytes);
}

void VaeGraphEncoder::lay_out() {
    // The old memory goes first: never two copies of the weights at once.
    for (auto& [s, p] : shapes_) p->rt.reset();
    mem_.reset();
    std::vector<const gl::Plan*> plans;
    for (const auto& [s, p] : shapes_) plans.push_back(p->plan.get());
    mem_ = gl::make_shared_memory(gl::make_shared_layout(plans, backend_ == gl::Backend::cuda ? "cuda" : "cpu"));
    Planned& first = *shapes_.begin()->second;  // every shape holds all the encoder's weights
    load_vae(*first.w, config_, weights_, runtime(first));
    weight_loads_++;
}

gl::Runtime& VaeGraphEncoder::runtime(Planned& p) {
    if (!p.rt) {
        p.rt = backend_ == gl::Backend::cuda ? gl::make_cuda_runtime(*p.plan, mem_) : gl::make_cpu_runtime(*p.plan, mem_);
        p.rt->set_profiling(profiling_);
    }
    return *p.rt;
}

void VaeGraphEncoder::prepare(const std::vector<data::EncoderShape>& shapes) {
    const auto t0 = std::chrono::steady_clock::now();
    bool fit = true;
    for (const data::EncoderShape& s : shapes) fit &= fits(planned(s));
    if (!fit && !shapes_.empty()) lay_out();
    times_.setup += seconds_since(t0);
}

std::vector<float> VaeGraphEncoder::moments(const void* x, gl::DType t, const data::EncoderShape& s) {
    GL_CHECK(x != nullptr && (t == gl::DType::f32 || t == gl::DType::bf16 || t == gl::DType::f16),
             "VAE encoder: the input must be f32, bf16 or f16 values");
    auto it = shapes_.find(s);
    if (it == shapes_.end() || !fits(*it->second)) prepare({s});
    Planned& p = *shapes_.at(s);
    gl::Runtime& rt = runtime(p);
    const auto t0 = std::chrono::steady_clock::now();
    rt.write(p.x, x, t);
    const auto t1 = std::chrono::steady_clock::now();
    rt.run();
    // Read in the graph's own dtype (bf16 on CUDA: half the bytes) and widened here.
    const gl::Value& v = p.plan->graph.v(p.moments);
    std::vector<float> out(size_t(v.numel()));
    if (v.dtype == gl::DType::f32) {
        rt.read(p.moments, out.data(), gl::DType::f32);
    } else {
        std::vector<uint16_t> half(out.size());
        rt.read(p.moments, half.data(), v.dtype);
        for (size_t i = 0; i < out.size(); i++)
            out[i] = v.dtype == gl::DType::bf16 ? gl::bf16_to_f32(half[i]) : gl::f16_to_f32(half[i]);
    }
    times_.upload += std::chrono::duration<double>(t1 - t0).count();
    times_.run += seconds_since(t1);
    times_.calls++;
    return out;
}

std::vector<float> VaeGraphEncoder::moments(const std::vector<float>& x, int batch, int height, int width) {
    GL_CHECK(batch > 0 && height > 0 && width > 0 && x.size() == size_t(batch) * size_t(height) * size_t(width) * 3,
             "VAE encoder: ", x.size(), " values for ", batch, "x", height, "x", width, "x3");
    return moments(x.data(), gl::DType::f32, data::EncoderShape{batch, height, width});
}

std::vector<float> VaeGraphEncoder::encode(const void* x, gl::DType t, const data::EncoderShape& s,
                                           std::span<const float> noise) {
    return vae_sample_latent(config_, moments(x, t, s), noise);
}

void VaeGraphEncoder::set_profiling(bool on) {
    profiling_ = on;
    for (auto& [s, p] : shapes_)
        if (p->rt) p->rt->set_profiling(on);
}

std::string VaeGraphEncoder::profile_report(const data::EncoderShape& s, size_t top) const {
    auto it = shapes_.find(s);
    GL_CHECK(it != shapes_.end() && it->second->rt, "VAE encoder: no runtime for ", s.batch, "x", s.height, "x",
             s.width, " to report on");
    return it->second->rt->profile_report(top);
}

std::string VaeGraphEncoder::memory_report() const { return mem_ ? mem_->layout().report() : std::string(); }

}  // namespace sd
