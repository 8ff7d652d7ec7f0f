// LoRA (lora/) in graphs: gradients against finite differences, initialisation, runtime LoRA =
// LoRA merged into the weights (UNet, CLIP, LoCon), bf16 training graphs, dropout gates.
#include <doctest/doctest.h>

#include "lora_fixtures.h"

TEST_CASE("lora: gradients of a LoRA-wrapped linear match finite differences") {
    Graph g;
    nn::Weights w(g, DType::f32);
    LoraNetwork net(LoraConfig{3, 1.5f, 0.7f});
    net.attach_unet(w);
    const std::string path = "mid_block.attentions.0.transformer_blocks.0.attn1.to_q";
    ValueId x = g.param("x", DType::f32, {2, 4, 6});
    ValueId W, y;
    {
        nn::WeightScope s(w, path);
        W = w.get("weight", {5, 6});
        y = w.linear_hook(g, {w.module_path(), x, gl::linear(g, x, W), {W, kNoValue}});
    }
    ValueId r = g.input("r", DType::f32, {2, 4, 5});
    ValueId loss = sum(g, mul(g, y, r));
    g.mark_output(loss);
    Gradients gr = backward(g, loss);
    REQUIRE(net.modules().size() == 1);
    const lora::Module& m = net.modules()[0];
    CHECK(m.key() == "lora_unet_mid_block_attentions_0_transformer_blocks_0_attn1_to_q");

    std::mt19937 rng(3);
    std::map<ValueId, std::vector<float>> data;
    for (ValueId v : {x, W, r, m.param("lora_down.weight"), m.param("lora_up.weight")}) data[v] = random_vec(size_t(g.shape(v).numel()), 1.0f, rng);
    auto rt = make_cpu_runtime(make_plan(g));
    auto eval = [&]() {
        for (auto& [v, d] : data) rt->write_f32(v, d);
        rt->run();
        return double(rt->read_f32(loss)[0]);
    };
    eval();
    std::map<ValueId, std::vector<float>> analytic;  // read before any finite-difference run
    for (ValueId p : {x, m.param("lora_down.weight"), m.param("lora_up.weight")}) analytic[p] = rt->read_f32(gr[p]);
    for (ValueId p : {x, m.param("lora_down.weight"), m.param("lora_up.weight")}) {
        const std::vector<float>& an = analytic[p];
        double worst = 0.0;
        for (size_t i = 0; i < an.size(); i++) {
            const float keep = data[p][i], h = 0.25f;  // the loss is linear in each of x, down, up: no truncation error
            data[p][i] = keep + h;
            const double lp = eval();
            data[p][i] = keep - h;
            const double lm = eval();
            data[p][i] = keep;
            const double fd = (lp - lm) / (2.0 * h);
            worst = std::max(worst, std::fabs(fd - an[i]) / (1.0 + std::fabs(fd)));
        }
        MESSAGE(g.v(p).name, ": worst rel. error ", worst);
        CHECK(worst < 1e-4);
    }
}

TEST_CASE("lora: init is Kaiming-uniform down, zero up") {
    Graph g;
    nn::Weights w(g, DType::f32);
    LoraNetwork net(LoraConfig{8, 4.0f, 1.0f});
    net.attach_text_encoder(w);
    sd::build_clip(w, g, g.input("ids", DType::i32, {1, 5}), sd::ClipConfig::tiny());
    CHECK(net.modules().size() == 12);  // 2 layers x (q, k, v, out, fc1, fc2)
    auto rt = make_cpu_runtime(make_plan(g));
    net.init(*rt, 1);
    const lora::Module& m = *net.find("lora_te_text_model_encoder_layers_1_mlp_fc2");
    CHECK(m.layer().in == 64);
    const std::vector<float> d = rt->read_f32(m.param("lora_down.weight")), u = rt->read_f32(m.param("lora_up.weight"));
    float mx = 0.0f;
    for (float e : d) mx = std::max(mx, std::fabs(e));
    CHECK(mx <= 1.0f / 8.0f);  // 1/sqrt(64)
    CHECK(mx > 0.9f / 8.0f);
    for (float e : u) CHECK(e == 0.0f);
}

