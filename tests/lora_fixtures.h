// Shared fixtures of the LoRA test files (test_lora.cpp: targets, names, files; test_lora_apply.cpp:
// gradients, runtime vs merged, dropout).
#pragma once
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include <unistd.h>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "lora/kohya.h"
#include "lora/lora.h"
#include "models/sd15/clip.h"
#include "models/sd15/unet.h"

using namespace gl;
using lora::LoraConfig;
using lora::LoraNetwork;
using lora::Part;


namespace lora_test {


inline std::vector<float> random_vec(size_t n, float s, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-s, s);
    std::vector<float> v(n);
    for (float& e : v) e = u(rng);
    return v;
}

// Per process: ctest runs test cases in parallel, and two suites may run at once on one machine.
inline std::string tmp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("gl_test_lora_" + std::to_string(getpid()) + "_" + name)).string();
}

// SD1.5's UNet and text encoder graphs with a LoRA attached (built, never run).
struct Sd15Graphs {
    Graph g;
    nn::Weights wu{g, DType::bf16}, wt{g, DType::bf16};
    LoraNetwork net;
    // One graph holds both models, as in training: a network's parameters live in one graph.
    explicit Sd15Graphs(LoraConfig c) : net(c) {
        net.attach_unet(wu);
        net.attach_text_encoder(wt);
        sd::unet_forward(wu, sd::UnetConfig::sd15(), g.input("x", DType::bf16, {1, 8, 8, 4}),
                         g.input("t", DType::f32, {1}), g.input("c", DType::bf16, {1, 77, 768}));
        sd::build_clip(wt, g, g.input("ids", DType::i32, {1, 77}), sd::ClipConfig::vit_l14());
    }
};

inline size_t count(const LoraNetwork& n, Part p) {
    size_t k = 0;
    for (const lora::Module& m : n.modules()) k += m.layer().part == p;
    return k;
}


}  // namespace lora_test
using namespace lora_test;
