// kohya's ss_* metadata of a LoRA file, filled from the run as train_network.py fills it (values
// are Python's str() of each setting: "True", "None", "0.0001", "(512, 512)"; the dataset keys are
// json.dumps of dicts, with its ", " / ": " separators and ASCII escapes). lora::kohya_metadata adds
// the network's own keys and modelspec.*; per save the step, epoch and finish time are added.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "train/run/config.h"
#include "train/run/data_plan.h"

namespace train {

// Python's str() of a float (repr: the shortest digits that read back, "1e-05", "1.0").
std::string py_float(double x);
// json.dumps of a string (ensure_ascii: non-ASCII as \uXXXX, surrogate pairs above U+FFFF).
std::string py_json_string(const std::string& utf8);

// What the run knows about the base model for ss_sd_model_*: the path as given; kohya hashes it
// when it exists (a folder gives kohya's "IsADirectory").
struct ModelFileInfo {
    std::string name;           // ss_sd_model_name: the path's base name (the path if it does not exist)
    std::string legacy_hash;    // ss_sd_model_hash: sha256 of 64 KiB at 1 MiB, 8 hex digits
    std::string sha256;         // ss_new_sd_model_hash
};
// Hashes the model file (reads it whole: seconds for a 2-4 GB checkpoint, at start-up).
ModelFileInfo model_file_info(const std::string& path);

struct RunFacts {
    uint64_t session_id = 0;
    double started_at = 0;  // unix time
    uint64_t seed = 0;
    StepCounts counts;
    ModelFileInfo model;
    std::string version;    // ss_sd_scripts_commit_hash: which sdtrain wrote the file
};

// Every ss_* key train_network.py writes at the start of a run (ss_steps / ss_epoch /
// ss_training_finished_at come per save: save_metadata).
std::map<std::string, std::string> run_metadata(const RunConfig& c, const RunData& d, const RunFacts& f);
// The keys of one save: run_metadata plus ss_steps, ss_epoch, ss_training_finished_at (now).
std::map<std::string, std::string> save_metadata(std::map<std::string, std::string> run, int64_t steps, int64_t epoch);

}  // namespace train
