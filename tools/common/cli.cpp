#include "tools/common/cli.h"

#include <cxxabi.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <typeinfo>

namespace gl::cli {

namespace {

// The readable name of an exception's type ("std::invalid_argument"), for errors we did not expect.
std::string type_name_of(const std::exception& e) {
    int status = 0;
    const std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status),
                                                   std::free);
    return status == 0 && d ? std::string(d.get()) : std::string(typeid(e).name());
}

}  // namespace

LoraArg parse_lora_arg(const std::string& arg) {
    const size_t colon = arg.rfind(':');
    if (colon != std::string::npos && colon + 1 < arg.size()) {
        const std::string m = arg.substr(colon + 1);
        char* end = nullptr;
        const float v = std::strtof(m.c_str(), &end);
        if (end && *end == '\0') return {arg.substr(0, colon), v};
    }
    return {arg, 1.0f};
}

std::vector<std::string> split_list(std::string_view flag, std::string_view text) {
    std::vector<std::string> items;
    size_t a = 0;
    for (;;) {
        const size_t b = text.find(',', a);
        items.emplace_back(text.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
        if (items.back().empty()) throw UsageError(cat(flag, " has an empty item in '", text, "'"));
        if (b == std::string_view::npos) return items;
        a = b + 1;
    }
}

Parser::Parser(const std::string& program, const std::string& description) : app_(description, program) {
    app_.set_help_flag("-h,--help", "print this help and exit");
}

CLI::Option* Parser::add_value(const std::string& flags, const std::string& help, const std::string& type,
                               const std::string& default_text, Store store) {
    // The callback needs the option's own name for its messages, known once the option exists.
    auto name = std::make_shared<std::string>();
    CLI::Option* o = app_.add_option(
        flags,
        [store = std::move(store), name](const CLI::results_t& r) {
            store(*name, r.back());
            return true;
        },
        help);
    *name = o->get_name();
    o->type_name(type);
    o->type_size(1);
    o->expected(1);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last one counts
    if (!default_text.empty()) o->default_str(default_text);
    return o;
}

CLI::Option* Parser::add_path(const std::string& name, std::string& into, const std::string& help) {
    CLI::Option* o = app_.add_option(name, into, help)->type_name("PATH");
    if (o->get_positional()) o->required();
    else if (!into.empty()) o->default_str(into);
    return o;
}

CLI::Option* Parser::add_choice(const std::string& flags, std::string& into, const std::vector<std::string>& choices,
                                const std::string& help) {
    std::string bar, comma;
    for (const std::string& c : choices) {
        bar += (bar.empty() ? "" : "|") + c;
        comma += (comma.empty() ? "" : ", ") + c;
    }
    return add_value(flags, help, bar, into, [&into, choices, comma](const std::string& flag, const std::string& v) {
        if (std::find(choices.begin(), choices.end(), v) == choices.end())
            throw UsageError(cat(flag, " wants one of ", comma, ", got '", v, "'"));
        into = v;
    });
}

CLI::Option* Parser::add_backend(gl::Backend& into, const std::string& help) {
    return add_parsed("--backend", into, &gl::parse_backend, "auto|cpu|cuda",
                      help + " (auto: CUDA when built with it and a GPU is usable, else the CPU)", backend_name(into));
}

void Parser::parse(int argc, const char* const* argv) {
    parse(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
}

// "-inf", "-nan", "-1e5": an argument that reads whole as a negative number (or infinity, NaN).
bool negative_number(const std::string& a) {
    if (a.size() < 2 || a[0] != '-' || a[1] == '-') return false;
    double v = 0;
    const auto [ptr, ec] = std::from_chars(a.data(), a.data() + a.size(), v);
    return ptr == a.data() + a.size() && (ec == std::errc() || ec == std::errc::result_out_of_range);
}

std::vector<std::string> Parser::values_joined(const std::vector<std::string>& args) const {
    std::vector<std::string> out;
    for (size_t i = 0; i < args.size(); i++) {
        const std::string& a = args[i];
        const bool named = a.size() > 1 && a[0] == '-' && a.find('=') == std::string::npos;
        const CLI::Option* o = named ? app_.get_option_no_throw(a) : nullptr;
        if (o && o->get_items_expected_max() > 0 && i + 1 < args.size() && negative_number(args[i + 1])) {
            out.push_back(a + (a[1] == '-' ? "=" : "") + args[++i]);  // "--lr=-inf", "-W-8"
            continue;
        }
        out.push_back(a);
    }
    return out;
}

void Parser::parse(const std::vector<std::string>& args) {
    const std::vector<std::string> joined = values_joined(args);
    std::vector<std::string> reversed(joined.rbegin(), joined.rend());  // CLI11 takes them last first
    try {
        app_.parse(reversed);
    } catch (const CLI::ParseError& e) {
        rethrow(e);
    }
}

void Parser::rethrow(const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) throw HelpRequested(app_.help());
    throw UsageError(e.what());
}

Exit exit_for(std::exception_ptr e, const std::string& program, int failure_status) {
    const std::string head = program + ": error: ";
    try {
        std::rethrow_exception(e);
    } catch (const HelpRequested& h) {
        return {0, h.what(), true};
    } catch (const UsageError& u) {
        return {2, cat(head, u.what(), "\n(", program, " --help lists the options)\n")};
    } catch (const CLI::ParseError& p) {  // a program that parsed with CLI11 by itself
        return {2, cat(head, p.what(), "\n")};
    } catch (const gl::Error& g) {
        return {failure_status, cat(head, g.what(), "\n")};
    } catch (const std::bad_alloc&) {
        return {failure_status, cat(head, "out of memory (a host allocation failed)\n")};
    } catch (const std::exception& x) {
        return {failure_status, cat(head, "unexpected ", type_name_of(x), ": ", x.what(), "\n")};
    } catch (...) {
        return {failure_status, cat(head, "unexpected exception of an unknown type\n")};
    }
}

int run_main(const std::string& program, const std::function<int()>& body, int failure_status) {
    try {
        return body();
    } catch (...) {
        const Exit x = exit_for(std::current_exception(), program, failure_status);
        std::fflush(stdout);  // what the program printed before the error comes first
        std::fputs(x.text.c_str(), x.to_stdout ? stdout : stderr);
        return x.status;
    }
}

}  // namespace gl::cli
