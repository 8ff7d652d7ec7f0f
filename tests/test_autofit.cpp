// Auto-fit (the generic search over caller-built configurations and the SD1.5 step's), sizes as
// users write them, the runtimes' memory limit, and the cost model's fit to a profile.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/autofit.h"
#include "models/sd15/sd_config.h"
#include "ggml-lite/core/cost_model.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/recompute_budget.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"
#include "ggml-lite/ops/rng.h"
#include "train/autofit.h"

using namespace gl;

namespace {

// An MLP training graph whose activations grow with the batch: a configuration to fit.
Graph mlp(int64_t batch, int layers = 6, int64_t width = 64) {
    Graph g;
    ValueId h = g.input("x", DType::f32, {batch, width});
    for (int i = 0; i < layers; i++) {
        Segment s(g, cat("layer", i));
        ValueId n = layer_norm(g, h, g.weight(cat("g", i), DType::f32, {width}), g.weight(cat("b", i), DType::f32, {width}),
                               1e-5f);
        h = silu(g, linear(g, n, g.param(cat("w", i), DType::f32, {width, width})));
    }
    ValueId loss = mean(g, mul(g, h, h));
    g.mark_output(loss);
    backward(g, loss);
    return g;
}

}  // namespace

TEST_CASE("bytes: sizes as users write them") {
    CHECK(parse_bytes("8G") == size_t(8) << 30);
    CHECK(parse_bytes("8GiB") == size_t(8) << 30);
    CHECK(parse_bytes("8gb") == size_t(8) << 30);
    CHECK(parse_bytes("7.5G") == size_t(15) << 29);
    CHECK(parse_bytes("512M") == size_t(512) << 20);
    CHECK(parse_bytes("8192MiB") == size_t(8) << 30);
    CHECK(parse_bytes("4096K") == size_t(4) << 20);
    CHECK(parse_bytes("1T") == size_t(1) << 40);
    CHECK(parse_bytes("123") == 123);
    CHECK(parse_bytes("123B") == 123);
    for (const char* bad : {"", "G", "8X", "8 G", "-1G", " 8G", "8GG", "nanG", "1e30G"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(parse_bytes(bad), gl::Error);
    }
    CHECK(format_bytes(size_t(15) << 29) == "7.50 GiB");
    CHECK(format_bytes(size_t(512) << 20) == "512.0 MiB");
    CHECK(format_bytes(96) == "96 B");
}

TEST_CASE("runtime: a plan above the memory limit is refused before anything is allocated") {
    const Plan p = make_plan(mlp(32));
    RuntimeOptions o;
    o.memory_limit = p.total_bytes();
    CHECK(make_cpu_runtime(p, o)->allocated_bytes(Category::activations) == p.arena_bytes[size_t(Category::activations)]);
    o.memory_limit = p.total_bytes() - 1;
    try {
        make_cpu_runtime(p, o);
        FAIL("a plan above the limit was accepted");
    } catch (const gl::Error& e) {
        const std::string m = e.what();
        CHECK(m.find(std::to_string(p.total_bytes()) + " bytes") != std::string::npos);
        CHECK(m.find(std::to_string(o.memory_limit) + " bytes") != std::string::npos);
        CHECK(m.find("nothing was allocated") != std::string::npos);
    }
    CHECK_THROWS_AS(check_memory_limit(p, 1, RuntimeOptions{p.total_bytes()}, "test"), gl::Error);
    check_memory_limit(p, 1 << 30, RuntimeOptions{}, "test");  // 0: no limit
}

namespace {

// One configuration whose run is one MLP step (recomputable) and, optionally, a forward-only
// graph beside it on the same memory (a sampler's, say).
FitOption mlp_option(int64_t batch, double runs, size_t extra, int64_t beside_batch = 0) {
    FitOption o;
    o.label = cat("batch ", batch);
    o.build = [=] {
        auto graphs = std::make_shared<std::vector<Graph>>();
        graphs->push_back(mlp(batch));
        if (beside_batch) {
            Graph f;
            ValueId h = f.input("x", DType::f32, {beside_batch, 64});
            for (int i = 0; i < 6; i++)
                h = silu(f, linear(f, h, f.weight(cat("f", i), DType::f32, {64, 64})));
            f.mark_output(h);
            graphs->push_back(std::move(f));
        }
        FitBuild b;
        b.owner = graphs;
        b.extra_bytes = extra;
        b.graphs.push_back({&(*graphs)[0], "step", true, runs, -1});
        if (beside_batch) b.graphs.push_back({&(*graphs)[1], "beside", false, 0, -1});
        return b;
    };
    return o;
}

size_t layout_total(const std::vector<Plan>& plans, const LayoutRules& rules) {
    std::vector<const Plan*> ptrs;
    for (const Plan& p : plans) ptrs.push_back(&p);
    return make_shared_layout(ptrs, rules).total_bytes();
}

}  // namespace

TEST_CASE("auto-fit: the fastest configuration that fits, recompute only where needed, alternatives listed") {
    // Batch 64 in one run, or 32 x 2 and 16 x 4 accumulated: the same effective batch.
    std::vector<FitOption> options;
    for (int64_t b : {64, 32, 16}) options.push_back(mlp_option(b, double(64 / b), 1000));
    const size_t none64 = make_plan(mlp(64)).total_bytes() + 1000, none32 = make_plan(mlp(32)).total_bytes() + 1000;
    const Graph g64 = mlp(64);
    RecomputeSearch search(g64, {});
    const size_t least64 = search.min_bytes() + 1000;
    REQUIRE(least64 < none32);

    FitSettings st;
    st.limit = none64;  // everything fits: the single run of 64 is fastest
    FitResult r = auto_fit(options, st);
    REQUIRE(r.chosen());
    CHECK(r.chosen()->label == "batch 64");
    CHECK(r.chosen()->recompute == Recompute::none);
    CHECK(r.rows.size() == 3);
    for (size_t k = 1; k < r.rows.size(); k++) CHECK(r.rows[k - 1].seconds <= r.rows[k].seconds);
    REQUIRE(r.choice.plans.size() == 1);
    CHECK(r.choice.layout.total_bytes() + 1000 == r.chosen()->peak_bytes);

    st.limit = (least64 + none32) / 2;  // 64 fits only with recompute; whether it beats 32 x 2 is the model's call
    r = auto_fit(options, st);
    REQUIRE(r.chosen());
    INFO(r.table());
    for (const FitRow& row : r.rows)
        if (row.fits) CHECK(row.peak_bytes <= st.limit);
    // The choice's plans are the run: laid out again they take what the row says.
    CHECK(layout_total(r.choice.plans, st.rules) + 1000 == r.chosen()->peak_bytes);
    CHECK(r.table().find("* ") != std::string::npos);

    st.limit = least64 - 1;  // 64 does not fit at all
    r = auto_fit(options, st);
    for (const FitRow& row : r.rows)
        if (row.label == "batch 64") {
            CHECK(!row.fits);
            if (row.planned) CHECK(row.least_bytes >= least64 - 1000);
        }

    st.limit = 4096;  // nothing fits: the weights alone are larger
    r = auto_fit(options, st);
    CHECK(r.chosen() == nullptr);
    CHECK(r.choice.plans.empty());
    CHECK(r.table().find("nothing fits") != std::string::npos);
    for (const FitRow& row : r.rows) CHECK(row.note.find("alone needs") != std::string::npos);

    // Advice: every row says what it needs.
    options[1].needs = "--allow_more";
    st.limit = none64;
    r = auto_fit(options, st);
    CHECK(r.table(true).find("what would fit within") != std::string::npos);
    CHECK(r.table(true).find("needs --allow_more") != std::string::npos);
    CHECK(r.table(true).find("chose") == std::string::npos);

    st.limit = 0;
    CHECK_THROWS_AS(auto_fit(options, st), gl::Error);
    st.limit = none64;
    options[1].build = []() -> FitBuild { fail("no such configuration"); };
    CHECK_THROWS_WITH_AS(auto_fit(options, st), doctest::Contains("batch 32"), gl::Error);
    options[1].build = [] { return FitBuild{}; };
    CHECK_THROWS_WITH_AS(auto_fit(options, st), doctest::Contains("built no graphs"), gl::Error);
}

TEST_CASE("auto-fit: the whole layout fits, graph executables and graphs that cannot recompute included") {
    // Like a CUDA runtime: bytes per node of every planned graph, so recompute (more nodes) costs
    // memory too, and a forward graph beside the step shares the activation arena.
    LayoutRules rules;
    rules.backend = "cpu";
    rules.graph = [](const Graph& g) { return g.nodes.size() * size_t(4096); };
    rules.page = 1 << 16;
    std::vector<FitOption> options{mlp_option(64, 1, 1000, 16)};
    const FitBuild b = options[0].build();
    std::vector<Plan> none{make_plan(*b.graphs[0].graph), make_plan(*b.graphs[1].graph)};
    FitSettings st;
    st.rules = rules;
    st.limit = layout_total(none, rules) + 1000;  // exactly none's
    FitResult r = auto_fit(options, st);
    REQUIRE(r.chosen());
    CHECK(r.chosen()->recompute == Recompute::none);
    CHECK(r.chosen()->peak_bytes == st.limit);
    const Graph g64 = mlp(64);
    RecomputeSearch search(g64, {});
    const Plan least = search.plan(search.min_bytes());
    REQUIRE(least.graph.nodes.size() > none[0].graph.nodes.size());
    std::vector<Plan> least_run{least, none[1]};
    const size_t least_total = layout_total(least_run, rules) + 1000;
    for (size_t limit : {st.limit - 1, (st.limit + least_total) / 2, least_total}) {
        CAPTURE(limit);
        st.limit = limit;
        r = auto_fit(options, st);
        REQUIRE(r.chosen());
        CHECK(r.chosen()->recompute == Recompute::budget);
        CHECK(r.chosen()->peak_bytes <= limit);
        CHECK(layout_total(r.choice.plans, rules) + 1000 == r.chosen()->peak_bytes);
        CHECK(r.choice.plans[1].recompute_nodes == 0);  // the forward graph is planned as it is
    }
    st.limit = least_total - 1;  // below the least plan with its executables
    r = auto_fit(options, st);
    CHECK(r.chosen() == nullptr);
    CHECK(r.rows[0].least_bytes > 0);
    CHECK(r.rows[0].least_bytes <= least_total);
}

TEST_CASE("auto-fit: the SD1.5 step at 512x512, effective batch 8, on 8 and 5 GiB devices (planned only)") {
    train::AutoFitRequest r;
    r.step.lora = lora::LoraConfig{16, 16.0f, 1.0f};
    r.step.batch = 8;
    r.micro_batches = {8, 4};
    r.cache_text_encoder = true;
    r.vram = parse_bytes("8G");
    r.reserve = parse_bytes("589M");  // the H200's CUDA context and the step's CUDA workspace
    train::AutoFitChoice c = train::auto_fit_step(r);
    MESSAGE(c.result.table());
    CHECK(c.step.batch == 8);  // the whole batch in one run fits
    CHECK(c.step.grad_accum == 1);
    CHECK(c.cache_text_encoder);
    REQUIRE(c.budgets.size() == 1);
    const Plan p = make_plan(train::build_step(c.step)->g, c.plan_options(0));
    CHECK(p.total_bytes() + r.reserve <= r.vram);

    r.vram = parse_bytes("5G");
    r.allow_8bit_optimizer = true;
    c = train::auto_fit_step(r);
    MESSAGE(c.result.table());
    CHECK(c.recompute == Recompute::budget);
    CHECK(c.step.batch * c.step.grad_accum == 8);
    const Plan q = make_plan(train::build_step(c.step)->g, c.plan_options(0));
    CHECK(q.total_bytes() + r.reserve <= r.vram);

    r.vram = parse_bytes("1G");
    CHECK_THROWS_WITH_AS(train::auto_fit_step(r), doctest::Contains("no configuration fits"), gl::Error);
    r.micro_batches = {3};
    CHECK_THROWS_AS(train::auto_fit_step(r), gl::Error);
}

TEST_CASE("graph_flops: a GEMM's 2MNK, views nothing, elementwise ops their element count at most") {
    Graph g;
    const ValueId a = g.input("a", DType::f32, Shape{3, 5, 7});
    const ValueId w = g.input("w", DType::f32, Shape{11, 7});
    const ValueId y = linear(g, a, w);  // [3, 5, 11]: 2 * 15 * 11 * 7 FLOPs
    g.mark_output(reshape(g, y, Shape{15, 11}));
    const double f = graph_flops(g);
    CHECK(f >= 2.0 * 15 * 11 * 7);
    CHECK(f <= 2.0 * 15 * 11 * 7 + 15 * 11);
    Graph e;
    e.mark_output(reshape(e, e.input("x", DType::f32, Shape{4, 4}), Shape{16}));
    CHECK(graph_flops(e) == 0.0);
}

TEST_CASE("cost model: a fit to node times recovers the constants they were made with") {
    Graph g = mlp(256, 4, 512);  // linears bound by their flops, norms and activations by their bytes
    const Plan p = make_plan(g);
    CostModel truth;
    truth.flops_per_s = 50e12;
    truth.bytes_per_s = 1.5e12;
    truth.launch_s = 6e-6;
    std::vector<double> ms;
    double step = 0;
    for (const Node& n : p.graph.nodes) {
        ms.push_back(truth.node_seconds(p.graph, n) * 1e3);
        step += ms.back();
    }
    const CostModel fit = fit_cost_model(p.graph, ms, step);
    CHECK(std::abs(fit.launch_s / truth.launch_s - 1) < 0.02);
    CHECK(std::abs(fit.flops_per_s / truth.flops_per_s - 1) < 0.05);
    CHECK(std::abs(fit.bytes_per_s / truth.bytes_per_s - 1) < 0.05);
    CHECK(fit.step_scale == doctest::Approx(1.0));
    CHECK(std::abs(fit.graph_seconds(p.graph) * 1e3 / step - 1) < 1e-9);  // the step time is matched exactly
    for (const Node& n : p.graph.nodes) CHECK(std::abs(fit.op_scale[size_t(n.op)] - 1) < 0.05);  // the truth has none
    // A step measured twice as long as the profile (eager kernels against a replay the other way
    // round): the step scale says so; the op scales stay.
    const CostModel slow = fit_cost_model(p.graph, ms, 2 * step);
    CHECK(slow.step_scale == doctest::Approx(2.0));
    CHECK(std::abs(slow.graph_seconds(p.graph) * 1e3 / (2 * step) - 1) < 1e-9);
    CHECK(slow.op_scale == fit.op_scale);
    // Ops whose kernels are slower than the rates say get their own scale; each op's total is matched.
    std::vector<double> ms2 = ms;
    for (size_t i = 0; i < ms2.size(); i++)
        if (p.graph.nodes[i].op == Op::layer_norm) ms2[i] *= 3;
    const CostModel per_op = fit_cost_model(p.graph, ms2);
    double ln = 0, ln_pred = 0;
    for (size_t i = 0; i < ms2.size(); i++)
        if (p.graph.nodes[i].op == Op::layer_norm) {
            ln += ms2[i];
            ln_pred += per_op.node_seconds(p.graph, p.graph.nodes[i]) * 1e3;
        }
    CHECK(std::abs(ln_pred / ln - 1) < 1e-9);
    CHECK(per_op.code().find("layer_norm") != std::string::npos);  // pasteable, scales named
    CHECK_THROWS_AS(fit_cost_model(p.graph, {1.0}), gl::Error);
    CHECK_THROWS_AS(fit_cost_model(p.graph, std::vector<double>(p.graph.nodes.size(), 0.0)), gl::Error);
    CHECK_THROWS_AS(fit_cost_model(p.graph, ms, -1.0), gl::Error);
    CHECK_THROWS_AS(cost_model_rows(fit, p.graph, {1.0}), gl::Error);
}

TEST_CASE("cost model: a synthetic profile with known per-op scales, fitted and reported op by op") {
    // Layers of very different widths: every op has launch-bound nodes and large ones, which is
    // what tells an op's scale apart from the constants.
    Graph g;
    const int64_t batch = 256;
    const std::vector<int64_t> widths = {32, 1024, 2048, 48, 1536, 1536, 64, 32};
    ValueId h = g.input("x", DType::f32, {batch, widths[0]});
    for (size_t i = 1; i < widths.size(); i++) {
        const int64_t w = widths[i];
        h = linear(g, h, g.param(cat("w", i), DType::f32, {w, widths[i - 1]}));
        h = silu(g, layer_norm(g, h, g.weight(cat("g", i), DType::f32, {w}), g.weight(cat("b", i), DType::f32, {w}), 1e-5f));
    }
    ValueId loss = mean(g, mul(g, h, h));
    g.mark_output(loss);
    backward(g, loss);
    const Plan p = make_plan(g);

    CostModel truth;
    truth.flops_per_s = 40e12;
    truth.bytes_per_s = 1.2e12;
    truth.launch_s = 5e-6;
    truth.op_scale.assign(size_t(kOpCount), 1.0);
    std::vector<int> present(size_t(kOpCount), 0);
    for (const Node& n : p.graph.nodes) present[size_t(n.op)] = 1;
    int k = 0;
    for (size_t op = 0; op < present.size(); op++)
        if (present[op]) truth.op_scale[op] = 0.6 + 0.35 * (k++ % 5);  // 0.6 .. 2.0
    REQUIRE(k >= 6);
    // Measured: the truth with +-2 % of deterministic noise per node.
    std::vector<double> ms;
    double total = 0;
    for (size_t i = 0; i < p.graph.nodes.size(); i++) {
        const double noise = 1 + 0.04 * (rng_uniform(7, i) - 0.5);
        ms.push_back(truth.node_seconds(p.graph, p.graph.nodes[i]) * 1e3 * noise);
        total += ms.back();
    }

    const CostModel fit = fit_cost_model(p.graph, ms, 0.8 * total);
    MESSAGE(cost_model_report(fit, p.graph, ms));
    CHECK(fit.step_scale == doctest::Approx(0.8));
    CHECK(fit.graph_seconds(p.graph) * 1e3 == doctest::Approx(0.8 * total).epsilon(1e-9));
    // The scales are found up to one common factor r, which the constants carry the other way.
    const size_t lin = size_t(Op::linear);
    REQUIRE(present[lin]);
    const double r = fit.op_scale[lin] / truth.op_scale[lin];
    for (size_t op = 0; op < present.size(); op++) {
        if (!present[op] || !op_def(Op(op)).cost || (op_def(Op(op)).flags & kOpView)) continue;
        CAPTURE(op_name(Op(op)));
        CHECK(fit.op_scale[op] / truth.op_scale[op] == doctest::Approx(r).epsilon(0.03));
    }
    CHECK(fit.flops_per_s / truth.flops_per_s == doctest::Approx(r).epsilon(0.03));
    CHECK(fit.bytes_per_s / truth.bytes_per_s == doctest::Approx(r).epsilon(0.03));
    CHECK(fit.launch_s / truth.launch_s == doctest::Approx(1 / r).epsilon(0.03));
    // The constants alone predict the profile's total; node by node the model is as close as the noise.
    const std::vector<CostModelRow> rows = cost_model_rows(fit, p.graph, ms);
    REQUIRE(rows.back().op == "total");
    CHECK(rows.back().rates_ms == doctest::Approx(total).epsilon(1e-9));
    CHECK(rows.back().model_ms == doctest::Approx(total).epsilon(1e-9));
    CHECK(rows.back().node_error < 0.015);
    // Per op, measured over the rates is the op's own scale (not one figure for every op, which is
    // what a report of the scaled model against its own fit shows), and it is the truth's up to r.
    std::vector<double> seen;
    for (size_t i = 0; i + 1 < rows.size(); i++) {
        const CostModelRow& row = rows[i];
        CAPTURE(row.op);
        CHECK(row.scale == doctest::Approx(row.ratio()).epsilon(1e-6));
        CHECK(row.model_ms == doctest::Approx(row.measured_ms).epsilon(1e-6));
        CHECK(row.node_error < 0.03);
        for (size_t op = 0; op < present.size(); op++)
            if (row.op == op_name(Op(op))) CHECK(row.ratio() / truth.op_scale[op] == doctest::Approx(r).epsilon(0.03));
        seen.push_back(row.ratio());
    }
    std::sort(seen.begin(), seen.end());
    CHECK(seen.back() / seen.front() > 3.0);
    // The default model against the same profile: no scales (1 for every op), model = rates.
    for (const CostModelRow& row : cost_model_rows(CostModel{}, p.graph, ms)) {
        CHECK(row.scale == 1.0);
        CHECK(row.model_ms == doctest::Approx(row.rates_ms));
    }
    const std::string rep = cost_model_report(fit, p.graph, ms);
    for (const char* want : {"linear", "layer_norm", "meas/rate", "node err", "total", "step scale 0.8"}) {
        CAPTURE(want);
        CHECK(rep.find(want) != std::string::npos);
    }
}

TEST_CASE("auto-fit: the largest batch without accumulation, within a slowdown and with any recompute (tiny UNet)") {
    train::AutoFitRequest r;
    r.step.config = sd::sd_config(sd::UnetConfig::tiny());
    r.step.context_tokens = 8;
    r.step.latent_h = r.step.latent_w = 8;
    r.step.lora = lora::LoraConfig{4, 4.0f, 1.0f};
    r.step.batch = 3;  // ignored: every batch is fitted alone
    r.cache_text_encoder = true;
    r.reserve = 4096;
    auto planned = [&](int64_t b, bool least) {
        train::StepOptions o = r.step;
        o.batch = b;
        const auto s = train::build_step(o);
        return (least ? RecomputeSearch(s->g, {}).min_bytes() : make_plan(s->g).total_bytes()) + r.reserve;
    };
    // What fits at batch b: nothing, or the predicted step and the same without recompute.
    auto fit_at = [&](int64_t b) -> std::pair<double, double> {
        train::AutoFitRequest q = r;
        q.step.batch = b;
        q.micro_batches = {b};
        try {
            const train::AutoFitChoice c = train::auto_fit_step(q);
            const FitRow& row = *c.result.chosen();
            return {row.seconds, row.seconds - row.recompute_seconds};
        } catch (const gl::Error&) {
            return {0.0, 0.0};
        }
    };
    train::BatchSearch s;
    s.max_slowdown = 1.10;
    s.max_batch = 64;
    r.vram = planned(6, false) + 512;  // batch 6 fits without recompute
    const train::BatchFit f = train::largest_batch(r, s);
    MESSAGE("batch ", f.batch, " (", f.seconds / f.none_seconds, "x), any recompute ", f.any_batch, ", ", f.probes,
            " probes");
    REQUIRE(f.batch >= 6);
    CHECK(f.choice.step.batch == f.batch);
    CHECK(f.choice.step.grad_accum == 1);
    CHECK(f.seconds / f.none_seconds <= s.max_slowdown);
    const Plan p = make_plan(train::build_step(f.choice.step)->g, f.choice.plan_options(0));
    CHECK(p.total_bytes() + r.reserve <= r.vram);
    const auto next = fit_at(f.batch + 1);
    CHECK((next.first == 0 || next.first / next.second > s.max_slowdown));
    CHECK(f.any_batch >= f.batch);
    CHECK(f.any_batch < s.max_batch);
    CHECK(fit_at(f.any_batch).first > 0);
    CHECK(fit_at(f.any_batch + 1).first == 0);
    CHECK(planned(f.any_batch, true) <= r.vram);
    CHECK(planned(f.any_batch + 1, true) > r.vram);
    CHECK(f.any_seconds >= f.any_none_seconds);
    CHECK(!f.batch1_needs_recompute);
    CHECK(f.probes < 16);

    r.vram = (planned(1, true) + planned(1, false)) / 2;  // batch 1 fits only with recompute
    s.max_slowdown = 10;
    const train::BatchFit tight = train::largest_batch(r, s);
    CHECK(tight.batch1_needs_recompute);
    CHECK(tight.batch >= 1);
    CHECK(tight.choice.recompute == Recompute::budget);
    r.vram = planned(1, true) - 1;  // nothing fits
    const train::BatchFit none = train::largest_batch(r, s);
    CHECK(none.batch == 0);
    CHECK(none.any_batch == 0);
    CHECK(none.batch1_needs_recompute);
    s.max_slowdown = 0.5;
    CHECK_THROWS_AS(train::largest_batch(r, s), gl::Error);
}

TEST_CASE("auto-fit: the largest batch over a sweep of budgets is monotone and its plan within the budget (tiny UNet)") {
    train::AutoFitRequest r;
    r.step.config = sd::sd_config(sd::UnetConfig::tiny());
    r.step.context_tokens = 8;
    r.step.latent_h = r.step.latent_w = 8;
    r.step.lora = lora::LoraConfig{4, 4.0f, 1.0f};
    r.cache_text_encoder = true;
    r.reserve = 64 << 10;  // a context beside the plans, as bench_presets counts one
    auto planned = [&](int64_t b, bool least) {
        train::StepOptions o = r.step;
        o.batch = b;
        const auto s = train::build_step(o);
        return (least ? RecomputeSearch(s->g, {}).min_bytes() : make_plan(s->g).total_bytes()) + r.reserve;
    };
    train::BatchSearch s;
    s.max_slowdown = 1.05;
    s.max_batch = 64;
    const size_t lo = planned(1, true), hi = planned(12, false);
    int64_t last = 0, last_any = 0;
    for (int k = 0; k <= 6; k++) {
        r.vram = lo + (hi - lo) * size_t(k) / 6;
        const train::BatchFit f = train::largest_batch(r, s);
        CAPTURE(r.vram);
        CAPTURE(f.batch);
        CAPTURE(f.any_batch);
        CHECK(f.any_batch >= 1);  // batch 1 with the least recompute fits from the first budget on
        CHECK(f.batch >= last);
        CHECK(f.any_batch >= last_any);
        CHECK(f.any_batch >= f.batch);
        last = f.batch;
        last_any = f.any_batch;
        if (f.batch == 0) continue;
        CHECK(f.seconds / f.none_seconds <= s.max_slowdown * (1 + 1e-12));
        const Plan p = make_plan(train::build_step(f.choice.step)->g, f.choice.plan_options(0));
        CHECK(p.total_bytes() + r.reserve <= r.vram);
        CHECK(p.total_bytes() + r.reserve == f.choice.result.chosen()->peak_bytes);  // predicted = planned
    }
    CHECK(last >= 12);  // the last budget holds batch 12 without recompute
}
