// CPU reference backend: one host allocation per memory category, sized from the plan (or the
// arenas of a shared memory).
#include <chrono>
#include <cstring>
#include <new>
#include <stdexcept>

#include "ggml-lite/core/cpu_kernel.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/shared_memory.h"

namespace gl {

// ---- CpuCtx ----

void gather_f32(const TensorRef& t, float* dst) {
    const int64_t n = t.numel();
    if (t.dense() && t.dtype == DType::f32) {
        std::memcpy(dst, static_cast<const float*>(t.data) + t.layout.offset, size_t(n) * 4);
        return;
    }
    if (t.dense()) {
        const char* base = static_cast<const char*>(t.data) + t.layout.offset * int64_t(dtype_size(t.dtype));
        for (int64_t i = 0; i < n; i++) dst[i] = load_as_f32(base, t.dtype, i);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = load_as_f32(t.data, t.dtype, t.layout.index_of(i));
}

void scatter_f32(const float* src, const TensorRef& t) {
    const int64_t n = t.numel();
    if (t.dense()) {
        char* base = static_cast<char*>(t.data) + t.layout.offset * int64_t(dtype_size(t.dtype));
        if (t.dtype == DType::f32) {
            std::memcpy(base, src, size_t(n) * 4);
            return;
        }
        for (int64_t i = 0; i < n; i++) store_from_f32(base, t.dtype, i, src[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) store_from_f32(t.data, t.dtype, t.layout.index_of(i), src[i]);
}

const float* CpuCtx::in_f32(int i) {
    const TensorRef& t = in[size_t(i)];
    if (t.dtype == DType::f32 && t.dense()) return static_cast<const float*>(t.data) + t.layout.offset;
    scratch_.emplace_back(size_t(t.numel()));
    gather_f32(t, scratch_.back().data());
    return scratch_.back().data();
}

const int32_t* CpuCtx::in_i32(int i) {
    const TensorRef& t = in[size_t(i)];
    GL_CHECK(t.dtype == DType::i32, op_name(node.op), ": input ", i, " must be i32, got ", dtype_name(t.dtype));
    if (t.dense()) return static_cast<const int32_t*>(t.data) + t.layout.offset;
    iscratch_.emplace_back(size_t(t.numel()));
    auto& buf = iscratch_.back();
    for (int64_t k = 0; k < t.numel(); k++) buf[size_t(k)] = static_cast<const int32_t*>(t.data)[t.layout.index_of(k)];
    return buf.data();
}

float* CpuCtx::out_f32(int k) {
    const TensorRef& t = out[size_t(k)];
    if (t.dtype == DType::f32 && t.dense()) return static_cast<float*>(t.data) + t.layout.offset;
    scratch_.emplace_back(size_t(t.numel()), 0.0f);
    pending_.emplace_back(k, &scratch_.back());
    return scratch_.back().data();
}

void CpuCtx::finish() {
    for (auto& [k, buf] : pending_) scatter_f32(buf->data(), out[size_t(k)]);
    pending_.clear();
}

// ---- Runtime helpers ----

Runtime::Runtime(Plan plan, std::shared_ptr<SharedMemory> shared)
    : plan_(shared ? shared->layout().bind(std::move(plan)) : std::move(plan)), shared_(std::move(shared)) {}

void Runtime::write_f32(ValueId v, const std::vector<float>& x) {
    GL_CHECK(int64_t(x.size()) == plan_.graph.v(v).numel(), "write_f32: ", plan_.graph.describe(v), " has ",
             plan_.graph.v(v).numel(), " elements, got ", x.size());
    write(v, x.data(), DType::f32);
}

TensorRef Runtime::locate(ValueId id, const std::array<void*, kCategoryCount>& arena_base) const {
    const Graph& g = plan_.graph;
    const Value& v = g.v(id);
    int64_t off = plan_.offset[size_t(v.base)];
    GL_CHECK(off >= 0, backend_name(), " runtime: ", g.describe(id), " has no storage in the plan");
    TensorRef t;
    t.data = static_cast<char*>(arena_base[size_t(g.v(v.base).category)]) + off;
    t.dtype = v.dtype;
    t.layout = v.layout;
    return t;
}

std::vector<float> Runtime::read_f32(ValueId v) const {
    std::vector<float> x(size_t(plan_.graph.v(v).numel()));
    read(v, x.data(), DType::f32);
    return x;
}

// ---- CPU runtime ----

namespace {

class CpuRuntime final : public Runtime {
public:
    explicit CpuRuntime(Plan plan) : Runtime(std::move(plan)) {
        for (int c = 0; c < kCategoryCount; c++) {
            const size_t bytes = plan_.arena_bytes[size_t(c)];
            try {
                own_[size_t(c)].assign(bytes, 0);
            } catch (const std::bad_alloc&) {
                fail("cpu runtime: cannot allocate ", bytes, " bytes (", double(bytes) / (1 << 30), " GiB) of host memory for the ",
                     category_name(Category(c)), " arena; the plan needs ", plan_.total_bytes(), " bytes in all");
            } catch (const std::length_error&) {
                fail("cpu runtime: the ", category_name(Category(c)), " arena of ", bytes, " bytes exceeds what the host can address");
            }
            base_[size_t(c)] = own_[size_t(c)].data();
            bytes_[size_t(c)] = own_[size_t(c)].size();
        }
    }
    CpuRuntime(Plan plan, std::shared_ptr<SharedMemory> shared) : Runtime(std::move(plan), std::move(shared)) {
        for (int c = 0; c < kCategoryCount; c++) {
            base_[size_t(c)] = shared_->arena(Category(c));
            bytes_[size_t(c)] = shared_->allocated_bytes(Category(c));
        }
    }
    const char* backend_name() const override { return "cpu"; }

    TensorRef ref(ValueId id) const { return locate(id, base_); }

    void write(ValueId id, const void* data, DType t) override {
        const Value& v = plan_.graph.v(id);
        GL_CHECK(v.base == id, "write: ", plan_.graph.describe(id), " is a view; write its base value");
        TensorRef dst = ref(id);
        char* base = static_cast<char*>(dst.data);  // a storage owner: dense from here
        if (t == v.dtype) {
            std::memcpy(base, data, v.bytes());
            return;
        }
        parallel_for(v.numel(), int64_t(1) << 16, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; i++) store_from_f32(base, v.dtype, i, load_as_f32(data, t, i));
        });
    }

    void read(ValueId id, void* data, DType t) const override {
        TensorRef src = ref(id);
        for (int64_t i = 0; i < src.numel(); i++) {
            int64_t si = src.layout.index_of(i);
            if (t == src.dtype) {
                size_t s = dtype_size(t);
                std::memcpy(static_cast<char*>(data) + i * int64_t(s), static_cast<const char*>(src.data) + si * int64_t(s), s);
            } else {
                store_from_f32(data, t, i, load_as_f32(src.data, src.dtype, si));
            }
        }
    }

    void run() override {
        const Graph& g = plan_.graph;
        const bool timed = profiling();
        for (size_t i = 0; i < g.nodes.size(); i++) {
            const Node& n = g.nodes[i];
            const OpDef& def = op_def(n.op);
            if (def.flags & kOpView) continue;
            const auto t0 = std::chrono::steady_clock::now();
            CpuCtx ctx(n);
            ctx.comm = comm_;
            for (ValueId x : n.in) ctx.in.push_back(ref(x));
            for (ValueId y : n.out) ctx.out.push_back(ref(y));
            GL_CHECK(def.cpu, "cpu runtime: op ", def.name, " has no CPU kernel");
            def.cpu(ctx);
            ctx.finish();
            if (timed)
                add_node_time(i, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        if (timed) end_profiled_run();
    }

    void poison(unsigned char byte) override {
        for (int c = 0; c < kCategoryCount; c++)
            if (bytes_[size_t(c)]) std::memset(base_[size_t(c)], byte, bytes_[size_t(c)]);
    }

    size_t allocated_bytes(Category c) const override { return bytes_[size_t(c)]; }

    std::string memory_report() const override {
        return shared_ ? plan_.report() + shared_->layout().report() : plan_.report();
    }

private:
    std::array<std::vector<unsigned char>, kCategoryCount> own_;  // without shared memory
    std::array<void*, kCategoryCount> base_{};                    // each category's arena
    std::array<size_t, kCategoryCount> bytes_{};
};

class CpuSharedMemory final : public SharedMemory {
public:
    explicit CpuSharedMemory(SharedLayout l) : SharedMemory(std::move(l)) {
        for (int c = 0; c < kCategoryCount; c++) {
            own_[size_t(c)].assign(layout_.arena_bytes[size_t(c)], 0);
            if (!own_[size_t(c)].empty()) arenas_[size_t(c)] = own_[size_t(c)].data();
        }
        GL_CHECK(layout_.scratch_bytes == 0, "cpu shared memory: the cpu backend has no scratch arena");
    }

private:
    std::array<std::vector<unsigned char>, kCategoryCount> own_;
};

}  // namespace

void check_memory_limit(const Plan& plan, size_t backend_bytes, const RuntimeOptions& o, const char* backend) {
    const size_t need = plan.total_bytes() + backend_bytes;
    if (o.memory_limit == 0 || need <= o.memory_limit) return;
    auto mib = [](size_t b) { return double(b) / (1024.0 * 1024.0); };
    fail(backend, " runtime: the plan needs ", need, " bytes (", mib(need), " MiB: arenas ", mib(plan.total_bytes()),
         " MiB of which activations ", mib(plan.arena_bytes[size_t(Category::activations)]), " MiB, backend scratch ",
         mib(backend_bytes), " MiB), above the memory limit of ", o.memory_limit, " bytes (", mib(o.memory_limit),
         " MiB); nothing was allocated (plan with Recompute::budget, a smaller batch or a larger limit)");
}

std::unique_ptr<Runtime> make_cpu_runtime(Plan plan, const RuntimeOptions& o) {
    check_memory_limit(plan, 0, o, "cpu");
    return std::make_unique<CpuRuntime>(std::move(plan));
}

std::unique_ptr<Runtime> make_cpu_runtime(Plan plan, std::shared_ptr<SharedMemory> shared) {
    GL_CHECK(shared != nullptr, "make_cpu_runtime: no shared memory given");
    GL_CHECK(shared->backend() == "cpu", "make_cpu_runtime: the shared memory is for ", shared->backend(), ", not cpu");
    return std::make_unique<CpuRuntime>(std::move(plan), std::move(shared));
}

std::shared_ptr<SharedMemory> make_cpu_shared_memory(SharedLayout layout) {
    GL_CHECK(layout.backend == "cpu", "make_cpu_shared_memory: the layout is for ", layout.backend, ", not cpu");
    return std::make_shared<CpuSharedMemory>(std::move(layout));
}

}  // namespace gl
