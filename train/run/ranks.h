// What the ranks of a data-parallel sdtrain run check and share beside the step graphs'
// all-reduce, over the communicator's host collectives (broadcast: every implementation carries
// host bytes, NCCL's through its TCP bootstrap):
// - gather: every rank's bytes, in rank order, on every rank;
// - agree: every rank's digest of something that must be equal (the resolved configuration and
//   the plan at the start; the LoRA at the start, at every save and at the end); a difference is
//   a gl::Error on every rank naming the first rank that differs from rank 0 and what;
// - the per-update exchange: the rank's part of the loss and its stop request (Ctrl-C reaching
//   one rank stops all of them after the same update).
// Every call is a collective: the ranks make the same calls in the same order.
#pragma once
#include <string>
#include <vector>

#include "ggml-lite/dist/communicator.h"
#include "train/bucket_trainer.h"

namespace train {

std::vector<std::string> gather_over_ranks(gl::dist::Communicator& c, const std::string& mine);

// Throws gl::Error on every rank when a rank's `digest` is not rank 0's: "ranks disagree on
// <what>: rank 1's differs from rank 0's (<detail>)".
void check_ranks_agree(gl::dist::Communicator& c, const std::string& what, const std::string& digest,
                       const std::string& detail = "");

// The SHA-256 of every LoRA parameter's f32 bytes, in the network's order (graph 0 holds them).
std::string lora_digest(const BucketTrainer& t);

struct UpdateExchange {
    double loss = 0;    // the ranks' sum: the global batch's loss
    bool stop = false;  // any rank asked to stop
};
UpdateExchange exchange_update(gl::dist::Communicator& c, double my_loss, bool my_stop);

}  // namespace train
