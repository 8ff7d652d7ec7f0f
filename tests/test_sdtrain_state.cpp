// --resume's train_state.json (train/run/state.h): a corpus of malformed files (wrong types, missing
// fields, out-of-range and huge numbers, not UTF-8, truncated, a folder or FIFO in its place), each
// refused naming the file and the field; positions this run cannot continue (step, epoch, batches,
// noise counter against the run); a bounded fuzz of the reader (tests/fuzz/fuzz_state.cpp runs it
// coverage-guided). End to end: test_sdtrain_resume.cpp.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <random>

#include "sdtrain_fixtures.h"
#include "train/run/state.h"

using namespace sdtrain_test;
using gltest::error_of;

namespace {

const std::string kDigest(64, 'a');

// A valid file: 2 steps of 4 batches (epoch 2 next), the noise of those steps.
nlohmann::json valid_state() {
    return {{"current_epoch", 2},
            {"current_step", 2},
            {"sdtrain",
             {{"version", 2},
              {"batches_done", 4},
              {"seed", 42},
              {"trainer_steps", 2},
              {"noise_counter", 100},
              {"run_identity", kDigest}}}};
}

std::string parse_error(const std::string& text) {
    return error_of([&] { train::parse_run_position(text, "S/train_state.json"); });
}

// The file with one field (a JSON pointer) replaced by raw JSON text, or removed when text is "".
std::string with_field(const std::string& pointer, const std::string& raw) {
    nlohmann::json j = valid_state();
    const nlohmann::json::json_pointer p(pointer);
    if (raw.empty()) j[p.parent_pointer()].erase(p.back());
    else j[p] = nlohmann::json::parse(raw);
    return j.dump();
}

// The same with the field's value spliced in as text (numbers nlohmann would not keep as given).
std::string with_text(const std::string& key, const std::string& raw) {
    std::string s = valid_state().dump();
    const std::string k = "\"" + key + "\":";
    const size_t at = s.find(k) + k.size();
    const size_t end = s.find_first_of(",}", at);
    return s.substr(0, at) + raw + s.substr(end);
}

train::RunShape shape() {
    train::RunShape r;
    r.counts.batches_per_epoch = 4;
    r.counts.updates_per_epoch = 2;
    r.counts.accum = 2;
    r.counts.epochs = 3;
    r.counts.max_train_steps = 6;
    r.min_update_draws = 10;
    r.max_batch_draws = 100;
    return r;
}

std::string position_error(const std::function<void(train::RunPosition&)>& change) {
    train::RunPosition p = train::parse_run_position(valid_state().dump(), "S");
    change(p);
    return error_of([&] { train::check_run_position(p, "S", shape()); });
}

}  // namespace

