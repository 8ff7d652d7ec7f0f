// kohya's --scale_weight_norms (networks/lora.py LoRANetwork.apply_max_norm_regularization):
// after each update, every module's update W = (alpha / rank) up @ down (a k x k conv's as the
// product per kernel position) whose Frobenius norm exceeds max_norm is scaled down to it by
// multiplying up and down by sqrt(max_norm / norm) each; nothing else changes (the optimizer's
// state stays as it is). The figures kohya logs come back: how many modules were scaled, and the
// mean and largest norm after scaling. Norms below max_norm / 2 count as they are, as kohya's
// clamp leaves them.
//
// The norm is computed from the two rank x rank Gram matrices (||U D||^2 = <U^T U, D D^T>) in
// double: the cost of a module is (out + in) rank^2, not the full product's out * in * rank.
#pragma once
#include "lora/lora.h"

namespace lora {

struct MaxNormReport {
    int keys_scaled = 0;
    double average_key_norm = 0, max_key_norm = 0;
};

// Over modules of lora_down and lora_up weights (networks.lora's; gl::Error for another type):
// their tensors read through `read` (f32, graph layout) and, when scaled, written back through
// `write`. max_norm > 0.
MaxNormReport apply_max_norm(const std::vector<const Module*>& modules, double max_norm, const ReadFn& read,
                             const WriteFn& write);
// Over every module of the network.
MaxNormReport apply_max_norm(const LoraNetwork& net, double max_norm, const ReadFn& read, const WriteFn& write);

}  // namespace lora
