// kohya networks.lora's block-wise network args and LoRA+ (networks/lora.py: create_network,
// parse_block_lr_kwargs, get_block_lr_weight, get_block_dims_and_alphas,
// remove_block_dims_and_alphas, set_loraplus_lr_ratio), read into a LoraConfig. Every list holds
// one value per block of the family's kohya block list (models::LoraBlocks; SD1.x: 25).
//   block_dims, block_alphas        the rank and alpha of each block's Linear / 1x1 modules
//                                   (default: network_dim / network_alpha; Python's int() / float()
//                                   of each comma-separated value)
//   conv_block_dims, _alphas        the same for k x k convs (default: conv_dim / conv_alpha when
//                                   conv_dim is given, else no conv modules); alphas default 1.0
//   down_lr_weight, up_lr_weight    one lr weight per down (shallow to deep) / up (deep to
//                                   shallow) block: numbers by commas (an empty one is 0), or a
//                                   preset, cosine, sine, linear, reverse_linear or zeros, with
//                                   an optional "+offset" added to each ("sine+0.5")
//   mid_lr_weight                   the mid block's, by commas
//   block_lr_zero_threshold         a weight not above it is 0 (default 0: negative weights too)
//   loraplus_lr_ratio, loraplus_unet_lr_ratio, loraplus_text_encoder_lr_ratio
//                                   the up weights' lr is the part's lr times the part's ratio,
//                                   else loraplus_lr_ratio (Python's `or`: a ratio of 0 falls back)
// block_dims or any lr weight turns the block-wise network on: the lists missing take the
// defaults above, and a block whose lr weight is 0 gets no module at all. Lists of lr weights
// shorter than their blocks are filled with 1, longer ones cut (kohya warns: a note here).
// What kohya refuses by crashing (a value int() / float() cannot read, a list of dims or alphas
// of another length, a preset it does not know, whose message raises itself; a negative lr weight,
// which torch's optimizers refuse) is an error naming the arg.
// With --dim_from_weights kohya builds the network from the file (create_network_from_weights):
// only the lr weights act then; the dims, alphas and LoRA+ ratios are noted as without effect.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "lora/lora.h"

namespace lora {

// The network-arg keys this reads.
bool is_block_arg(const std::string& key);

// Reads the block-wise args and LoRA+ ratios among args into c (whose family, rank, alpha and
// conv_dim / conv_alpha are set). Throws gl::Error naming the arg; notes go to c.notes.
void read_block_args(LoraConfig& c, const std::vector<std::pair<std::string, std::string>>& args,
                     bool dim_from_weights);

}  // namespace lora
