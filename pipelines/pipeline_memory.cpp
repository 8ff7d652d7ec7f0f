// The pipeline's memory budget: what its own memory may take, what a request needs, the largest
// requests that fit, and the refusal of a layout over the budget before anything is allocated.
#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/host_memory.h"
#include "models/diffusion/sampler_prompts.h"
#include "pipelines/pipeline.h"
#include "pipelines/pipeline_impl.h"

namespace sd {

namespace {

// (templates: Pipeline::Impl is private to the class.)
template <class Impl>
std::set<std::string> plan_keys(const Impl& m) {
    std::set<std::string> k;
    for (const auto& [key, p] : m.plans) k.insert(key);
    return k;
}

// Drops the plans made since `before` (none of them has a runtime yet).
template <class Impl>
void forget_plans_since(Impl& m, const std::set<std::string>& before) {
    std::erase_if(m.plans, [&](const auto& kv) { return !before.count(kv.first); });
}

std::string request_text(const GenerationParams& p) {
    return gl::cat(p.width, "x", p.height, " at batch ", p.batch, p.cfg_scale > 1.0 ? " with CFG" : "");
}

}  // namespace

OverBudget::OverBudget(size_t need_bytes, Pipeline::Budget b)
    : gl::Error(gl::cat("memory: the pipeline needs ", gl::format_bytes(need_bytes), ", more than the ",
                        gl::format_bytes(b.bytes), " ", b.what)),
      need(need_bytes),
      budget(std::move(b)) {}

Pipeline::Budget memory_budget_of(const PipelineOptions& o, const std::string& backend) {
    Pipeline::Budget b;
    if (backend == "cuda") {
        gl::cuda_memory_info(&b.bytes, nullptr);
        b.what = "free on the GPU";
    } else {
        b.bytes = gl::host_available_bytes();
        b.what = "available on the host (MemAvailable, or a cgroup's limit less its use)";
    }
    if (o.memory_limit && *o.memory_limit < b.bytes) {
        b.bytes = *o.memory_limit;
        b.what = "of the memory limit";
    }
    return b;
}

Pipeline::Budget Pipeline::memory_budget() const { return memory_budget_of(opt_, impl_->backend); }

size_t Pipeline::memory_needed(const GenerationParams& p) {
    Impl& m = *impl_;
    const std::set<std::string> before = plan_keys(m);
    std::vector<const gl::Plan*> all;
    for (const PipelineHolder* h : {&m.text, &m.unet, &m.vae}) all.push_back(&m.plans.at(h->key).plan);
    size_t need = 0;
    try {
        for (const std::string& k : graphs_for(p)) all.push_back(&m.plans.at(k).plan);
        need = gl::make_shared_layout(all, m.backend).total_bytes();
    } catch (...) {
        forget_plans_since(m, before);
        throw;
    }
    forget_plans_since(m, before);
    return need;
}

Pipeline::Fits Pipeline::largest_fitting(const GenerationParams& p, size_t budget) {
    auto fits = [&](const GenerationParams& q) { return memory_needed(q) <= budget; };
    // The largest n in [1, hi] with fits(make(n)), by bisection (memory grows with n); 0 for none.
    auto largest = [&](int hi, const std::function<GenerationParams(int)>& make) {
        int lo = 0;
        while (lo < hi) {
            const int mid = lo + (hi - lo + 1) / 2;
            if (fits(make(mid))) lo = mid;
            else hi = mid - 1;
        }
        return lo;
    };
    Fits f;
    // Sizes: the longer side in steps that suit both the prompt bounds and the VAE, the shorter
    // one scaled with it to the nearest step.
    const int step = std::lcm(diffusion::kSampleBounds.side_step, int(model_.vae_config().downscale()));
    const bool wide = p.width >= p.height;
    const int longer = std::max(p.width, p.height), shorter = std::min(p.width, p.height);
    auto sized = [&](int n) {
        GenerationParams q = p;
        const int l = n * step;
        const int s = std::max(step, int((int64_t(shorter) * l * 2 / longer / step + 1) / 2) * step);  // nearest
        (wide ? q.width : q.height) = l;
        (wide ? q.height : q.width) = s;
        return q;
    };
    const int k = largest(longer / step, sized);
    if (k > 0 && sized(k).width * sized(k).height < p.width * p.height) f.smaller_size = sized(k);
    if (p.batch > 1) {
        auto batched = [&](int n) {
            GenerationParams q = p;
            q.batch = n;
            return q;
        };
        if (const int b = largest(p.batch - 1, batched); b > 0) f.smaller_batch = batched(b);
    }
    return f;
}

void Pipeline::ensure_requests(const std::vector<GenerationParams>& requests) {
    Impl& m = *impl_;
    const std::set<std::string> before = plan_keys(m);
    std::vector<std::string> keys;
    for (const GenerationParams& p : requests) {
        const std::vector<std::string> k = graphs_for(p);
        keys.insert(keys.end(), k.begin(), k.end());
    }
    try {
        m.ensure(model_, opt_, keys);
        return;
    } catch (const OverBudget& e) {
        forget_plans_since(m, before);  // a later, smaller request is not refused for these
        std::vector<size_t> need;
        for (const GenerationParams& p : requests) need.push_back(memory_needed(p));
        const size_t i = size_t(std::max_element(need.begin(), need.end()) - need.begin());
        const GenerationParams& big = requests.at(i);
        std::string s = gl::cat("memory: ", request_text(big), " needs ", gl::format_bytes(need[i]), ", more than the ",
                                gl::format_bytes(e.budget.bytes), " ", e.budget.what);
        if (need[i] <= e.budget.bytes)
            gl::fail("memory: the ", requests.size(), " requests together need ", gl::format_bytes(e.need),
                     ", more than the ", gl::format_bytes(e.budget.bytes), " ", e.budget.what,
                     "; each fits alone: make fewer at once");
        const Fits f = largest_fitting(big, e.budget.bytes);
        if (!f.smaller_size && !f.smaller_batch) {
            std::vector<const gl::Plan*> holders;
            for (const PipelineHolder* h : {&m.text, &m.unet, &m.vae}) holders.push_back(&m.plans.at(h->key).plan);
            gl::fail(s, "; no smaller size fits either (the weights alone take ",
                     gl::format_bytes(gl::make_shared_layout(holders, m.backend).total_bytes()), ")");
        }
        s += "; the largest that fits: ";
        if (f.smaller_size) s += request_text(*f.smaller_size);
        if (f.smaller_batch) s += (f.smaller_size ? ", or " : "") + request_text(*f.smaller_batch);
        gl::fail(s);
    }
}

}  // namespace sd
