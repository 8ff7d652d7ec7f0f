// Per-step constants of the Adam-family kernels, derived on the device from the hyper tensor
// (so a captured graph picks up each step's learning rate and step count).
#pragma once
#include "ggml-lite/ops/builder.h"

namespace gl {

struct AdamConsts {
    float lr, b1, b2, eps, decay, gs, step_size, corr2;
};

__device__ inline AdamConsts adam_consts(const float* h, bool bnb) {
    AdamConsts k;
    k.lr = h[kLr];
    k.b1 = h[kBeta1];
    k.b2 = h[kBeta2];
    k.eps = h[kEps];
    k.gs = h[kGradScale];
    k.decay = __fsub_rn(1.0f, __fmul_rn(k.lr, h[kWeightDecay]));
    double t = h[kStep];
    if (bnb) {
        k.corr2 = float(sqrt(1.0 - pow(double(k.b2), t)));
        k.step_size = float(-double(k.lr) * double(k.corr2) / (1.0 - pow(double(k.b1), t)));
    } else {
        k.step_size = float(double(k.lr) / (1.0 - pow(double(k.b1), t)));
        k.corr2 = float(sqrt(1.0 - pow(double(k.b2), t)));
    }
    return k;
}

}  // namespace gl
