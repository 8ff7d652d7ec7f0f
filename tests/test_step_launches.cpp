// The nodes of the full-size SD1.5 LoRA step (512x512, kohya's targets, rank 16, bf16): the noise
// drawn in the graph, the 384 LoRA masters cast in one node per scale and their gradients back in
// one, the 192 branch scales folded into the up weights' copies, one update node for the LoRA group.
#include <doctest/doctest.h>

#include "ggml-lite/core/graph.h"
#include "train/step.h"

using namespace gl;

namespace {

int count_op(const Graph& g, Op op, bool backward) {
    int n = 0;
    for (const Node& x : g.nodes) n += x.op == op && x.backward == backward;
    return n;
}

}  // namespace

TEST_CASE("train step: the SD1.5 LoRA step draws its noise, casts its masters in one node and updates them in one") {
    for (const float alpha : {16.0f, 8.0f}) {  // branch scale 1 (downs and ups alike), 0.5 (the ups apart)
        CAPTURE(alpha);
        train::StepOptions o;
        o.lora = lora::LoraConfig{16, alpha, 1.0f};
        const auto s = train::build_step(o);
        const Graph& g = s->g;
        const int masters = int(s->net->parameters().size());
        CHECK(masters == 384);
        const int casts = alpha == 16.0f ? 1 : 2;
        CHECK(count_op(g, Op::cast_multi, false) == casts);
        CHECK(count_op(g, Op::cast_multi, true) == casts);
        int cast_in = 0;
        for (const Node& n : g.nodes)
            if (n.op == Op::cast_multi && !n.backward) cast_in += int(n.in.size());
        CHECK(cast_in == masters);
        for (const Node& n : g.nodes)  // no master is cast on its own
            if (n.op == Op::cast) CHECK(g.v(n.in[0]).role != Role::param);
        // What is left of scale: none on a LoRA branch, forward or backward.
        CHECK(count_op(g, Op::scale, false) + count_op(g, Op::scale, true) <= 2);
        // One update of the LoRA group, one of the skip probe's (train/update.h).
        CHECK(count_op(g, Op::adamw_step, true) + count_op(g, Op::adamw_step, false) == 2);
        CHECK(count_op(g, Op::normal_noise, false) == 1);
        CHECK(g.v(s->noise).role == Role::computed);
        CHECK(g.v(s->draw).role == Role::input);
    }
}
