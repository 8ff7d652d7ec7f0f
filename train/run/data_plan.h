// The dataset side of a run's plan: the kohya dataset (folders or --dataset_config) read from the
// run's options, its buckets, and kohya's steps arithmetic (batches per epoch, updates per epoch,
// total steps and epochs), spelled out for the user the way it is computed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/bucket.h"
#include "data/config.h"
#include "data/dataset.h"
#include "data/dataset_group.h"
#include "train/run/config.h"
#include "train/run/graphs.h"

namespace train {

// kohya's validation set (a dataset's validation_split): its images, once each, in their buckets.
struct ValidationData {
    data::Dataset dataset;
    data::BucketAssignment buckets;
};

struct RunData {
    // The training images (the training part when validation_split is set): every dataset's, merged
    // (data/dataset_group.h), and each dataset's own (for its metadata and its lines in the plan).
    data::Dataset dataset;
    data::BucketAssignment buckets;
    std::vector<data::BucketedDataset> parts;
    std::optional<ValidationData> validation;  // a validation split that holds images
    bool from_dataset_config = false;  // --dataset_config (else the folder layout)
    std::vector<std::string> warnings;  // the dataset's and the buckets'
};

// The command line's level of the dataset settings (data/config.h): what kohya's dataset
// blueprint falls back to when a subset, dataset or [general] does not set a key: the options
// train/run/options.def declares dataset settings.
data::ConfigLevel dataset_command_line(const RunConfig& c);

// Reads the dataset and assigns buckets, split into training and validation images by kohya's rule
// (data/validation_split.h; seed: the run's --seed, which orders the split without a
// validation_seed). Several [[datasets]] are trained together as kohya's DatasetGroup does. Throws
// gl::Error naming the file or option: no usable image, alpha_mask with cached latents (the cache
// keeps no masks), mask images (conditioning_data_dir) without --masked_loss.
RunData load_run_data(const RunConfig& c, uint64_t seed);

// "images: ..., subsets with repeats, reg images, buckets" for the plan, and the images skipped
// while reading the dataset and assigning buckets, grouped by reason: all of them up to
// kSkippedInPlan, else that many and the count, after a line for each format none of whose files
// could be read.
constexpr size_t kSkippedInPlan = 20;
std::string dataset_summary(const RunData& d);

// The files the dataset read and the bucket assignment dropped (the validation set's too), each
// once, with its reason.
std::vector<data::SkippedImage> skipped_before_training(const RunData& d);

// kohya's arithmetic for a micro-batch and accumulation: an epoch holds, per bucket,
// ceil(images with repeats / batch) batches (batch: the micro-batch, or with several datasets the
// bucket's dataset's batch size, at most the micro-batch); an update takes `accum` of them (the last of an
// epoch fewer); --max_train_epochs sets the total steps, else --max_train_steps sets the epochs.
// Data parallelism (world ranks): a batch is a global one of world x the batch (each rank its
// slice), so an epoch holds per bucket ceil(images / (batch x world)) of them, and an update
// takes world x micro-batch x accum images.
struct StepCounts {
    int64_t micro_batch = 1;
    int accum = 1;
    int world = 1;
    int64_t batches_per_epoch = 0, updates_per_epoch = 0, max_train_steps = 0, epochs = 0;
    std::string arithmetic;  // the computation, line by line
};
StepCounts count_steps(const RunConfig& c, const RunData& d, int64_t micro_batch, int accum, int world = 1);

// The graph shapes an epoch runs: per bucket its full micro-batch and, when its image count is not
// a multiple, the short last batch (world ranks: every rank's slice of the short global batch, so
// all ranks plan the same graphs); then the validation buckets' not among them (a validation
// runs the step graph of its batch's shape, on every rank the whole validation set). Latent sides are the bucket's pixels / downscale (checked
// against the UNet's size multiple: gl::Error naming the bucket).
std::vector<GraphShape> graph_shapes(const RunData& d, int64_t micro_batch, int64_t downscale, int unet_multiple,
                                     int world = 1);

// The buckets for auto-fit: latent sides and their share of the images (with repeats).
struct BucketShare {
    int64_t latent_h = 0, latent_w = 0;
    double images = 0;
};
std::vector<BucketShare> bucket_shares(const RunData& d, int64_t downscale);

}  // namespace train
