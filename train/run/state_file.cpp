// train_state.json read field by field, and a resumed position checked against the run (state.h).
#include <nlohmann/json.hpp>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "train/run/state.h"

namespace train {

namespace {

using json = nlohmann::json;

constexpr uint64_t kInt64Max = uint64_t(INT64_MAX);

uint64_t saturated_product(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

// One JSON object of the file: its fields by name, each with the type and range it must have.
struct Fields {
    const json& obj;
    const std::string& file;
    std::string prefix;  // "sdtrain." for the nested object

    const json& at(const char* key) const {
        const auto it = obj.find(key);
        if (it == obj.end())
            gl::fail(file, ": no field '", prefix, key, "' (a kohya / accelerate state folder cannot be resumed by "
                     "sdtrain; use one that sdtrain wrote with --save_state)");
        return *it;
    }

    [[noreturn]] void wrong(const char* key, const json& v, const std::string& expected) const {
        std::string is = v.dump();  // numbers and null as written
        if (v.is_string()) is = "a string " + is;
        else if (v.is_boolean()) is = "a boolean " + is;
        else if (v.is_array()) is = "an array";
        else if (v.is_object()) is = "an object";
        if (is.size() > 80) is = is.substr(0, 77) + "...";
        gl::fail(file, ": field '", prefix, key, "' is ", is, ", expected ", expected);
    }

    uint64_t integer(const char* key, uint64_t lo, uint64_t hi) const {
        const json& v = at(key);
        const std::string expected = gl::cat("an integer in [", lo, ", ", hi, "]");
        if (v.is_number_unsigned()) {
            const uint64_t x = v.get<uint64_t>();
            if (x >= lo && x <= hi) return x;
        }
        if (!v.is_number_integer()) wrong(key, v, expected);
        gl::fail(file, ": field '", prefix, key, "' is ", v.dump(), ", out of range: expected ", expected);
    }

    bool has(const char* key) const { return obj.find(key) != obj.end(); }

    const json& object(const char* key) const {
        const json& v = at(key);
        if (!v.is_object()) wrong(key, v, "an object");
        return v;
    }

    std::string hex_digest(const char* key) const {
        const json& v = at(key);
        const std::string expected = "a string of 64 hexadecimal digits (a SHA-256)";
        if (!v.is_string()) wrong(key, v, expected);
        const std::string s = v.get<std::string>();
        GL_CHECK(s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos, file, ": field '",
                 prefix, key, "' is not ", expected);
        return s;
    }
};

}  // namespace

RunPosition parse_run_position(const std::string& text, const std::string& file) {
    // nlohmann's parser ends the input at a NUL byte; what follows would go unread.
    const size_t nul = text.find('\0');
    GL_CHECK(nul == std::string::npos, file, ": holds a NUL byte at offset ", nul, "; not a JSON text file");
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {  // not JSON: truncated, not UTF-8, a number beyond a double
        gl::fail(file, ": not a valid JSON file (", e.what(), ")");
    }
    GL_CHECK(j.is_object(), file, ": holds a JSON ", j.type_name(), ", expected an object with current_step, "
             "current_epoch and sdtrain");
    const Fields top{j, file, ""};
    const Fields s{top.object("sdtrain"), file, "sdtrain."};
    RunPosition p;
    p.version = int(s.integer("version", 1, kStateVersion));
    p.step = int64_t(top.integer("current_step", 0, kInt64Max));
    p.epoch = int64_t(top.integer("current_epoch", 1, kInt64Max));
    p.batches_done = int64_t(s.integer("batches_done", 0, kInt64Max));
    // Absent in states of runs without kohya's --initial_* (and of earlier versions): 0.
    if (s.has("start_step")) p.start_step = int64_t(s.integer("start_step", 0, kInt64Max));
    if (s.has("start_batch")) p.start_batch = int64_t(s.integer("start_batch", 0, p.batches_done));
    p.seed = s.integer("seed", 0, UINT64_MAX);
    if (s.has("world_size")) p.world_size = int(s.integer("world_size", 1, 1 << 20));
    p.trainer.steps = int64_t(s.integer("trainer_steps", 0, kInt64Max));
    p.trainer.noise_counter = s.integer("noise_counter", 0, UINT64_MAX);
    p.run_identity = s.hex_digest("run_identity");
    GL_CHECK(p.trainer.steps == p.step, file, ": field 'sdtrain.trainer_steps' is ", p.trainer.steps,
             " but 'current_step' is ", p.step, "; both count the steps done");
    return p;
}

RunPosition read_run_position(const std::filesystem::path& dir) {
    std::error_code ec;
    GL_CHECK(std::filesystem::is_directory(dir, ec), "--resume ", dir.string(), ": not a state folder (sdtrain "
             "writes <name>-step00000500-state/ with --save_state)");
    const std::string file = (dir / "train_state.json").string();
    try {
        return parse_run_position(gl::io::read_small_file(file, uint64_t(1) << 20), file);
    } catch (const gl::Error& e) {
        gl::fail("--resume ", e.what());
    }
}

void check_run_position(const RunPosition& p, const std::string& file, const RunShape& run) {
    const StepCounts& k = run.counts;
    const int64_t per_epoch = k.batches_per_epoch, total = k.epochs * per_epoch;
    GL_CHECK(p.step < k.max_train_steps, file, ": current_step ", p.step, " is not before this run's last step ",
             k.max_train_steps, " (nothing is left to train; raise --max_train_steps or --max_train_epochs)");
    GL_CHECK(p.batches_done <= total, file, ": sdtrain.batches_done ", p.batches_done, " is past this run's ", total,
             " batches (", k.epochs, " epochs of ", per_epoch, ")");
    // A state is saved after an update: whole epochs, then whole accumulation groups of the epoch;
    // the steps counted from where the run's counting began (kohya's --initial_*: a step of its own
    // at a batch of its own, on an update's boundary as well).
    auto updates_at = [&](int64_t batches) {
        return batches / per_epoch * k.updates_per_epoch + batches % per_epoch / k.accum;
    };
    const int64_t in_epoch = p.batches_done % per_epoch;
    GL_CHECK(p.start_batch % per_epoch % k.accum == 0 && p.start_step <= p.step, file, ": sdtrain.start_batch ",
             p.start_batch, " and start_step ", p.start_step, " are no start of this run");
    const int64_t updates = updates_at(p.batches_done) - updates_at(p.start_batch) + p.start_step;
    GL_CHECK(in_epoch % k.accum == 0 && updates == p.step, file, ": sdtrain.batches_done ", p.batches_done,
             " and current_step ", p.step, " disagree: with ", per_epoch, " batches per epoch and ", k.accum,
             " accumulation steps, ", p.batches_done, " batches end ",
             in_epoch % k.accum ? std::string("inside an update") : gl::cat("update ", updates));
    // The next batch's epoch, or (saved after an epoch's last update) the epoch that just ended.
    const int64_t next = p.batches_done / per_epoch + 1;
    GL_CHECK(p.epoch == next || (in_epoch == 0 && p.batches_done > 0 && p.epoch == next - 1), file,
             ": current_epoch ", p.epoch, " disagrees with sdtrain.batches_done ", p.batches_done, " (", per_epoch,
             " batches per epoch: the next batch is in epoch ", next, ")");
    // Every update draws noise for at least one image; every batch at most for a whole one.
    const uint64_t lo = saturated_product(uint64_t(p.step - p.start_step), run.min_update_draws);
    const uint64_t hi = saturated_product(uint64_t(p.batches_done - p.start_batch), run.max_batch_draws);
    GL_CHECK(p.trainer.noise_counter >= lo && p.trainer.noise_counter <= hi, file, ": sdtrain.noise_counter ",
             p.trainer.noise_counter, " is outside [", lo, ", ", hi, "], the noise drawn by ", p.step, " updates of ",
             p.batches_done, " batches of this run");
}

}  // namespace train