TEST_CASE("sdtrain state: every malformed train_state.json is refused naming the file and the field") {
    CHECK(parse_error(valid_state().dump()) == "(no error)");
    const std::string i64 = "expected an integer in [0, 9223372036854775807]";
    const std::string u64 = "expected an integer in [0, 18446744073709551615]";
    const struct {
        std::string text, error;
    } corpus[] = {
        {"", "S/train_state.json: not a valid JSON file"},
        {"{\"current_epoch\": 1, \"current_st", "not a valid JSON file"},
        {std::string(100000, '['), "not a valid JSON file"},
        {"{\"current_step\": 1e400}", "not a valid JSON file"},
        {"{\"a\": \"\xff\xfe\"}", "not a valid JSON file"},
        {std::string("{\"current_step\": 1}\0garbage", 27), "holds a NUL byte at offset 19; not a JSON text file"},
        {"[]", "holds a JSON array, expected an object"},
        {"\"state\"", "holds a JSON string"},
        {with_field("/current_step", ""), "no field 'current_step' (a kohya / accelerate state folder"},
        {with_field("/current_step", "\"2\""), "field 'current_step' is a string \"2\", " + i64},
        {with_field("/current_step", "2.5"), "field 'current_step' is 2.5, " + i64},
        {with_field("/current_step", "-1"), "field 'current_step' is -1, out of range: " + i64},
        {with_field("/current_step", "null"), "field 'current_step' is null, " + i64},
        {with_field("/current_step", "true"), "field 'current_step' is a boolean true, " + i64},
        {with_field("/current_step", "[2]"), "field 'current_step' is an array, " + i64},
        {with_text("current_step", "9223372036854775808"), "field 'current_step' is 9223372036854775808, out of range"},
        {with_field("/current_epoch", "0"), "field 'current_epoch' is 0, out of range: expected an integer in [1, "},
        {with_field("/current_epoch", "{}"), "field 'current_epoch' is an object"},
        {with_field("/sdtrain", ""), "no field 'sdtrain'"},
        {with_field("/sdtrain", "[]"), "field 'sdtrain' is an array, expected an object"},
        {with_field("/sdtrain/version", "3"), "field 'sdtrain.version' is 3, out of range: expected an integer in [1, 2]"},
        {with_field("/sdtrain/version", "\"2\""), "field 'sdtrain.version' is a string"},
        {with_field("/sdtrain/batches_done", "-4"), "field 'sdtrain.batches_done' is -4, out of range: " + i64},
        {with_field("/sdtrain/batches_done", ""), "no field 'sdtrain.batches_done'"},
        {with_field("/sdtrain/seed", "-1"), "field 'sdtrain.seed' is -1, out of range: " + u64},
        {with_text("seed", "18446744073709551616"), "field 'sdtrain.seed' is 1.8446744073709552e+19, " + u64},
        {with_field("/sdtrain/noise_counter", "-1"), "field 'sdtrain.noise_counter' is -1, out of range: " + u64},
        {with_text("noise_counter", "18446744073709551616"), "field 'sdtrain.noise_counter' is 1.8446744073709552e+19"},
        {with_field("/sdtrain/noise_counter", "\"100\""), "field 'sdtrain.noise_counter' is a string"},
        {with_field("/sdtrain/trainer_steps", "3"), "field 'sdtrain.trainer_steps' is 3 but 'current_step' is 2"},
        {with_field("/sdtrain/trainer_steps", "2.0"), "field 'sdtrain.trainer_steps' is 2.0, " + i64},
        {with_field("/sdtrain/run_identity", "5"), "field 'sdtrain.run_identity' is 5, expected a string of 64"},
        {with_field("/sdtrain/run_identity", "\"abc\""), "field 'sdtrain.run_identity' is not a string of 64"},
        {with_field("/sdtrain/run_identity", ""), "no field 'sdtrain.run_identity'"},
    };
    for (const auto& k : corpus) {
        const std::string e = parse_error(k.text);
        CAPTURE(k.text.substr(0, 200));
        CHECK_MESSAGE(e.find(k.error) != std::string::npos, e);
        CHECK_MESSAGE(e.find("S/train_state.json: ") == 0, e);
        if (k.error.find("not a valid JSON file") == std::string::npos)  // the parser's own words only there
            CHECK_MESSAGE(e.find("json.exception") == std::string::npos, e);
    }
}

TEST_CASE("sdtrain state: a folder, FIFO, missing, oversized or binary train_state.json is refused without blocking") {
    gltest::TempDir d;
    const fs::path state = d.path / "s";
    fs::create_directories(state / "train_state.json");
    CHECK(error_of([&] { train::read_run_position(state); })
              .find("--resume " + (state / "train_state.json").string() + ": is a directory, not a regular file") == 0);
    fs::remove(state / "train_state.json");
    CHECK(error_of([&] { train::read_run_position(state); }).find("train_state.json: cannot open") != std::string::npos);
    REQUIRE(::mkfifo((state / "train_state.json").c_str(), 0644) == 0);
    CHECK(error_of([&] { train::read_run_position(state); }).find("is a FIFO (named pipe)") != std::string::npos);
    fs::remove(state / "train_state.json");
    write_text(state / "train_state.json", std::string(size_t(2) << 20, ' '));
    CHECK(error_of([&] { train::read_run_position(state); }).find("a file of this kind is at most") != std::string::npos);
    write_text(state / "train_state.json", std::string("\x89PNG\r\n\x1a\n\0\0", 10));
    CHECK(error_of([&] { train::read_run_position(state); }).find("holds a NUL byte") != std::string::npos);
    write_text(state / "train_state.json", "\xef\xbb\xbf\xff\xfe{}");
    CHECK(error_of([&] { train::read_run_position(state); }).find("not a valid JSON file") != std::string::npos);
    write_text(state / "train_state.json", valid_state().dump());
    CHECK(train::read_run_position(state).trainer.noise_counter == 100);
}

