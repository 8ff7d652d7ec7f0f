// kohya's network options (--network_module, --network_dim, --network_alpha, --network_dropout,
// --network_args key=value ...) turned into a network's config, as the module named parses them:
//   networks.lora (kohya's LoRA; LoCon with conv_dim): conv_dim, conv_alpha (default 1),
//     rank_dropout, module_dropout, dropout, and the block-wise args and LoRA+ ratios of
//     lora/block_args.h.
//   lycoris.kohya (LyCORIS's kohya wrapper, lycoris/kohya.py create_network): algo (lora = locon,
//     loha, lokr; default lora), preset (default full), conv_dim / conv_alpha (default network_dim
//     / network_alpha: 3x3 convs are trained by default), use_tucker (use_cp, use_conv_cp,
//     disable_conv_cp alike), dora_wd, wd_on_output, rank_dropout, module_dropout, dropout (no
//     effect in LyCORIS's weight-rebuild forward), and a type's own args (LoKr: factor,
//     decompose_both, full_matrix, unbalanced_factorization; accepted and unused for other types,
//     as LyCORIS does). Booleans are LyCORIS's str_bool: any text but "false" is true. Args that
//     only other algos use (block_size, constraint, rescaled, train_t5xxl) are accepted; those
//     sdtrain does not implement (use_scalar, train_norm, bypass_mode, rs_lora, loraplus_*) are
//     refused when they would change the network, naming the arg.
// A key the module does not read is ignored with a note, as kohya's and LyCORIS's create_network
// ignore it.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lora/lora.h"

namespace lora {

struct NetworkOptions {
    std::string module = "networks.lora";  // --network_module
    std::optional<int> dim;                // --network_dim; None: 4
    double alpha = 1.0;                    // --network_alpha
    std::optional<double> dropout;         // --network_dropout
    std::vector<std::pair<std::string, std::string>> args;  // --network_args, in the order given
    const models::Family* family = &models::sd15_family();   // the base model's
    bool dim_from_weights = false;  // --dim_from_weights: kohya builds the network from the file
};

// The network modules sdtrain trains.
const std::vector<std::string>& network_modules();

// Throws gl::Error naming the option or arg for what the module would refuse or sdtrain does not do.
LoraConfig network_config(const NetworkOptions& o);

}  // namespace lora
