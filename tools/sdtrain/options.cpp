#include "tools/sdtrain/options.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "data/toml_value.h"
#include "ggml-lite/io/files.h"
#include "tools/common/cli.h"
#include "train/run/option_table.h"

namespace sdtrain {

namespace fs = std::filesystem;
using gl::cli::UsageError;
using train::find_option;
using train::Option;
using train::OptionKind;
using train::option_table;
using Values = train::OptionValues;

namespace {

constexpr const char* kDescription =
    "sdtrain: train an SD1.5 LoRA (kohya sd-scripts' train_network.py options and config files)";

std::string number_text(double x) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, end);
}

// What an option takes, for the error about a TOML value it cannot take.
std::string wanted(const Option* o) {
    if (!o) return "a value";
    if (o->kind == OptionKind::flag) return "true or false";
    if (o->kind == OptionKind::list) return o->numeric ? "an array of numbers" : "an array of strings";
    return o->numeric ? "a number" : "a string";
}

// One TOML value as option text (arrays: one text per element).
Values toml_values(const toml::node& n, const std::string& key, const std::string& where) {
    if (auto b = n.value_exact<bool>()) return {*b ? "true" : "false"};
    if (auto i = n.value_exact<int64_t>()) return {std::to_string(*i)};
    if (auto d = n.value_exact<double>()) return {number_text(*d)};
    if (auto s = n.value_exact<std::string>()) return {*s};
    if (const toml::array* a = n.as_array()) {
        Values out;
        for (const toml::node& e : *a) {
            if (!e.is_boolean() && !e.is_integer() && !e.is_floating_point() && !e.is_string())
                throw UsageError(gl::cat(where, ": ", data::describe_toml_value(n), " is not an option value (", key,
                                         " takes ", wanted(find_option(key)), ")"));
            out.push_back(toml_values(e, key, where)[0]);
        }
        return out;
    }
    const char* nesting = n.is_table() ? "; tables nest one level, as kohya reads them" : "";
    throw UsageError(gl::cat(where, ": ", data::describe_toml_value(n), " is not an option value (", key, " takes ",
                             wanted(find_option(key)), nesting, ")"));
}

std::string toml_quote(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') out += '\\';
        if (ch == '\n') {
            out += "\\n";
            continue;
        }
        out += ch;
    }
    return out + "\"";
}

// kohya's read_config_from_file drops an argument whose value is its default (vars(args) against
// parse_args([])): the values compared, not their spelling ("2e-6" is learning_rate's 2e-06).
bool is_kohya_default(const Option& o, const Values& values) {
    if (!o.set || !o.show || o.kind == OptionKind::flag) return false;
    train::RunConfig given;
    try {
        o.set(given, "--" + o.name, o.kind == OptionKind::value ? Values{values.back()} : values);
    } catch (const gl::Error&) {
        return false;  // refused later, naming the value
    }
    return o.show(given) == o.show(train::RunConfig{});
}

// kohya's --output_config: the options given on the command line that differ from kohya's
// defaults, as a TOML file (refused when the file exists); then the program stops, as kohya exits.
void write_config(const std::string& path, const std::map<std::string, Values>& given) {
    std::error_code ec;
    if (fs::exists(path, ec)) throw UsageError("--output_config: " + path + " exists already (kohya refuses too)");
    std::string text;
    for (const auto& [name, values] : given) {
        if (name == "config_file" || name == "output_config") continue;
        const Option& o = *find_option(name);
        if (is_kohya_default(o, values)) continue;
        text += name + " = ";
        if (o.kind == OptionKind::flag) {
            text += "true";
        } else if (o.kind == OptionKind::list) {
            text += "[";
            for (size_t i = 0; i < values.size(); i++)
                text += (i ? ", " : "") + (o.numeric ? values[i] : toml_quote(values[i]));
            text += "]";
        } else {
            text += o.numeric ? values.back() : toml_quote(values.back());
        }
        text += "\n";
    }
    std::ofstream f(path, std::ios::binary);
    f << text;
    f.flush();
    if (!f) throw gl::Error("--output_config: cannot write " + path);
}