TEST_CASE("sdtrain state: a position this run cannot continue is refused naming the field") {
    CHECK(position_error([](train::RunPosition&) {}) == "(no error)");
    CHECK(position_error([](train::RunPosition& p) { p.epoch = 1; }) == "(no error)");  // saved at its epoch's end
    const struct {
        std::function<void(train::RunPosition&)> change;
        std::string error;
    } cases[] = {
        {[](train::RunPosition& p) { p.step = p.trainer.steps = 6; }, "S: current_step 6 is not before this run's last step 6"},
        {[](train::RunPosition& p) { p.step = p.trainer.steps = INT64_MAX; }, "current_step 9223372036854775807 is not before"},
        {[](train::RunPosition& p) { p.batches_done = 13; }, "sdtrain.batches_done 13 is past this run's 12 batches"},
        {[](train::RunPosition& p) { p.batches_done = INT64_MAX; }, "sdtrain.batches_done 9223372036854775807 is past"},
        {[](train::RunPosition& p) { p.batches_done = 3; }, "sdtrain.batches_done 3 and current_step 2 disagree"},
        {[](train::RunPosition& p) { p.batches_done = 6; }, "6 batches end update 3"},
        {[](train::RunPosition& p) { p.epoch = 3; }, "current_epoch 3 disagrees with sdtrain.batches_done 4"},
        {[](train::RunPosition& p) { p.epoch = INT64_MAX; }, "current_epoch 9223372036854775807 disagrees"},
        {[](train::RunPosition& p) { p.trainer.noise_counter = 19; }, "sdtrain.noise_counter 19 is outside [20, 400]"},
        {[](train::RunPosition& p) { p.trainer.noise_counter = 401; }, "sdtrain.noise_counter 401 is outside"},
        {[](train::RunPosition& p) { p.trainer.noise_counter = INT64_MAX; }, "noise_counter 9223372036854775807 is outside"},
        {[](train::RunPosition& p) { p.trainer.noise_counter = UINT64_MAX; }, "noise_counter 18446744073709551615 is out"},
    };
    for (const auto& k : cases) {
        const std::string e = position_error(k.change);
        CHECK_MESSAGE(e.find(k.error) != std::string::npos, e);
    }
}

TEST_CASE("sdtrain state: fuzz, every mutation of a valid train_state.json parses or is a gl::Error") {
    const std::string good = valid_state().dump(2);
    std::mt19937_64 rng(20);
    const char* pieces[] = {"-", "1", "9", "e", ".", "\"", "{", "}", "[", "]", ",", ":", "null", "\xff", "\\u0000",
                            "18446744073709551616", "-9223372036854775809", "1e309", " "};
    const int n = gltest::fuzz_iterations(3000);
    int parsed = 0;
    for (int i = 0; i < n; i++) {
        std::string s = good;
        for (int edits = 1 + int(rng() % 4); edits > 0; edits--) {
            const size_t at = size_t(rng() % (s.size() + 1));
            switch (rng() % 4) {
                case 0: s.insert(at, pieces[rng() % std::size(pieces)]); break;
                case 1: s.erase(at, size_t(rng() % 8)); break;
                case 2:
                    if (at < s.size()) s[at] = char(rng());
                    break;
                case 3: s.resize(at); break;
            }
        }
        try {
            train::parse_run_position(s, "F");
            parsed++;
        } catch (const gl::Error& e) {
            REQUIRE(std::string(e.what()).rfind("F: ", 0) == 0);
        }
    }
    CHECK(parsed < n);  // most mutations break the file; the ones that keep it valid parse
}
