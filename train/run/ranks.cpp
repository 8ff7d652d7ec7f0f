#include "train/run/ranks.h"

#include <cstdint>
#include <cstring>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/sha256.h"

namespace train {

std::vector<std::string> gather_over_ranks(gl::dist::Communicator& c, const std::string& mine) {
    std::vector<std::string> out(size_t(c.world_size()));
    for (int r = 0; r < c.world_size(); r++) {
        uint64_t n = r == c.rank() ? mine.size() : 0;
        c.broadcast(&n, sizeof n, r);
        GL_CHECK(n <= (uint64_t(1) << 30), "rank ", r, " sent ", n, " bytes to gather (the ranks are out of step)");
        std::string& s = out[size_t(r)];
        s = r == c.rank() ? mine : std::string(size_t(n), '\0');
        if (n) c.broadcast(s.data(), size_t(n), r);
    }
    return out;
}

void check_ranks_agree(gl::dist::Communicator& c, const std::string& what, const std::string& digest,
                       const std::string& detail) {
    if (c.world_size() == 1) return;
    const std::vector<std::string> all = gather_over_ranks(c, digest);
    for (size_t r = 1; r < all.size(); r++)
        GL_CHECK(all[r] == all[0], "the ranks disagree on ", what, ": rank ", r, "'s differs from rank 0's",
                 detail.empty() ? "" : " (" + detail + ")");
}

std::string lora_digest(const BucketTrainer& t) {
    const StepGraph& s = *t.graphs()[0].step;
    const gl::Runtime& rt = *t.graphs()[0].rt;
    gl::io::Sha256 h;
    for (gl::ValueId p : s.net->parameters()) {
        const std::vector<float> v = rt.read_f32(p);
        h.update(v.data(), v.size() * sizeof(float));
    }
    return h.hex();
}

UpdateExchange exchange_update(gl::dist::Communicator& c, double my_loss, bool my_stop) {
    struct Part {
        double loss;
        uint64_t stop;
    };
    const Part mine{my_loss, my_stop ? 1u : 0u};
    std::string bytes(sizeof mine, '\0');
    std::memcpy(bytes.data(), &mine, sizeof mine);
    UpdateExchange x;
    for (const std::string& b : gather_over_ranks(c, bytes)) {  // rank order: the same sum everywhere
        GL_CHECK(b.size() == sizeof(Part), "a rank sent ", b.size(), " bytes for its update report");
        Part p{};
        std::memcpy(&p, b.data(), sizeof p);
        x.loss += p.loss;
        x.stop = x.stop || p.stop != 0;
    }
    return x;
}

}  // namespace train
