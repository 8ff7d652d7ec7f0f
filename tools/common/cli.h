// The command line of our programs (tools/, bench_step, bench_load): CLI11 underneath, and around
// it what every program needs the same way:
//   - numbers read whole, in base 10, into exactly the variable's type and within the flag's
//     range; anything else ("abc", "12x", "0x10", 4294967297 for an int) is refused with the flag
//     and the accepted range named;
//   - `--backend auto|cpu|cuda` into gl::Backend (make_runtime takes it);
//   - values a library parser turns into an enum (gl::parse_recompute, ...), and comma lists;
//   - run_main, the one top-level wrapper: a bad command line exits 2, a failure 1 (or the
//     program's own status), every message on one line as "<program>: error: <message>", and no
//     bare std::exception text ("stof") without saying what it is.
// CLI::App stays reachable (app()) for flags, positionals and option groups.
#pragma once
#include <CLI/CLI.hpp>

#include <concepts>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/number_text.h"
#include "ggml-lite/core/runtime.h"

namespace gl::cli {

// A bad command line (run_main exits 2). The message names the flag or argument.
class UsageError : public gl::Error {
public:
    using gl::Error::Error;
};

// --help was given: what() is the help text (run_main prints it on stdout and exits 0).
class HelpRequested : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The number readers of ggml-lite/core/number_text.h, their errors as UsageErrors naming the flag.
using gl::range_text;
using gl::real_range_text;
template <std::integral T>
T parse_int(std::string_view flag, std::string_view text, T lo, T hi) {
    try {
        return gl::parse_int(flag, text, lo, hi);
    } catch (const gl::Error& e) {
        throw UsageError(e.what());
    }
}
template <std::floating_point T, std::floating_point Used = T>
T parse_real(std::string_view flag, std::string_view text, T lo, T hi) {
    try {
        return gl::parse_real<T, Used>(flag, text, lo, hi);
    } catch (const gl::Error& e) {
        throw UsageError(e.what());
    }
}

// The items of a comma-separated list ("1,8" -> {"1", "8"}); an empty item is a UsageError.
std::vector<std::string> split_list(std::string_view flag, std::string_view text);

class Parser {
public:
    Parser(const std::string& program, const std::string& description);
    CLI::App& app() { return app_; }

    // An integer option, range-checked into exactly T; --help shows the range and the default
    // (into's value).
    template <std::integral T>
    CLI::Option* add_int(const std::string& flags, T& into, T lo, T hi, const std::string& help) {
        return add_value(flags, help + " " + range_text(+lo, +hi), "INT", cat(+into),
                         [&into, lo, hi](const std::string& flag, const std::string& v) {
                             into = parse_int(flag, v, lo, hi);
                         });
    }
    template <std::floating_point T>
    CLI::Option* add_real(const std::string& flags, T& into, T lo, T hi, const std::string& help) {
        const std::string range = real_range_text(lo, hi);
        return add_value(flags, range.empty() ? help : help + " (" + range.substr(1) + ")", "NUMBER", cat(into),
                         [&into, lo, hi](const std::string& flag, const std::string& v) {
                             into = parse_real(flag, v, lo, hi);
                         });
    }
    // A comma list of integers ("--batch 1,8"); a repeated flag replaces the list.
    template <std::integral T>
    CLI::Option* add_int_list(const std::string& flags, std::vector<T>& into, T lo, T hi, const std::string& help) {
        return add_value(flags, help + ", each in " + range_text(+lo, +hi), "INT,...", "",
                         [&into, lo, hi](const std::string& flag, const std::string& v) {
                             into.clear();
                             for (const std::string& item : split_list(flag, v))
                                 into.push_back(parse_int(flag, item, lo, hi));
                         });
    }
    // A value a library parser turns into T (gl::parse_recompute, train::parse_precision, ...):
    // the gl::Error it throws for an unknown name becomes a UsageError naming the flag.
    template <class T>
    CLI::Option* add_parsed(const std::string& flags, T& into, T (*parse)(const std::string&),
                            const std::string& type, const std::string& help, const std::string& default_text = "") {
        return add_value(flags, help, type, default_text,
                         [&into, parse](const std::string& flag, const std::string& v) {
                             into = named(flag, [&] { return parse(v); });
                         });
    }
    template <class T>
    CLI::Option* add_parsed_list(const std::string& flags, std::vector<T>& into, T (*parse)(const std::string&),
                                 const std::string& type, const std::string& help,
                                 const std::string& default_text = "") {
        return add_value(flags, help, type, default_text,
                         [&into, parse](const std::string& flag, const std::string& v) {
                             into.clear();
                             for (const std::string& item : split_list(flag, v))
                                 into.push_back(named(flag, [&] { return parse(item); }));
                         });
    }
    // A path: a required positional argument when name is a bare word ("BASE"), else an option
    // ("--file"; the default is into's value).
    CLI::Option* add_path(const std::string& name, std::string& into, const std::string& help);
    // A switch without a value (--tiny).
    CLI::Option* add_flag(const std::string& flags, bool& into, const std::string& help) {
        return app_.add_flag(flags, into, help);
    }
    // One of a fixed set of words.
    CLI::Option* add_choice(const std::string& flags, std::string& into, const std::vector<std::string>& choices,
                            const std::string& help);
    // --backend auto|cpu|cuda (the default is into's value).
    CLI::Option* add_backend(gl::Backend& into, const std::string& help = "where the graphs run");

    // Parses argv[1..]: throws UsageError for a bad command line, HelpRequested for --help.
    void parse(int argc, const char* const* argv);
    void parse(const std::vector<std::string>& args);  // the arguments without the program name

private:
    using Store = std::function<void(const std::string& flag, const std::string& value)>;
    CLI::Option* add_value(const std::string& flags, const std::string& help, const std::string& type,
                           const std::string& default_text, Store store);
    template <class F>
    static auto named(const std::string& flag, F&& f) {
        try {
            return f();
        } catch (const UsageError&) {
            throw;
        } catch (const gl::Error& e) {
            throw UsageError(cat(flag, ": ", e.what()));
        }
    }
    void rethrow(const CLI::ParseError& e);
    // CLI11 reads an argument that starts with '-' and a letter as an option, so "--lr -inf" would
    // lose its value: a negative number, infinity or NaN after an option that takes a value is
    // joined to it ("--lr=-inf"), to be read as the value (and refused by range, naming the option).
    std::vector<std::string> values_joined(const std::vector<std::string>& args) const;
    CLI::App app_;
};

// What run_main prints and returns when the program's body throws e.
struct Exit {
    int status = 0;
    std::string text;  // ends in a newline
    bool to_stdout = false;  // help; everything else goes to stderr
};
Exit exit_for(std::exception_ptr e, const std::string& program, int failure_status = 1);

// The top level of main(): runs body and returns its status, or prints what went wrong and returns
// 2 for a bad command line, failure_status (default 1) for any other error, 0 after --help.
int run_main(const std::string& program, const std::function<int()>& body, int failure_status = 1);

}  // namespace gl::cli
