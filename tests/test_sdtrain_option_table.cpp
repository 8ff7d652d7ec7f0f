// The option table (train/run/options.def, option_table.h): one declaration per option gives
// --help, the reader, the report's configuration, kohya's ss_* keys and the dataset's command-line
// level; kohya's int defaults of float options as its metadata writes them; the optimizer and
// scheduler names from their registries.
#include <doctest/doctest.h>

#include "sdtrain_cli_fixtures.h"

#include <algorithm>
#include <map>
#include <set>

#include "optim/descriptor.h"
#include "optim/schedule.h"
#include "sdtrain_fixtures.h"
#include "tools/common/cli.h"
#include "tools/sdtrain/options.h"
#include "train/run/config_view.h"
#include "train/run/data_plan.h"
#include "train/run/option_table.h"

using namespace sdtrain_test;

using namespace sdtrain_cli_test;

namespace {

const train::Option& option(const std::string& name) {
    const train::Option* o = train::find_option(name);
    REQUIRE_MESSAGE(o, name);
    return *o;
}

std::string joined(const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
}

}  // namespace

TEST_CASE("option table: each option, ss_* key and dataset key is declared once, with what it needs") {
    std::set<std::string> names, ss_keys, dataset_keys;
    for (const train::Option& o : train::option_table()) {
        CAPTURE(o.name);
        CHECK(names.insert(o.name).second);
        CHECK(o.set);
        if (!o.ss_key.empty()) {
            CHECK(ss_keys.insert(o.ss_key).second);
            CHECK(o.ss_key.rfind("ss_", 0) == 0);
            CHECK(o.python);
        }
        if (!o.dataset_key.empty()) {
            CHECK(dataset_keys.insert(o.dataset_key).second);
            CHECK(o.dataset_value);
        }
        if (!o.section.empty()) CHECK(o.show);
        if (o.group.empty()) CHECK(o.section.empty());  // refused: neither in --help nor in the report
    }
    // kohya's keys of options sdtrain refuses are their defaults (what kohya writes when they are not given).
    const train::RunConfig c = parse({});
    CHECK(option("multires_noise_discount").python(c) == "0.3");
    CHECK(option("zero_terminal_snr").python(c) == "False");
    CHECK(option("validation_split").python(c) == "0.0");
    CHECK(option("v2").python(c) == "False");
    CHECK(option("lowram").python(c) == "False");
    CHECK(option("ip_noise_gamma").python(c) == "None");
    CHECK(usage_error({"--zero_stage", "3"}).find("not supported") != std::string::npos);
    CHECK(usage_error({"--dynamo_backend", "inductor", "--zero_stage", "2"}) == "(no error)");
}

TEST_CASE("option table: kohya's int default of a float option is its metadata's '1' until the option is given") {
    // kohya: --network_alpha type=float default=1: argparse leaves the default an int (str: "1"),
    // a given 1 becomes 1.0.
    const train::Option& alpha = option("network_alpha");
    CHECK(alpha.python(parse({})) == "1");
    CHECK(alpha.python(parse({"--network_alpha", "1"})) == "1.0");
    CHECK(alpha.python(parse({"--network_alpha", "1.0"})) == "1.0");
    CHECK(alpha.python(parse({"--network_alpha", "4"})) == "4.0");
    Scratch s("option-table");
    write_text(s.root / "run.toml", "[network_arguments]\nnetwork_alpha = 1\n");
    CHECK(alpha.python(parse({"--config_file", (s.root / "run.toml").string()})) == "1.0");
    // A configuration built in code: a value other than the default was set, the default was not.
    train::RunConfig c;
    CHECK(alpha.python(c) == "1");
    c.network_alpha = 2;
    CHECK(alpha.python(c) == "2.0");
    // A float default written as a float is the float, given or not.
    CHECK(option("learning_rate").python(parse({})) == "2e-06");
    CHECK(option("max_grad_norm").python(parse({})) == "1.0");
    // The options a command line or a config file set are the given ones (an alias sets its option).
    const train::RunConfig g = parse({"--seed", "5", "--caption_extention", ".txt"});
    CHECK(g.given.count("seed"));
    CHECK(g.given.count("caption_extension"));
    CHECK_FALSE(g.given.count("network_alpha"));
}

