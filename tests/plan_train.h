// Two training steps of the tiny UNet step on a CPU runtime of a given plan, for the tests that show
// two plans of one step graph train alike (fusion, joined pairs, recompute budgets).
#pragma once
#include <vector>

#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "models/sd15/sd_config.h"
#include "models/sd15/unet.h"
#include "train/trainer.h"
#include "train_fixtures.h"

namespace train_test {

// The two steps' losses, then every LoRA parameter after them: the runtime is poisoned first, the
// golden tiny UNet loaded, the latents and context fixed patterns.
inline std::vector<float> train_two_steps(train::StepGraph& s, const train::StepOptions& o, gl::Plan p) {
    auto rt = gl::make_cpu_runtime(std::move(p));
    rt->poison(0xff);
    gl::io::SafetensorsFile file(kTinyUnet);
    sd::load_unet(*s.unet_weights, sd::sd_config(*o.config).unet, file, *rt);
    train::Trainer tr(s, *rt, train::TrainerOptions{});
    tr.init(3);
    std::vector<float> lat(size_t(s.latent_numel())), ctx(size_t(s.context_numel()));
    for (size_t i = 0; i < lat.size(); i++) lat[i] = float(int(i % 13) - 6) * 0.15f;
    for (size_t i = 0; i < ctx.size(); i++) ctx[i] = float(int(i % 7) - 3) * 0.3f;
    std::vector<float> out;
    for (int k = 0; k < 2; k++) out.push_back(float(tr.step(lat, ctx).loss));
    for (gl::ValueId v : s.net->parameters())
        for (float e : rt->read_f32(v)) out.push_back(e);
    return out;
}

}  // namespace train_test