// Applies one option's values (a bad one is a usage error); a NUL (a TOML "\u0000") would cut a
// path or name short.
void set_option(const Option& o, train::RunConfig& c, const std::string& where, const Values& values) {
    for (const std::string& v : values)
        if (v.find('\0') != std::string::npos) throw UsageError(where + ": a value holds a NUL character");
    try {
        o.set(c, where, values);
    } catch (const gl::Error& e) {
        throw UsageError(e.what());
    }
}

// kohya's switches are store_true: "--cache_latents=yes" is refused there ("ignored explicit
// argument"), where CLI11 would read it as true and "=no" as nothing at all.
void refuse_switch_values(const std::vector<std::string>& args) {
    for (const std::string& a : args) {
        const size_t eq = a.find('=');
        if (a.rfind("--", 0) != 0 || eq == std::string::npos) continue;
        const std::string name = a.substr(2, eq - 2);
        const Option* o = find_option(name);
        if ((o && o->kind == OptionKind::flag) || name == "output_config")
            throw UsageError(gl::cat("--", name, " is a switch and takes no value, got '", a, "' (kohya refuses it "
                                     "too); leave it out for false"));
    }
}

// The options given with no value after them (CLI11 hands those one empty value, as it hands
// --name ''): kohya's nargs="*" makes them the empty list.
std::set<std::string> given_bare(const std::vector<std::string>& args) {
    std::set<std::string> bare;
    for (size_t i = 0; i < args.size(); i++)
        if (args[i].rfind("--", 0) == 0 && args[i].find('=') == std::string::npos &&
            (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0))
            bare.insert(args[i].substr(2));
    return bare;
}

// Lists that keep their last occurrence, as kohya's argparse does (nargs="*", action "store"):
// GUIs and scripts that append a --network_args to a command line count on it.
bool last_list_counts(const std::string& name) { return name == "network_args"; }

// How often each option is given on the command line.
std::map<std::string, int> occurrences(const std::vector<std::string>& args) {
    std::map<std::string, int> seen;
    for (const std::string& a : args) {
        const size_t eq = a.find('=');
        if (a.rfind("--", 0) == 0) seen[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)]++;
    }
    return seen;
}

// Any other list option given twice: kohya keeps the last list, where joining them is what one may mean.
void refuse_repeated_lists(const std::vector<std::string>& args) {
    for (const auto& [name, n] : occurrences(args)) {
        const Option* o = find_option(name);
        if (o && o->kind == OptionKind::list && n >= 2 && !last_list_counts(name))
            throw UsageError(gl::cat("--", name, " was given twice: give all its values after one --", name,
                                     " (kohya would keep only the last list)"));
    }
}

}  // namespace

std::vector<std::pair<std::string, Values>> read_config_file(const std::string& path) {
    std::string text;
    try {  // a FIFO or a folder is refused, never waited on
        text = gl::io::read_small_file(path);
    } catch (const gl::Error& e) {
        throw UsageError("--config_file " + path + ": cannot be read (" + e.what() + ")");
    }
    toml::table root;
    try {
        root = toml::parse(text, path);
    } catch (const toml::parse_error& e) {
        // The line itself too: it names the key whose value is bad (an integer beyond 64 bits).
        const auto line_no = size_t(e.source().begin.line);
        std::istringstream lines(text);
        std::string line;
        size_t read = 0;
        while (read < line_no && std::getline(lines, line)) read++;
        std::ostringstream os;
        os << e.description() << " (line " << line_no << ", column " << e.source().begin.column;
        if (read == line_no && line_no >= 1 && line.size() <= 200) os << ": '" << line << "'";
        os << ")";
        throw UsageError("--config_file " + path + ": invalid TOML: " + os.str());
    }
    std::vector<std::pair<std::string, Values>> out;
    auto add = [&](const std::string& key, const toml::node& n, const std::string& where) {
        out.emplace_back(key, toml_values(n, key, where));
    };
    for (const auto& [k, node] : root) {
        const std::string key(k.str());
        if (const toml::table* t = node.as_table()) {  // a section: its keys, the section's name ignored
            for (const auto& [k2, n2] : *t) add(std::string(k2.str()), n2, path + ": [" + key + "] " + std::string(k2.str()));
        } else {
            add(key, node, path + ": " + key);
        }
    }
    return out;
}

