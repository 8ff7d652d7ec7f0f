// Where a run writes, named as kohya names it (train_util.py): the LoRA of the whole run
// <output_name>.safetensors, every N steps <output_name>-step00000500.safetensors, every N epochs
// <output_name>-000003.safetensors (without --output_name: "last", "at" and "epoch"), states in
// <name>-step00000500-state/, <name>-000003-state/ and <name>-state/; and kohya's rule for
// keeping only the last N of them. Every file and folder appears whole or not at all: written
// under a temporary name and renamed (a crash or kill -9 leaves earlier saves as they were).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "train/run/config.h"

namespace train {

enum class SaveKind : uint8_t { step, epoch, last };

std::string lora_file_name(const RunConfig& c, SaveKind k, int64_t number = 0);  // with ".safetensors"
std::string state_dir_name(const RunConfig& c, SaveKind k, int64_t number = 0);

// kohya's keep-last-N: after saving step `step` (epoch `epoch`), the one to delete, if any.
// state: for state folders (--save_last_n_steps_state / --save_last_n_epochs_state, else the
// models' N).
std::optional<int64_t> step_to_remove(const RunConfig& c, int64_t step, bool state);
std::optional<int64_t> epoch_to_remove(const RunConfig& c, int64_t epoch, bool state);

// Creates the output folder when missing and checks that files can be created in it (a probe file
// written and removed). Throws gl::Error naming the folder; nothing existing is touched. Returns
// the folders it created, parents first, which remove_created_dirs removes again while empty (a
// run refused before it wrote anything leaves no folder behind).
std::vector<std::filesystem::path> check_output_dir(const std::filesystem::path& dir);
void remove_created_dirs(const std::vector<std::filesystem::path>& created);

// Removes what killed runs left in the output folder `dir` (and in its sample/ and cache folders):
// every temporary file or folder of this host whose writer no longer runs (gl::io's pid-named
// temporaries: unfinished state folders, LoRA files, reports, samples, probes). Returns the paths.
std::vector<std::string> remove_run_leftovers(const std::filesystem::path& dir);

// Writes a folder atomically: `fill` writes into a fresh temporary folder beside `dir`, which
// then replaces `dir` in one rename (an existing one is swapped out and removed). On any error the
// temporary folder is removed and `dir` is as it was.
void write_dir_atomically(const std::filesystem::path& dir, const std::function<void(const std::filesystem::path&)>& fill);

// Removes a save (file or folder) named by the keep-last-N rule; missing is fine.
void remove_save(const std::filesystem::path& p);

}  // namespace train
