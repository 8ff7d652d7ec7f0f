// What a run reads and where it writes, and the rules that keep its writes out of the user's files
// (places compared as ggml-lite/io/paths.h does: real paths, device and inode):
// - the output folder, and the sub-folders the run writes there (sample/, latent_cache/,
//   text_encoder_cache/, which may be symlinks), is never an input nor inside one: the model file
//   or folder and the real folders of the files opened from it (a unet/ linked to a shared
//   folder, the Hugging Face cache's blobs/), --train_data_dir, --reg_data_dir, every subset's
//   image folder, the --dataset_config and --sample_prompts files, --network_weights, --resume;
// - an input inside the output folder is refused where the run writes (its LoRA and state names,
//   sample/, the caches, metrics.jsonl, report.html, temporaries), unless it is one of the run's
//   own saves, read whole before anything is written: --resume and --network_weights. Elsewhere
//   in the output folder an input is safe (nothing the run writes reaches it);
// - --reg_data_dir and --train_data_dir do not overlap (equal, or one inside the other), nor does a
//   dataset config's regularisation subset use a training subset's folder: the same images would
//   be trained on and regularised against. kohya checks none of this.
// The latent and text-encoder caches of --cache_latents_to_disk and
// --cache_text_encoder_outputs_to_disk live in the output folder (README: differences from kohya),
// so nothing is ever written among the images.
#pragma once
#include <string>
#include <vector>

#include "data/config.h"
#include "models/model_files.h"
#include "train/run/config.h"

namespace train {

struct RunInput {
    std::string what;  // as messages name it: "--train_data_dir", "the model's UNet file", ...
    std::string path;
    bool own_save = false;  // --resume, --network_weights, --base_weights: may lie where the run writes
};

// Every file and folder the run reads, for the checks below: those the options name, and with the
// opened model and the dataset's subsets (nullptr: not known yet) the files and folders they lead to.
std::vector<RunInput> run_inputs(const RunConfig& c, const models::ModelFiles* model, const data::DatasetConfig* dataset);

// Refuses (gl::Error naming both paths and the option) by the rules above; nothing is created.
// dataset: for its subsets' kinds (nullptr: not known yet).
void check_run_paths(const RunConfig& c, const std::vector<RunInput>& inputs, const data::DatasetConfig* dataset);

}  // namespace train