namespace {

// Runs the tiny UNet with the LoRA at runtime and with it merged into a second copy of the
// weights; returns the largest output difference (and checks the LoRA moved the outputs).
double runtime_vs_merged(LoraConfig cfg, size_t expect_modules) {
    const sd::UnetConfig c = sd::UnetConfig::tiny();
    auto build = [&](Graph& g, nn::Weights& w) {
        ValueId eps = sd::unet_forward(w, c, g.input("x", DType::f32, {2, 4, 4, 4}), g.input("t", DType::f32, {2}),
                                       g.input("c", DType::f32, {2, 3, 16}));
        g.mark_output(eps);
        return eps;
    };
    Graph g1, g2;
    nn::Weights w1(g1, DType::f32), w2(g2, DType::f32);
    LoraNetwork net(cfg);
    net.attach_unet(w1);
    ValueId e1 = build(g1, w1), e2 = build(g2, w2);
    auto rt1 = make_cpu_runtime(make_plan(g1)), rt2 = make_cpu_runtime(make_plan(g2));

    std::mt19937 rng(9);
    std::map<std::string, std::vector<float>> by_name;
    for (const nn::WeightEntry& e : w1.entries()) {
        const Shape s = g1.shape(e.id);
        const bool gain = e.name.find("norm") != std::string::npos && e.name.ends_with(".weight");
        std::vector<float> v = random_vec(size_t(s.numel()), s.nd == 1 ? 0.1f : 1.0f / std::sqrt(float(s.last())), rng);
        if (gain)
            for (float& x : v) x += 1.0f;
        by_name[e.name] = v;
        rt1->write_f32(e.id, v);
    }
    for (const nn::WeightEntry& e : w2.entries()) rt2->write_f32(e.id, by_name.at(e.name));
    for (const char* in : {"x", "t", "c"}) {
        ValueId a = kNoValue, b = kNoValue;
        for (ValueId v = 0; v < g1.value_count(); v++)
            if (g1.v(v).role == Role::input && g1.v(v).name == in) a = v;
        for (ValueId v = 0; v < g2.value_count(); v++)
            if (g2.v(v).role == Role::input && g2.v(v).name == in) b = v;
        std::vector<float> d = random_vec(size_t(g1.shape(a).numel()), 1.0f, rng);
        if (std::string(in) == "t") d = {17.0f, 503.0f};
        rt1->write_f32(a, d);
        rt2->write_f32(b, d);
    }
    net.init(*rt1, 4);
    for (const lora::Module& m : net.modules())  // up nonzero, or the LoRA changes nothing
        rt1->write_f32(m.param("lora_up.weight"), random_vec(size_t(m.layer().out * m.rank()), 0.3f, rng));
    rt1->run();
    rt2->run();
    const std::vector<float> base = rt2->read_f32(e2);
    CHECK(lora::merge_into(net, *rt1, Part::unet, w2, *rt2) == expect_modules);
    rt2->run();
    const std::vector<float> a = rt1->read_f32(e1), b = rt2->read_f32(e2);
    double worst = 0.0, moved = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        worst = std::max(worst, double(std::fabs(a[i] - b[i])));
        moved = std::max(moved, double(std::fabs(a[i] - base[i])));
    }
    MESSAGE("runtime vs merged: max abs diff ", worst, " (the LoRA moved outputs by up to ", moved, ")");
    CHECK(moved > 1e-2);
    return worst;
}

}  // namespace

TEST_CASE("lora: a LoRA applied at runtime equals the LoRA merged into the weights (tiny UNet)") {
    CHECK(runtime_vs_merged(LoraConfig{4, 3.0f, 0.8f}, 48) < 1e-5);
    // LoCon adds 8 resnets x (conv1, conv2, time_emb_proj), 5 conv_shortcuts (down_blocks.1's
    // widening resnet and the 4 up resnets on concatenated skips), 1 downsampler, 1 upsampler.
    LoraConfig locon{4, 3.0f, 0.8f};
    locon.conv_dim = 3;
    locon.conv_alpha = 1.5f;
    CHECK(runtime_vs_merged(locon, 48 + 24 + 5 + 2) < 1e-5);
}