TEST_CASE("option table: optimizer and scheduler names come from their registries") {
    const std::string optimizer_help = option("optimizer_type").help;
    for (const optim::OptimizerDef* d : optim::optimizer_defs()) {
        CAPTURE(d->name);
        CHECK(optimizer_help.find(d->name) != std::string::npos);
        CHECK(std::string(parse({"--optimizer_type", d->name}).optimizer().name()) == d->name);
    }
    const std::vector<std::string> schedulers = train::lr_scheduler_names();
    CHECK(schedulers.size() == optim::lr_kind_names().size() + 1);
    CHECK(option("lr_scheduler").help.find(joined(schedulers)) != std::string::npos);
    for (const std::string& name : optim::lr_kind_names()) {
        CAPTURE(name);
        // The two that need an argument kohya has no default for.
        const std::vector<std::string> extra = name == "cosine_with_min_lr" ? std::vector<std::string>{"--lr_scheduler_min_lr_ratio", "0.1"}
                                               : name == "piecewise_constant"
                                                   ? std::vector<std::string>{"--lr_scheduler_args", "step_rules='1:10,0.1'"}
                                                   : std::vector<std::string>{};
        std::vector<std::string> argv = {"--lr_scheduler", name};
        argv.insert(argv.end(), extra.begin(), extra.end());
        CHECK(parse(argv).lr_scheduler == name);
    }
    CHECK(parse({"--lr_scheduler", "adafactor", "--optimizer_type", "Adafactor"}).lr_scheduler == "adafactor");
    CHECK(usage_error({"--lr_scheduler", "cosine_annealing"}) ==
          "--lr_scheduler cosine_annealing is not supported (" + joined(schedulers) + ")");
}

TEST_CASE("option table: the report shows every option of the shown groups, the dataset level its settings") {
    const train::RunConfig c = parse({"--caption_prefix", "photo of", "--train_batch_size", "3", "--resolution",
                                      "512,768", "--metadata_title", "T", "--dry_run"});
    std::vector<std::string> shown, declared;
    for (const train::ConfigSection& s : train::config_sections(c))
        for (const auto& [name, value] : s.entries) shown.push_back(name);
    for (const train::Option& o : train::option_table())
        if (!o.section.empty()) declared.push_back(o.name);
    CHECK(shown == declared);
    CHECK(std::find(shown.begin(), shown.end(), "metadata_title") != shown.end());
    CHECK(std::find(shown.begin(), shown.end(), "dry_run") == shown.end());            // how sdtrain runs
    CHECK(std::find(shown.begin(), shown.end(), "caption_extention") == shown.end());  // an alias
    CHECK(std::find(shown.begin(), shown.end(), "xformers") == shown.end());           // not needed

    const data::ConfigLevel l = train::dataset_command_line(c);
    CHECK(std::get<int64_t>(l.at("batch_size")) == 3);
    CHECK(std::get<std::string>(l.at("caption_prefix")) == "photo of");
    CHECK(std::get<std::string>(l.at("caption_extension")) == ".caption");
    CHECK((std::get<std::array<int64_t, 2>>(l.at("resolution")) == std::array<int64_t, 2>{512, 768}));
    CHECK(std::get<double>(l.at("caption_dropout_rate")) == 0.0);
    CHECK_FALSE(l.count("caption_suffix"));  // unset: the level leaves it to kohya's default
    size_t settings = 0;
    for (const train::Option& o : train::option_table())
        if (!o.dataset_key.empty() && o.dataset_value(c)) settings++;
    CHECK(l.size() == settings);
}
