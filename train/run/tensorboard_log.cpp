#include "train/run/tensorboard_log.h"

#include <fstream>
#include <iterator>

#include "ggml-lite/core/error.h"
#include "data/png_file.h"

namespace train {

namespace fs = std::filesystem;

fs::path tensorboard_run_dir(const RunConfig& c, std::time_t start) {
    if (!c.logging_dir) return {};
    std::tm local{};
    localtime_r(&start, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", &local);
    // kohya joins logging_dir, prefix and stamp with "/" and accelerate adds the tracker's name.
    return fs::path(*c.logging_dir + "/" + c.log_prefix.value_or("") + stamp) /
           c.log_tracker_name.value_or("network_train");
}

TensorBoardLog::TensorBoardLog(fs::path dir, std::function<double()> wall) : dir_(std::move(dir)), wall_(std::move(wall)) {}

TensorBoardWriter& TensorBoardLog::writer() {
    if (!w_) w_ = std::make_unique<TensorBoardWriter>(dir_, wall_());
    return *w_;
}

void TensorBoardLog::scalar(const std::string& tag, double v, int64_t step) { writer().scalar(tag, v, step, wall_()); }

void TensorBoardLog::step(const StepEvent& e) {
    scalar("loss/current", e.loss, e.step);
    scalar("loss/average", e.loss_mean, e.step);
    if (e.keys_scaled) {
        scalar("max_norm/keys_scaled", *e.keys_scaled, e.step);
        scalar("max_norm/max_key_norm", e.max_key_norm.value_or(0), e.step);
        scalar("norm/avg_key_norm", e.average_key_norm.value_or(0), e.step);
    }
    // kohya's lr_descriptions order: the text encoder's group first; with a d estimate (Prodigy,
    // DAdapt*) each rate's lr/d*lr/<group> right after it, as generate_step_logs adds them.
    const auto lr = [&](const std::string& group, double v) {
        scalar("lr/" + group, v, e.step);
        if (e.d_estimate) scalar("lr/d*lr/" + group, *e.d_estimate * v, e.step);
    };
    if (e.next_lr_text_encoder && e.next_group_lrs.empty()) lr("textencoder", *e.next_lr_text_encoder);
    if (e.next_lr_unet && e.next_group_lrs.empty()) lr("unet", *e.next_lr_unet);
    for (const auto& [group, v] : e.next_group_lrs) lr(group, v);
}

void TensorBoardLog::validation(const ValidationEvent& e) {
    const char* kind = e.per_epoch ? "epoch" : "step";
    const int64_t at = e.per_epoch ? e.epoch : e.step;
    scalar(gl::cat("loss/validation/", kind, "_average"), e.average, at);
    scalar(gl::cat("loss/validation/", kind, "_divergence"), e.divergence, at);
}

void TensorBoardLog::epoch(const EpochEvent& e) { scalar("loss/epoch_average", e.loss_mean, e.epoch); }

void TensorBoardLog::sample(const SampleEvent& e) {
    for (size_t i = 0; i < e.images.size(); i++) {
        std::ifstream f(e.images[i], std::ios::binary);
        GL_CHECK(f, "tensorboard: cannot read the sample ", e.images[i]);
        const std::vector<uint8_t> png{std::istreambuf_iterator<char>(f), {}};
        const data::PngInfo info = data::read_png_info(png, e.images[i]);
        writer().image(gl::cat("sample_", i), png, info.width, info.height, info.channels(), e.step, wall_());
    }
}

void TensorBoardLog::finish() {
    if (w_) w_->flush();
}

}  // namespace train
