#include "pipelines/base_weights.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/sources.h"
#include "lora/kohya.h"
#include "pipelines/merge_file.h"

namespace lora {

namespace {

// One file's network on the model's layers and its parameters, on the host.
struct FileMerge {
    std::string path;
    std::unique_ptr<FileNetwork> fn;
    std::map<gl::ValueId, std::vector<float>> params;
};

// A weight the files change: its layout in the graph and the modules to apply, in file order.
struct Patch {
    nn::WeightLayout layout = nn::WeightLayout::plain;
    gl::Shape graph;
    std::vector<std::pair<const Module*, const FileMerge*>> modules;
};

struct MergePlan {
    std::vector<FileMerge> files;
    std::map<std::string, Patch> keys[2];  // by checkpoint key, per part (unet, text encoder)
};

// A checkpoint whose patched weights read merged.
class MergedSource final : public gl::io::TensorSource {
public:
    MergedSource(std::shared_ptr<const gl::io::TensorSource> base, std::shared_ptr<const MergePlan> plan,
                 std::vector<int> parts)
        : base_(std::move(base)), plan_(std::move(plan)), parts_(std::move(parts)) {}

    std::string origin() const override { return base_->origin(); }
    std::vector<gl::io::TensorInfo> list() const override { return base_->list(); }
    bool has(const std::string& name) const override { return base_->has(name); }
    gl::io::TensorInfo info(const std::string& name) const override { return base_->info(name); }

    void read(const std::string& name, void* dst, gl::DType to) const override {
        const Patch* p = patch(name);
        if (!p) return base_->read(name, dst, to);
        const size_t n = size_t(base_->info(name).numel());
        std::vector<float> w(n);
        base_->read(name, w.data(), gl::DType::f32);
        GL_CHECK(int64_t(n) == p->graph.numel(), "--base_weights: ", origin(), ": ", name, " holds ", n,
                 " values, the model's weight ", p->graph.numel());
        const bool ohwi = p->layout == nn::WeightLayout::conv_ohwi;
        if (ohwi) w = reorder(w, p->graph, true);
        for (const auto& [m, f] : p->modules) {
            m->merge(
                w, [f](gl::ValueId v) { return f->params.at(v); }, f->fn->net->config().multiplier);
            for (size_t i = 0; i < n; i++)
                GL_CHECK(std::isfinite(w[i]), "--base_weights ", f->path, ": merged into ", origin(), "'s ", name,
                         ", it makes element ", i, " ", std::isnan(w[i]) ? "NaN" : "inf");
        }
        if (ohwi) w = reorder(w, p->graph, false);
        for (size_t i = 0; i < n; i++) gl::store_from_f32(dst, to, int64_t(i), w[i]);
    }

private:
    const Patch* patch(const std::string& name) const {
        for (int part : parts_) {
            const auto it = plan_->keys[part].find(name);
            if (it != plan_->keys[part].end()) return &it->second;
        }
        return nullptr;
    }

    // PyTorch's [O, I, kh, kw] to the graph's [O, kh, kw, I] (to_graph), or back.
    static std::vector<float> reorder(const std::vector<float>& w, const gl::Shape& s, bool to_graph) {
        const int64_t O = s[0], kh = s[1], kw = s[2], I = s[3];
        std::vector<float> out(w.size());
        for (int64_t o = 0; o < O; o++)
            for (int64_t y = 0; y < kh; y++)
                for (int64_t x = 0; x < kw; x++)
                    for (int64_t i = 0; i < I; i++) {
                        const size_t oihw = size_t(((o * I + i) * kh + y) * kw + x),
                                     ohwi = size_t(((o * kh + y) * kw + x) * I + i);
                        if (to_graph)
                            out[ohwi] = w[oihw];
                        else
                            out[oihw] = w[ohwi];
                    }
        return out;
    }

