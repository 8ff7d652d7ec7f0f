// sdtrain's auto-fit (--vram_limit) as a property, planned for a simulated GPU on the CPU (a CUDA
// context and the graph executables of every plan counted as on CUDA): over random datasets
// (bucket mixes, counts that leave short batches), batches, accumulation, allow-flags, cached or
// encoded latents and sampling, whenever auto-fit picks a configuration the run's own check
// accepts it (prepare() returns and the whole run's predicted peak is within the limit), and the
// pick is monotone in the limit: a larger limit never refuses what a smaller one fitted, nor picks
// a configuration predicted slower.
#include <doctest/doctest.h>

#include <random>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/runtime.h"
#include "sdtrain_fixtures.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

// A GPU as CUDA would hold it: a context outside the plans, the largest node's output as scratch,
// 3 KiB per node of every graph executable in 2 MiB pages, one allocation page.
train::DeviceModel simulated_gpu() {
    train::DeviceModel d;
    d.backend = "cuda";
    d.free_bytes = size_t(1) << 36;
    d.total_bytes = d.free_bytes;
    d.context_bytes = size_t(3) << 20;
    d.context_note = "simulated";
    d.rules.backend = "cuda";
    d.rules.scratch = [](const gl::Graph& g) {
        size_t most = 0;
        for (const gl::Node& n : g.nodes)
            for (gl::ValueId v : n.out) most = std::max(most, g.v(v).bytes());
        return most / 4;
    };
    d.rules.graph = [](const gl::Graph& g) { return gl::cuda_graph_bytes(g); };
    d.rules.page = gl::kCudaAllocationPage;
    return d;
}

struct Trial {
    std::string text;  // for the failure message
    train::RunConfig config;
};

// Buckets of multiples of 8 pixels (the tiny UNet's size multiple), each with 1 to 7 images.
Trial random_trial(std::mt19937& rng, const fs::path& root, const fs::path& model, int index) {
    const int sides[][2] = {{32, 32}, {48, 24}, {24, 48}, {40, 32}, {32, 40}, {48, 48}, {16, 48}};
    std::uniform_int_distribution<int> nb(1, 4), count(1, 7), side(0, 6), coin(0, 1), batch(1, 4), accum(1, 2);
    const fs::path data = root / gl::cat("data", index);
    const fs::path sub = data / "2_things";
    Trial t;
    std::vector<int> used;
    const int buckets = nb(rng);
    for (int b = 0; b < buckets; b++) {
        int s = side(rng);
        while (std::find(used.begin(), used.end(), s) != used.end()) s = (s + 1) % 7;
        used.push_back(s);
        const int n = count(rng);
        for (int i = 0; i < n; i++) {
            const std::string name = gl::cat("b", b, "_", i);
            write_bmp(sub / (name + ".bmp"), sides[s][0], sides[s][1], b * 10 + i);
            write_text(sub / (name + ".txt"), gl::cat("a thing ", i));
        }
        t.text += gl::cat(sides[s][0], "x", sides[s][1], " x", n, " ");
    }
    train::RunConfig c = tiny_config(model, data, root / gl::cat("out", index));
    c.max_train_steps = 10;
    c.train_batch_size = batch(rng);
    c.gradient_accumulation_steps = accum(rng);
    c.network_train_unet_only = coin(rng);
    c.cache_latents = coin(rng);
    c.allow_8bit_optimizer = coin(rng);
    c.allow_cached_text_encoder = coin(rng);
    c.allow_unet_only = coin(rng);
    if (coin(rng)) {
        write_text(root / "prompts.txt", "a thing --w 32 --h 32 --s 2\n");
        c.sample_prompts = (root / "prompts.txt").string();
        c.sample_every_n_steps = 5;
    }
    t.text += gl::cat("| batch ", c.train_batch_size, " x ", c.gradient_accumulation_steps,
                      c.network_train_unet_only ? ", UNet only" : ", TE trained",
                      c.cache_latents ? ", latents cached" : ", VAE on device", c.allow_8bit_optimizer ? ", allow 8bit" : "",
                      c.allow_cached_text_encoder ? ", allow TE cache" : "", c.allow_unet_only ? ", allow UNet only" : "",
                      c.sample_prompts ? ", sampling" : "");
    t.config = c;
    return t;
}

}  // namespace

