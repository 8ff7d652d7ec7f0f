// THE op list. Each entry: X(name, family). The family file ops/<family>.cpp defines
// `const OpDef def_<name>` (shape rule, cost, backward rule, CPU kernel); the CUDA kernel
// lives in cuda/<family>.cu. Tests iterate this list.
#pragma once

#define GL_OP_LIST(X)                  \
    /* views and copies */              \
    X(reshape, views)                   \
    X(permute, views)                   \
    X(slice, views)                     \
    X(expand, views)                    \
    X(contiguous, views)                \
    X(concat, views)                    \
    X(fill, views)                      \
    X(cast, views)                      \
    X(cast_multi, views)                \
    /* elementwise and broadcast */     \
    X(add, elementwise)                 \
    X(sub, elementwise)                 \
    X(mul, elementwise)                 \
    X(scale, elementwise)               \
    X(dropout, elementwise)             \
    X(accumulate, elementwise)          \
    /* random draws */                  \
    X(normal_noise, random)             \
    /* activations */                   \
    X(silu, activations)                \
    X(gelu, activations)                \
    X(quick_gelu, activations)          \
    X(act_grad, activations)            \
    X(geglu, activations)               \
    X(geglu_grad, activations)          \
    /* reductions and losses */         \
    X(sum, reductions)                  \
    X(mean, reductions)                 \
    X(sum_to, reductions)               \
    X(mse_loss, reductions)             \
    X(mse_loss_grad, reductions)        \
    X(weighted_loss, reductions)        \
    X(weighted_loss_grad, reductions)   \
    /* matmul and linear */             \
    X(matmul, matmul)                   \
    X(linear, matmul)                   \
    /* convolution and resampling */    \
    X(conv2d, conv)                     \
    X(conv2d_grad_input, conv)          \
    X(conv2d_grad_weight, conv)         \
    X(upsample2x, conv)                 \
    X(upsample2x_grad, conv)            \
    /* normalisation and softmax */     \
    X(group_norm, norms)                \
    X(group_norm_grad, norms)           \
    X(layer_norm, norms)                \
    X(layer_norm_grad, norms)           \
    X(softmax, norms)                   \
    X(softmax_grad, norms)              \
    /* attention */                     \
    X(attention, attention)             \
    X(attention_grad, attention)        \
    /* embeddings */                    \
    X(embedding, embedding)             \
    X(embedding_grad, embedding)        \
    X(timestep_embedding, embedding)    \
    /* optimizer steps (update in place) */ \
    X(adamw_step, optim)                \
    X(grad_stats, optim)                \
    X(lion_step, optim_lion)            \
    X(adafactor_step, optim_adafactor)  \
    X(prodigy_accum, optim_prodigy)     \
    X(prodigy_d, optim_prodigy)         \
    X(prodigy_step, optim_prodigy)      \
    X(adamw8bit_step, adam8bit)         \
    X(lion8bit_step, adam8bit)          \
    X(sgd8bit_step, adam8bit)           \
    X(ademamix_step, optim_ademamix)    \
    X(ademamix8bit_step, optim_ademamix) \
    X(sgd_step, optim_sgd)              \
    X(dadapt_adam_accum, optim_dadapt)  \
    X(dadapt_adam_d, optim_dadapt)      \
    X(dadapt_adam_step, optim_dadapt)   \
    X(dadapt_lion_step, optim_dadapt)   \
    X(dadapt_sgd_accum, optim_dadapt_more) \
    X(dadapt_sgd_step, optim_dadapt_more) \
    X(dadapt_adagrad_accum, optim_dadapt_more) \
    X(dadapt_adagrad_step, optim_dadapt_more) \
    X(dadapt_adan_accum, optim_dadapt_more) \
    X(dadapt_adan_step, optim_dadapt_more) \
    X(dadapt_sum_d, optim_dadapt_more) \
    X(dadapt_adam_preprint_accum, optim_dadapt_more) \
    X(dadapt_adam_preprint_step, optim_dadapt_more) \
    X(dadapt_adan_ip_accum, optim_dadapt_more) \
    X(schedulefree_step, optim_schedulefree) \
    X(schedulefree_advance, optim_schedulefree) \
    /* data parallelism */              \
    X(all_reduce, dist)