TEST_CASE("lora: text encoder LoRA at runtime equals merged (tiny CLIP), and bf16 training graphs give f32 gradients") {
    const sd::ClipConfig c = sd::ClipConfig::tiny();
    Graph g1, g2;
    nn::Weights w1(g1, DType::f32), w2(g2, DType::f32);
    LoraNetwork net(LoraConfig{2, 0.0f, 1.3f});  // alpha 0: alpha = rank
    net.attach_text_encoder(w1);
    ValueId h1 = sd::build_clip(w1, g1, g1.input("ids", DType::i32, {2, 7}), c);
    ValueId h2 = sd::build_clip(w2, g2, g2.input("ids", DType::i32, {2, 7}), c);
    g1.mark_output(h1);
    g2.mark_output(h2);
    auto rt1 = make_cpu_runtime(make_plan(g1)), rt2 = make_cpu_runtime(make_plan(g2));
    std::mt19937 rng(21);
    for (size_t i = 0; i < w1.entries().size(); i++) {
        const nn::WeightEntry &a = w1.entries()[i], &b = w2.entries()[i];
        REQUIRE(a.name == b.name);
        std::vector<float> v = random_vec(size_t(g1.shape(a.id).numel()), 0.2f, rng);
        if (a.name.find("layer_norm") != std::string::npos && a.name.ends_with(".weight"))
            for (float& e : v) e += 1.0f;
        rt1->write_f32(a.id, v);
        rt2->write_f32(b.id, v);
    }
    const std::vector<int32_t> ids = {49406, 5, 17, 900, 3, 999, 2, 49406, 1, 2, 3, 4, 5, 6};
    std::vector<int32_t> ids_small(ids.size());
    for (size_t i = 0; i < ids.size(); i++) ids_small[i] = ids[i] % int32_t(c.vocab);
    for (auto* rt : {rt1.get(), rt2.get()}) {
        const Graph& g = rt->plan().graph;
        for (ValueId v = 0; v < g.value_count(); v++)
            if (g.v(v).role == Role::input) rt->write(v, ids_small.data(), DType::i32);
    }
    net.init(*rt1, 2);
    for (const lora::Module& m : net.modules()) rt1->write_f32(m.param("lora_up.weight"), random_vec(size_t(m.layer().out * 2), 0.3f, rng));
    rt1->run();
    CHECK(lora::merge_into(net, *rt1, Part::text_encoder, w2, *rt2) == 12);
    rt2->run();
    const std::vector<float> a = rt1->read_f32(h1), b = rt2->read_f32(h2);
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    MESSAGE("text encoder runtime vs merged: max abs diff ", worst);
    CHECK(worst < 1e-5);

    // bf16 frozen weights and activations, f32 masters: the branch runs in bf16, the gradients
    // reach the masters in f32; with up = 0 only up gets a gradient (kohya's starting point).
    Graph g;
    nn::Weights w(g, DType::bf16);
    LoraNetwork n16(LoraConfig{4, 1.0f, 1.0f});
    n16.attach_unet(w);
    const sd::UnetConfig uc = sd::UnetConfig::tiny();
    ValueId eps = sd::unet_forward(w, uc, g.input("x", DType::f32, {1, 4, 4, 4}), g.input("t", DType::f32, {1}),
                                   g.input("c", DType::f32, {1, 3, 16}));
    ValueId loss = mse_loss(g, eps, g.input("target", DType::bf16, {1, 4, 4, 4}));
    g.mark_output(loss);
    Gradients gr = backward(g, loss);
    auto rt = make_cpu_runtime(make_plan(g));
    for (const nn::WeightEntry& e : w.entries())
        rt->write_f32(e.id, random_vec(size_t(g.shape(e.id).numel()), 0.2f, rng));
    for (ValueId v = 0; v < g.value_count(); v++)
        if (g.v(v).role == Role::input) rt->write_f32(v, random_vec(size_t(g.shape(v).numel()), 1.0f, rng));
    n16.init(*rt, 3);
    rt->run();
    double up_norm = 0.0, down_norm = 0.0;
    for (const lora::Module& m : n16.modules()) {
        REQUIRE(gr[m.param("lora_down.weight")] != kNoValue);
        REQUIRE(gr[m.param("lora_up.weight")] != kNoValue);
        CHECK(g.dtype(gr[m.param("lora_up.weight")]) == DType::f32);
        for (float e : rt->read_f32(gr[m.param("lora_up.weight")])) up_norm += double(e) * e;
        for (float e : rt->read_f32(gr[m.param("lora_down.weight")])) down_norm += double(e) * e;
    }
    CHECK(std::isfinite(up_norm));
    CHECK(up_norm > 0.0);
    CHECK(down_norm == 0.0);
}