TEST_CASE("auto-fit: the whole run fits what auto-fit picks, monotone in the limit (random datasets, simulated GPU)") {
    Scratch s("autofit_property");
    const fs::path model = make_tiny_model(s.root);
    const train::DeviceModel gpu = simulated_gpu();
    std::mt19937 rng(20261201);
    int picks = 0, refusals = 0, recomputed = 0;
    for (int trial = 0; trial < 8; trial++) {
        Trial t = random_trial(rng, s.root, model, trial);
        CAPTURE(t.text);
        train::Session free_run(t.config);
        free_run.plan_for(gpu);
        const size_t unconstrained = free_run.prepare().memory.predicted_peak;
        // Limits from well under the unconstrained plan to above it, in order.
        std::vector<size_t> limits;
        std::uniform_real_distribution<double> share(0.35, 1.15);
        for (int k = 0; k < 6; k++) limits.push_back(size_t(double(unconstrained) * share(rng)));
        limits.push_back(unconstrained);
        std::sort(limits.begin(), limits.end());
        bool fitted_before = false;
        double seconds_before = 0;
        for (size_t limit : limits) {
            CAPTURE(limit);
            train::RunConfig c = t.config;
            c.vram_limit = std::to_string(limit);
            train::Session run(c);
            run.plan_for(gpu);
            try {
                const train::RunPlan& p = run.prepare();
                picks++;
                CHECK(p.memory.predicted_peak <= limit);
                CHECK(p.memory.planned_bytes + gpu.context_bytes == p.memory.predicted_peak);
                CHECK(p.memory.predicted_seconds > 0);
                if (fitted_before) CHECK(p.memory.predicted_seconds <= seconds_before * (1 + 1e-9));
                if (p.configuration.find("recompute budget") != std::string::npos) recomputed++;
                fitted_before = true;
                seconds_before = p.memory.predicted_seconds;
            } catch (const train::PlanRefused& e) {
                refusals++;
                CHECK_MESSAGE(!fitted_before, "a larger limit refused what a smaller one fitted: ", e.what());
                // Refused: the advice lists the changes, each disallowed one with the flag it needs.
                const std::string m = e.what();
                CHECK(m.find("what would fit within") != std::string::npos);
            }
        }
        CHECK(fitted_before);  // the unconstrained plan's own size fits
    }
    MESSAGE(picks, " picks (", recomputed, " with recompute), ", refusals, " refusals");
    CHECK(refusals > 0);
    CHECK(recomputed > 0);
}

TEST_CASE("auto-fit: a refusal lists only what the flags given allow as choices, the rest with the flag each needs") {
    Scratch s("autofit_advice");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    c.train_batch_size = 4;
    c.gradient_accumulation_steps = 1;
    train::Session free_run(c);
    free_run.plan_for(simulated_gpu());
    const size_t unconstrained = free_run.prepare().memory.predicted_peak;
    c.vram_limit = std::to_string(simulated_gpu().context_bytes + unconstrained / 10);
    train::Session run(c);
    run.plan_for(simulated_gpu());
    try {
        run.prepare();
        FAIL("a tenth of the plan fitted");
    } catch (const train::PlanRefused& e) {
        const std::string m = e.what();
        INFO(m);
        CHECK(m.find("no configuration allowed fits") != std::string::npos);
        CHECK(m.find("needs --allow_8bit_optimizer") != std::string::npos);
        CHECK(m.find("needs --allow_unet_only") != std::string::npos);
        CHECK(m.find("chose") == std::string::npos);
    }
    // A simulated session plans; it does not run.
    c.vram_limit.reset();
    train::Session sim(c);
    sim.plan_for(simulated_gpu());
    CHECK_THROWS_WITH_AS(sim.run(), doctest::Contains("simulated"), gl::Error);
}

TEST_CASE("sdtrain plan: a CPU run larger than the host's available memory is refused before anything is allocated") {
    Scratch s("host_memory");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    train::Session free_run(c);
    const train::RunPlan& p = free_run.prepare();  // the host's own memory: the tiny run fits
    CHECK(p.memory.planned_bytes <= p.memory.limit);  // the limit is the host's available memory
    CHECK(p.memory.by_category.find("of available host memory") != std::string::npos);
    train::DeviceModel host;  // a host with less memory available than the plan needs
    host.backend = "cpu";
    host.free_bytes = p.memory.planned_bytes - 1;
    train::Session small(c);
    small.plan_for(host);
    try {
        small.prepare();
        FAIL("a plan above the host's memory was accepted");
    } catch (const train::PlanRefused& e) {
        const std::string m = e.what();
        INFO(m);
        CHECK(m.find("of available host memory") != std::string::npos);
        CHECK(m.find("nothing was loaded") != std::string::npos);
        CHECK(m.find("what would fit within") != std::string::npos);
    }
}