std::vector<std::string> known_option_names() {
    std::vector<std::string> n;
    for (const Option& o : option_table()) n.push_back(o.name);
    return n;
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
    gl::cli::Parser p("sdtrain", kDescription);
    CLI::App& app = p.app();
    std::map<std::string, Values> given;  // what the command line said, by option
    const std::set<std::string> bare_options = given_bare(args);
    for (const Option& o : option_table()) {
        const std::string flag = "--" + o.name, name = o.name;
        CLI::Option* opt = nullptr;
        if (o.kind == OptionKind::flag) {
            opt = app.add_flag_callback(flag, [&given, name] { given[name] = {}; }, o.help);
        } else {
            opt = app.add_option(
                flag,
                [&given, &bare_options, name, kind = o.kind, numeric = o.numeric](const CLI::results_t& r) {
                    given[name] = Values(r.begin(), r.end());  // a value option: each time it was given
                    // A bare --network_args, or a bare list of numbers, is kohya's empty list
                    // (--text_encoder_lr: None); --text_encoder_lr '' is a bad number, as for kohya.
                    const bool bare = kind == OptionKind::list && r.size() == 1 && r[0].empty();
                    if (bare && (last_list_counts(name) || (numeric && bare_options.count(name))))
                        given[name].clear();
                    return true;
                },
                o.help);
            opt->type_name(o.type);
            if (o.kind == OptionKind::list) {
                opt->expected(0, -1)->allow_extra_args(true);
                if (last_list_counts(name)) opt->trigger_on_parse();  // each occurrence replaces the last
            } else {
                opt->type_size(1)->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
            }
        }
        opt->group(o.group);
    }
    app.add_option("--config_file", [&given](const CLI::results_t& r) {
           given["config_file"] = {r.back()};
           return true;
       }, "kohya's TOML of these options (sections ignored; the command line wins)")
        ->type_name("TOML")
        ->expected(1)
        ->group("Run");
    app.add_flag_callback("--output_config", [&given] { given["output_config"] = {}; },
                          "write the command line's options to --config_file and stop")
        ->group("Run");
    refuse_switch_values(args);
    refuse_repeated_lists(args);
    p.parse(args);

    CommandLine cl;
    train::RunConfig& c = cl.config;
    std::string config_file;
    if (given.count("config_file")) {
        config_file = given["config_file"][0];
        if (config_file.size() < 5 || config_file.compare(config_file.size() - 5, 5, ".toml") != 0)
            config_file += ".toml";  // kohya appends it
    }
    if (given.count("output_config")) {
        if (config_file.empty()) throw UsageError("--output_config needs --config_file (the file to write)");
        write_config(config_file, given);
        cl.wrote_config = config_file;
        return cl;
    }
    if (!config_file.empty())
        for (const auto& [key, values] : read_config_file(config_file)) {
            const std::string where = config_file + ": " + key;
            if (key == "config_file" || key == "output_config")
                throw UsageError(where + ": not an option a config file can set");
            const Option* o = find_option(key);
            if (!o) throw UsageError(where + ": unknown option (sdtrain takes train_network.py's option names)");
            if (given.count(key)) continue;  // the command line wins
            set_option(*o, c, where, values);
        }
    for (const auto& [name, values] : given) {
        const Option* o = find_option(name);
        if (!o) continue;
        if (o->kind != OptionKind::value) {
            set_option(*o, c, "--" + name, values);
            continue;
        }
        for (const std::string& v : values) set_option(*o, c, "--" + name, {v});  // each checked, the last counts
    }
    for (const auto& [name, n] : occurrences(args))
        if (n >= 2 && last_list_counts(name) && given.count(name))
            c.note(gl::cat("--", name, " was given ", n, " times: the last list counts (as kohya's argparse), the "
                           "earlier ones are ignored"));
    try {
        c.validate();
    } catch (const UsageError&) {
        throw;
    } catch (const gl::Error& e) {
        throw UsageError(e.what());
    }
    return cl;
}

}  // namespace sdtrain
