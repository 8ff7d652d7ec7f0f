#include "train/run/state.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/atomic_file.h"
#include "ggml-lite/io/safetensors.h"
#include "train/run/save.h"

namespace train {

namespace fs = std::filesystem;

namespace {

// Every LoRA parameter (the step graphs share them: graph 0 holds them all), f32, by graph name.
void save_lora_masters(const std::string& path, BucketTrainer& t) {
    const StepGraph& s = *t.graphs()[0].step;
    const gl::Runtime& rt = *t.graphs()[0].rt;
    std::vector<std::vector<float>> values;
    std::vector<gl::io::TensorToWrite> out;
    const std::vector<gl::ValueId> params = s.net->parameters();
    values.reserve(params.size());
    for (gl::ValueId p : params) {
        values.push_back(rt.read_f32(p));
        const gl::Shape& sh = s.g.shape(p);
        out.push_back({s.g.v(p).name, gl::DType::f32, std::vector<int64_t>(sh.d.begin(), sh.d.begin() + sh.nd),
                       values.back().data()});
    }
    gl::io::write_safetensors(path, out, {{"sdtrain.state", "lora"}});
}

void load_lora_masters(const std::string& path, BucketTrainer& t) {
    const StepGraph& s = *t.graphs()[0].step;
    gl::Runtime& rt = *t.graphs()[0].rt;
    const gl::io::SafetensorsFile f(path);
    const std::vector<gl::ValueId> params = s.net->parameters();
    GL_CHECK(f.list().size() == params.size(), path, ": holds ", f.list().size(), " tensors, this run's LoRA has ",
             params.size(), " (another --network_dim, --network_args or trained part?)");
    std::vector<std::vector<float>> values;  // all checked before any is written
    for (gl::ValueId p : params) {
        const std::string& name = s.g.v(p).name;
        GL_CHECK(f.has(name), path, ": no tensor ", name, " (the state is of another network)");
        const gl::io::TensorInfo info = f.info(name);
        const gl::Shape& sh = s.g.shape(p);
        GL_CHECK(info.shape == std::vector<int64_t>(sh.d.begin(), sh.d.begin() + sh.nd), path, ": ", name,
                 " has another shape than this run's");
        std::vector<float> v(size_t(info.numel()));
        f.read(name, v.data(), gl::DType::f32);
        for (float x : v) GL_CHECK(std::isfinite(x), path, ": ", name, " holds NaN or inf");
        values.push_back(std::move(v));
    }
    for (size_t i = 0; i < params.size(); i++) rt.write_f32(params[i], values[i]);
}

}  // namespace

void save_run_state(const fs::path& dir, BucketTrainer& t, const RunPosition& pos) {
    write_dir_atomically(dir, [&](const fs::path& tmp) {
        save_lora_masters((tmp / "lora.safetensors").string(), t);
        t.save_optimizer((tmp / "optimizer.safetensors").string());
        nlohmann::json j;
        j["current_epoch"] = pos.epoch;  // kohya's keys
        j["current_step"] = pos.step;
        j["sdtrain"] = {{"version", kStateVersion},
                        {"batches_done", pos.batches_done},
                        {"start_step", pos.start_step},
                        {"start_batch", pos.start_batch},
                        {"seed", pos.seed},
                        {"world_size", pos.world_size},
                        {"trainer_steps", pos.trainer.steps},
                        {"noise_counter", pos.trainer.noise_counter},
                        {"run_identity", pos.run_identity}};
        gl::io::write_file_atomic((tmp / "train_state.json").string(), j.dump(2) + "\n");  // synced, as the others
    });
}

std::string load_run_state(const fs::path& dir, BucketTrainer& t, const RunPosition& pos) {
    // Both files are checked before anything is written (each loader validates its own first).
    const std::string lora = (dir / "lora.safetensors").string(), opt = (dir / "optimizer.safetensors").string();
    {
        const gl::io::SafetensorsFile check(opt);  // readable and well-formed before the LoRA changes
    }
    load_lora_masters(lora, t);
    return t.load_state(opt, pos.trainer);
}

}  // namespace train
