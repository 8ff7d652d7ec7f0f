// kohya's ss_* metadata of a LoRA file, filled from the run as train_network.py fills it (values
// are Python's str() of each setting: "True", "None", "0.0001", "(512, 512)"; the dataset keys are
// json.dumps of dicts, with its ", " / ": " separators and ASCII escapes). Per save the step, epoch
// and finish time are added, and lora::kohya_metadata adds modelspec.* (sai_model_spec's keys).
// tests/test_kohya_run_metadata.cpp compares every key with what kohya's own code writes for the
// same runs (tests/golden/make_kohya_metadata.py).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "train/run/config.h"
#include "train/run/data_plan.h"

namespace train {

// Python's str() of a float (repr: the shortest digits that read back, "1e-05", "1.0").
std::string py_float(double x);
// Python's str.lower() for ASCII, Latin-1, Latin Extended-A, modern Greek and basic Cyrillic
// (what kohya's tag frequency lower-cases; other code points are kept).
std::string py_lower(const std::string& utf8);
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

// The build that writes the files: CMake's project version, and the git commit of its source
// (40 hex digits; "" when it was not built from a git checkout).
std::string build_version();
std::string build_commit();
// modelspec.implementation_version: "ggml-lite/<version>+<commit>" ("ggml-lite/<version>" without
// a commit), kohya's "<implementation>/<commit>" with a SemVer version whose build metadata is the
// commit.
std::string implementation_version();

struct RunFacts {
    uint64_t session_id = 0;
    double started_at = 0;  // unix time
    uint64_t seed = 0;
    StepCounts counts;
    ModelFileInfo model;
    std::optional<ModelFileInfo> vae;  // --vae's, for ss_vae_name / ss_vae_hash / ss_new_vae_hash
};

// Every ss_* key train_network.py writes at the start of a run (ss_steps / ss_epoch /
// ss_training_finished_at come per save: save_metadata).
std::map<std::string, std::string> run_metadata(const RunConfig& c, const RunData& d, const RunFacts& f);
// ss_optimizer as kohya writes it: the class as module.name and the arguments it was given (with
// those kohya adds, as SGDNesterov's momentum=0.9), a tuple as Python prints it.
std::string kohya_optimizer_text(const RunConfig& c);
// The keys of one save: run_metadata plus ss_steps, ss_epoch, ss_training_finished_at (now).
std::map<std::string, std::string> save_metadata(std::map<std::string, std::string> run, int64_t steps, int64_t epoch);
// What a save hands lora::save_kohya: `training` (save_metadata's keys) and the modelspec.* settings
// train_util.get_sai_model_spec takes from the options (title, resolution, clip skip, prediction
// type, timestep range, author / description / license / tags, the implementation version);
// --no_metadata keeps kohya's minimum keys only.
lora::SaveOptions lora_save_options(const RunConfig& c, std::map<std::string, std::string> training);

}  // namespace train
