// sdtrain with a schedule-free optimizer: kohya saves and samples between optimizer.eval() and
// .train(), so the LoRA files hold x = lerp(y, z, 1 - 1 / beta1) while training continues from y.
// Each step's saved file is checked against the x computed from that step's state (y: the state's
// LoRA masters, z: its optimizer state), and the run's trajectory against one that saves nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/optim_schedulefree.h"
#include "sdtrain_fixtures.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

std::map<std::string, std::vector<float>> read_all(const fs::path& file) {
    const gl::io::SafetensorsFile f(file.string());
    std::map<std::string, std::vector<float>> r;
    for (const gl::io::TensorInfo& t : f.list()) {
        std::vector<float> x(size_t(t.numel()));
        f.read(t.name, x.data(), gl::DType::f32);
        r[t.name] = std::move(x);
    }
    return r;
}

// Every weight value of a LoRA file (alphas left out), sorted: names and layouts differ between a
// kohya file and the state's masters, the values do not.
std::vector<float> sorted_values(const std::map<std::string, std::vector<float>>& tensors, bool kohya) {
    std::vector<float> all;
    for (const auto& [name, x] : tensors)
        if (!kohya || !name.ends_with(".alpha")) all.insert(all.end(), x.begin(), x.end());
    std::sort(all.begin(), all.end());
    return all;
}

}  // namespace

TEST_CASE("sdtrain AdamWScheduleFree: the saved LoRA holds the eval weights x, and training continues from y") {
    Scratch s("schedulefree");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "saves");
    c.optimizer_type = "AdamWScheduleFree";
    c.optimizer_args = {"betas=(0.8, 0.99)", "warmup_steps=2"};
    c.max_train_steps = 4;
    c.save_every_n_steps = 1;
    c.save_state = true;
    train::Session(c).run();

    const float w = float(1.0 - 1.0 / 0.8);
    for (int step = 1; step <= 4; step++) {
        CAPTURE(step);
        char stem[32];
        std::snprintf(stem, sizeof stem, "tiny-step%08d", step);
        const fs::path dir = s.root / "saves";
        const auto saved = read_all(dir / (std::string(stem) + ".safetensors"));
        const auto y = read_all(dir / (std::string(stem) + "-state") / "lora.safetensors");
        const auto opt = read_all(dir / (std::string(stem) + "-state") / "optimizer.safetensors");
        std::map<std::string, std::vector<float>> x;
        int moved = 0;
        for (const auto& [name, yv] : y) {
            const std::vector<float>& z = opt.at("optim." + name + ".z");
            std::vector<float>& xv = x[name];
            for (size_t i = 0; i < yv.size(); i++) {
                xv.push_back(gl::torch_lerp(yv[i], z[i], w));
                moved += xv.back() != yv[i];
            }
        }
        CHECK(sorted_values(saved, true) == sorted_values(x, false));
        if (step == 1) {  // the first step (ckp1 = 1) leaves y = z, so x = y
            CHECK(moved == 0);
        } else {  // x and y differ, so the check above tells them apart
            CHECK(moved > 0);
            CHECK(sorted_values(saved, true) != sorted_values(y, false));
        }
    }

    // Saving swaps x in and y back bit for bit: a run that saves nothing ends at the same y.
    train::RunConfig quiet = c;
    quiet.output_dir = (s.root / "quiet").string();
    quiet.save_every_n_steps.reset();
    quiet.save_state = false;
    quiet.save_state_on_train_end = true;
    train::Session(quiet).run();
    const auto y_quiet = read_all(s.root / "quiet" / "tiny-state" / "lora.safetensors");
    const auto y_saves = read_all(s.root / "saves" / "tiny-step00000004-state" / "lora.safetensors");
    CHECK(y_quiet == y_saves);
}
