// The fusion pass: a graph rewrite that folds memory-bound nodes into the kernels beside them.
// The planner runs it on the graph it is given, before recompute (PlanOptions::fusion, on by
// default), so recompute clones the fused nodes and every plan is of the graph that runs.
//
// First cut: adds into epilogues. add(a, b) (an op flagged kOpPlainAdd) becomes P(..., residual
// b) when a is the output of a node P whose op takes a residual (OpDef::take_residual: linear,
// matmul, conv2d, conv2d_grad_input, and the norm gradients of frozen gamma and beta: out =
// op(...) + b, summed in f32 and rounded once), and
//  - the add does not broadcast: a, b and its output have one shape and dtype;
//  - the add is the only node that reads a's bytes (views of them aside), once; a is P's output
//    or a view of all of it in its shape (what fold_param_scales leaves), in the activation arena,
//    computed, not a graph output, and P has no residual yet;
//  - P and the add are both forward or both backward nodes, of one checkpoint segment;
//  - b is ready where P runs: a leaf or made by an earlier node.
// When P has a residual r1 already (it computes p + r1), the sum p + (r1 + b) has r1's maker take b
// when r1 is read by P alone and its maker qualifies as P does (and so on down a chain of such
// residuals): the LoRA join of a block's output projection, base + up, folds into up, and the
// block's residual join h + (base + up) then into base. That sum is reassociated; every other
// fusion keeps the unfused arithmetic (in f32 bit for bit: the product rounded to f32, then the add).
// When both inputs qualify, the one whose producer runs later takes the other (for the LoRA join
// base + up, the up projection; for a sum of gradients, the newer term). The accumulate op of
// gradients over micro-batches updates its input in place and is never an add. Nodes keep their
// places in the node list, so a residual is read no later than the add read it and nothing lives
// longer.
//
// Second, products joined (join_pairs, PlanOptions::pairs): a product P (linear, or matmul with
// its transpose flags) whose residual R is the only output of a product Q of the same op and
// flags becomes one node computing Q's product + P's product (+ Q's bias and residual), summed in
// f32 and rounded once (ops/pair.h; OpDef::join_pair refuses a quantized weight, P's bias, a node
// joined already), when R owns its bytes (no view of it), is in the activation arena, computed,
// no graph output, read by P alone, and Q and P are of one pass and segment. The LoRA join: up =
// linear(h, B s, residual = base) with base = linear(x, W, bias, residual = hidden), and in the
// backward matmul(dh, A, residual = matmul(dy, W)): the K = rank products with a residual were
// memory-bound passes (read 2 x output, write 1 x output). The joined node takes Q's place when
// P's a2, b2 are made before Q runs (no input lives longer), else P's (Q's inputs were made
// earlier; they live until P, as R did). R becomes a view of P's output that no node makes or
// reads. The sum is reassociated (one rounding where base was rounded, then added).
#pragma once
#include "ggml-lite/core/graph.h"

namespace gl {

struct FusionStats {
    int adds = 0;           // adds folded into an epilogue
    int chained = 0;        // of them, sums reassociated: taken by a residual's maker
    int nodes_removed = 0;  // the adds, the views between a product and its add, the joined products
    int pairs = 0;          // products joined to the product their residual is (ops/pair.h)
};

// Returns g fused. Value ids keep their meaning: the fused node writes the add's output; the
// product's former output (and its views) become views of it that no node reads or writes. (In a
// chain, r1 holds r1 + b: it is read by P alone.)
// Joined pairs: the product's output is written by the joined node; Q's output becomes a view of
// it, made and read by no node. join_pairs = false: adds only.
// Throws gl::Error for a graph that already holds recompute clones (fuse the input graph).
Graph fuse_epilogues(const Graph& g, FusionStats* stats = nullptr, bool join_pairs = true);

}  // namespace gl
