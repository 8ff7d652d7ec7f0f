// kohya's TensorBoard log of a run (train_network.py through accelerate's TensorBoardTracker and
// torch's SummaryWriter), from the Session's events:
//   folder   <logging_dir>/<log_prefix><YYYYmmddHHMMSS>/<log_tracker_name, default network_train>,
//            the time stamp local time at the run's start (kohya's prepare_accelerator), the file
//            events.out.tfevents.<seconds>.<host>.<pid>.<n> in it, made with the first record;
//   per update, at the optimizer step (1-based): loss/current, loss/average (the running mean),
//            lr/textencoder and lr/unet (the rates after the scheduler's step, as kohya reads
//            get_last_lr() then), and for Prodigy and the DAdapt* optimizers lr/d*lr/textencoder,
//            lr/d*lr/unet (d after the step times that rate, as kohya reads param_groups[i]["d"] *
//            ["lr"] then); with more groups (block lr weights, LoRA+) lr/<group> (and lr/d*lr/<group>)
//            for each under kohya's names (lr/unet_block3, lr/unet plus, ...); with --scale_weight_norms max_norm/keys_scaled,
//            max_norm/max_key_norm and norm/avg_key_norm;
//   a validation every N steps: loss/validation/step_average, loss/validation/step_divergence at
//            the step; the epoch's: loss/validation/epoch_average, loss/validation/epoch_divergence
//            at the epoch (1-based), then loss/epoch_average at the epoch;
//   samples: kohya sends them to W&B only (as sample_<i>); here they are TensorBoard images under
//            that key at the step they were made.
// Each record is one write() as it comes (nothing waits in a buffer: a kill -9 loses nothing
// written, a record cut short by a crash ends the file as TensorBoard's reader accepts).
#pragma once
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "train/run/config.h"
#include "train/run/observer.h"
#include "train/tensorboard.h"

namespace train {

// The run's TensorBoard folder for a start at `start` (local time), or empty without --logging_dir.
std::filesystem::path tensorboard_run_dir(const RunConfig& c, std::time_t start);

class TensorBoardLog {
public:
    // wall: the clock of the records (unix seconds).
    TensorBoardLog(std::filesystem::path dir, std::function<double()> wall);
    void step(const StepEvent& e);
    void validation(const ValidationEvent& e);
    void epoch(const EpochEvent& e);
    // The PNG files of a sampling (paths as the event has them).
    void sample(const SampleEvent& e);
    void finish();  // syncs the file to the disk
    // The event file (empty before the first record).
    std::filesystem::path file() const { return w_ ? w_->path() : std::filesystem::path(); }

private:
    void scalar(const std::string& tag, double v, int64_t step);
    TensorBoardWriter& writer();
    std::filesystem::path dir_;
    std::function<double()> wall_;
    std::unique_ptr<TensorBoardWriter> w_;
};

}  // namespace train
