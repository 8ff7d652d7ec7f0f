// The per-element training losses of weighted_loss and their slopes, written once for the CPU
// kernels (double) and the CUDA kernels (host and device), so both backends use one formula.
#pragma once
#include <math.h>

#include "ggml-lite/ops/op_kinds.h"
#include "ggml-lite/ops/rng.h"      // GL_HD

namespace gl::loss {

// l(d) for d = pred - target; c is the sample's huber_c (unused by l2 and l1).
template <class T>
GL_HD T value(LossKind k, T d, T c) {
    if (k == LossKind::l2) return d * d;
    if (k == LossKind::l1) return d < T(0) ? -d : d;
    // kohya's pseudo-Huber, 2c (sqrt(d^2 + c^2) - c): ~d^2 for |d| << c, ~2c|d| beyond;
    // smooth_l1 is the same divided by c: ~d^2 / c near 0, ~2|d| beyond.
    const T r = sqrt(d * d + c * c) - c;
    return k == LossKind::smooth_l1 ? T(2) * r : T(2) * c * r;
}

// dl/dd. l1 takes sign(d) with 0 at 0 (torch's l1_loss); huber 2c d / sqrt(d^2 + c^2), which is
// 0 (not 0/0) at d = c = 0; smooth_l1 2d / sqrt(d^2 + c^2).
template <class T>
GL_HD T slope(LossKind k, T d, T c) {
    if (k == LossKind::l2) return T(2) * d;
    if (k == LossKind::l1) return d > T(0) ? T(1) : d < T(0) ? T(-1) : T(0);
    const T r = sqrt(d * d + c * c);
    if (!(r > T(0))) return T(0);
    return k == LossKind::smooth_l1 ? T(2) * d / r : T(2) * c * d / r;
}

}  // namespace gl::loss