TEST_CASE("lora: rank and module dropout gates (kohya's rank_dropout / module_dropout)") {
    const sd::ClipConfig c = sd::ClipConfig::tiny();
    LoraConfig plain{4, 2.0f, 1.0f}, drop = plain, skip = plain;
    drop.rank_dropout = 0.5f;
    skip.module_dropout = 1.0f;
    struct Net {
        Graph g;
        nn::Weights w{g, DType::f32};
        LoraNetwork net;
        ValueId h;
        std::unique_ptr<Runtime> rt;
        explicit Net(LoraConfig cfg, const sd::ClipConfig& c) : net(cfg) {
            net.attach_text_encoder(w);
            ids = g.input("ids", DType::i32, {2, 5});
            h = sd::build_clip(w, g, ids, c);
            g.mark_output(h);
            rt = make_cpu_runtime(make_plan(g));
        }
        ValueId ids;
    };
    Net a(plain, c), b(drop, c), s(skip, c);
    std::mt19937 rng(31);
    const std::vector<int32_t> ids = {0, 5, 17, 900, 3, 999, 2, 1, 4, 6};
    for (Net* n : {&a, &b, &s}) n->rt->write(n->ids, ids.data(), DType::i32);
    for (size_t i = 0; i < a.w.entries().size(); i++) {
        std::vector<float> v = random_vec(size_t(a.g.shape(a.w.entries()[i].id).numel()), 0.2f, rng);
        for (Net* n : {&a, &b, &s}) n->rt->write_f32(n->w.entries()[i].id, v);
    }
    for (size_t i = 0; i < a.net.parameters().size(); i++) {
        std::vector<float> v = random_vec(size_t(a.g.shape(a.net.parameters()[i]).numel()), 0.3f, rng);
        for (Net* n : {&a, &b, &s}) n->rt->write_f32(n->net.parameters()[i], v);
    }
    CHECK(a.net.modules()[0].gate == kNoValue);
    REQUIRE(b.net.modules()[0].gate != kNoValue);
    CHECK(b.g.shape(b.net.modules()[0].gate) == Shape{2, 1, 4});
    auto diff = [](const std::vector<float>& x, const std::vector<float>& y) {
        double m = 0.0;
        for (size_t i = 0; i < x.size(); i++) m = std::max(m, double(std::fabs(x[i] - y[i])));
        return m;
    };
    a.rt->run();
    const std::vector<float> with_lora = a.rt->read_f32(a.h);
    // Gates at 1 (not training): the same as no dropout at all.
    b.net.sample_dropout(*b.rt, 1, /*training=*/false);
    b.rt->run();
    CHECK(diff(b.rt->read_f32(b.h), with_lora) < 1e-6);
    // Training: gates are 0 or 1 / (1 - p), about half each, and a pure function of the seed.
    b.net.sample_dropout(*b.rt, 7);
    size_t zeros = 0, twos = 0, n = 0;
    std::vector<float> first;
    for (const lora::Module& m : b.net.modules())
        for (float e : b.rt->read_f32(m.gate)) {
            zeros += e == 0.0f, twos += e == 2.0f, n++;
            first.push_back(e);
        }
    CHECK(zeros + twos == n);
    CHECK(zeros > n / 4);
    CHECK(twos > n / 4);
    b.rt->run();
    CHECK(diff(b.rt->read_f32(b.h), with_lora) > 1e-3);
    b.net.sample_dropout(*b.rt, 7);
    size_t i = 0, same = 0;
    for (const lora::Module& m : b.net.modules())
        for (float e : b.rt->read_f32(m.gate)) same += e == first[i++];
    CHECK(same == n);
    // module_dropout 1: every module skipped, the base model's output (up = 0 in `a`).
    s.net.sample_dropout(*s.rt, 3);
    s.rt->run();
    for (const lora::Module& m : a.net.modules())
        a.rt->write_f32(m.param("lora_up.weight"), std::vector<float>(size_t(m.layer().out * 4), 0.0f));
    a.rt->run();
    CHECK(diff(s.rt->read_f32(s.h), a.rt->read_f32(a.h)) < 1e-6);
    // A network dropout outside [0, 1) is refused by name (its behaviour: tests/test_train_dropout.cpp).
    LoraConfig nd = plain;
    nd.dropout = 1.0f;
    CHECK_THROWS_WITH_AS(LoraNetwork{nd}, doctest::Contains("network dropout"), gl::Error);
}
