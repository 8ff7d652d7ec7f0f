// sdtrain's sample prompts are read and checked before the model is opened: a bad line is refused
// naming the file, the line and the value, whatever else the run would have found later.
#include <doctest/doctest.h>

#include "sdtrain_fixtures.h"
#include "test_util.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

std::string prepare_error(const train::RunConfig& c) {
    return gltest::error_of([&] { train::Session(c).prepare(); });
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("sdtrain sampling: a bad prompt line is refused before the model is opened") {
    Scratch s("sampling-early");
    const fs::path data = make_dataset(s.root), prompts = s.root / "prompts.txt";
    // No model at all: the prompt file is what the run reports, so it was read first.
    train::RunConfig c = tiny_config(s.root / "no-such-model", data, s.root / "out");
    c.sample_prompts = prompts.string();
    const std::pair<std::string, std::string> cases[] = {
        {"a cat --s 2147483648\n", "prompts.txt:1: --s 2147483648 is out of range: steps must be in [1, 1000]"},
        {"a cat\na dog --w 8192 --h 8192\n", "prompts.txt:2: width 8192 must be a multiple of 8 in [8, 2048]"},
        {"a cat --s 0\n", "prompts.txt:1: steps 0 must be in [1, 1000]"},
        {"a cat --d 18446744073709551616\n", "prompts.txt:1: --d 18446744073709551616 is out of range"},
        {"a cat --ss plms\n", "prompts.txt:1: unknown sampler 'plms'"},
        {"a cat --ss pndm_karras\n", "prompts.txt:1: sampler 'pndm_karras': pndm has no Karras variant"},
        {"a cat --ss pndm --s 2\n", "prompts.txt:1 --ss: sampler pndm: 2 steps with the Runge-Kutta warm-up"},
        {"# only a comment\n", "holds no prompt"},
    };
    for (const auto& [text, want] : cases) {
        write_text(prompts, text);
        const std::string e = prepare_error(c);
        CAPTURE(e);
        CHECK(has(e, "--sample_prompts: "));
        CHECK(has(e, prompts.string()));
        CHECK(has(e, want));
        CHECK_FALSE(has(e, "no-such-model"));
    }
    // --sample_sampler is one of kohya's choices, checked before the model too.
    write_text(prompts, "a cat\n");
    c.sample_sampler = "plms";
    CHECK(has(prepare_error(c), "--sample_sampler plms is not one of kohya's samplers"));
    // Every kohya sampler is one: a run samples with each (here it goes on to the missing model).
    for (const char* name : {"pndm", "lms", "k_dpm_2_a", "dpmsolver", "dpmsingle"}) {
        c.sample_sampler = name;
        CHECK(has(prepare_error(c), "no-such-model"));
    }
    write_text(prompts, "a cat --ss ddpm\n");
    CHECK(has(prepare_error(c), "no-such-model"));
    // A good file goes on to the model, which is missing.
    c.sample_sampler = "ddim";
    write_text(prompts, "a cat --s 1000 --w 2048 --h 8 --d 9223372036854775808\n");
    CHECK(has(prepare_error(c), "no-such-model"));
}