    std::shared_ptr<const gl::io::TensorSource> base_;
    std::shared_ptr<const MergePlan> plan_;
    std::vector<int> parts_;
};

// Reads one file into the plan: its network on the model's layers, its tensors, the weights it changes.
void add_file(MergePlan& plan, const models::ModelFiles& model, const BaseWeightsFile& file,
              std::vector<std::string>* messages) {
    GL_CHECK(std::isfinite(file.multiplier), "--base_weights_multiplier ", file.multiplier, " for ", file.path,
             " is not a finite number");
    std::shared_ptr<const gl::io::TensorSource> src = gl::io::open_checkpoint(file.path);
    const auto modules = std::make_shared<FileModules>(src, model.fam().ldm_names(model.cfg()));
    modules->check_holds_modules();
    FileMerge& f = plan.files.emplace_back();
    f.path = file.path;
    f.fn = file_network(model, modules, file.multiplier);
    if (f.fn->net->modules().empty()) {
        std::string list;
        const std::vector<gl::io::TensorInfo> t = src->list();
        for (size_t i = 0; i < t.size() && i < 10; i++) list += "\n  " + t[i].name;
        gl::fail("--base_weights ", file.path,
                 ": none of its modules adapts a layer of this model; its tensors:", list);
    }
    const LoadReport r = load_lora(
        *src, *f.fn->net, [&f](gl::ValueId v, const std::vector<float>& x) { f.params[v] = x; },
        model.fam().ldm_names(model.cfg()));
    if (!r.unexpected.empty()) {
        std::string list;
        for (size_t i = 0; i < r.unexpected.size() && i < 10; i++) list += "\n  " + r.unexpected[i];
        gl::fail("--base_weights ", file.path, " holds ", r.unexpected.size(),
                 " tensors no module of this model uses; merging would drop them:", list);
    }
    size_t counts[2] = {0, 0};
    for (const Module& m : f.fn->net->modules()) {
        const Part part = m.layer().part;
        const nn::Weights& w = part == Part::unet ? *f.fn->unet : *f.fn->text_encoder;
        const std::string name = m.layer().path + ".weight";
        const nn::WeightEntry* e = nullptr;
        for (const nn::WeightEntry& x : w.entries())
            if (x.name == name) e = &x;
        GL_CHECK(e != nullptr, "the model has no weight ", name, " for ", m.key());
        const std::string key = checkpoint_key(model, part, name);
        GL_CHECK(!key.empty(), "no checkpoint key for ", name);
        Patch& p = plan.keys[part == Part::unet ? 0 : 1][key];
        p.layout = e->layout;
        p.graph = f.fn->g.shape(e->id);
        p.modules.emplace_back(&m, &f);
        counts[part == Part::unet ? 0 : 1]++;
    }
    if (messages)
        messages->push_back(gl::cat("--base_weights ", file.path, " (", f.fn->net->title(), ", ",
                                    lora_format_name(r.format), "): ", counts[0], " UNet and ", counts[1],
                                    " text encoder modules merged into the base at multiplier ", file.multiplier));
}

}  // namespace

std::string base_weights_identity(const std::vector<BaseWeightsFile>& files) {
    std::string s;
    for (const BaseWeightsFile& f : files) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(f.path, ec);
        const auto t = std::filesystem::last_write_time(f.path, ec).time_since_epoch().count();
        s += gl::cat("base ", f.path, ":", size, ":", t, ":", f.multiplier, "|");
    }
    return s;
}

models::ModelFiles with_base_weights(const models::ModelFiles& model, const std::vector<BaseWeightsFile>& files,
                                std::vector<std::string>* messages) {
    if (files.empty()) return model;
    auto plan = std::make_shared<MergePlan>();
    plan->files.reserve(files.size());  // the patches point into it
    for (const BaseWeightsFile& file : files) {
        try {
            add_file(*plan, model, file, messages);
        } catch (const gl::Error& e) {
            const std::string what = e.what();
            if (what.rfind("--base_weights", 0) == 0) throw;
            gl::fail("--base_weights ", file.path, ": ", what);
        }
    }
    models::ModelFiles out = model;
    if (model.unet == model.text_encoder) {  // one single file holds both
        out.unet = out.text_encoder = std::make_shared<MergedSource>(model.unet, plan, std::vector<int>{0, 1});
    } else {
        out.unet = std::make_shared<MergedSource>(model.unet, plan, std::vector<int>{0});
        out.text_encoder = std::make_shared<MergedSource>(model.text_encoder, plan, std::vector<int>{1});
    }
    return out;
}

}  // namespace lora
