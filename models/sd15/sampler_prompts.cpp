#include "models/sd15/sampler_prompts.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "models/sd15/sampler.h"

namespace sd {

namespace {

std::string_view trim(std::string_view s) {
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; };
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    return s;
}

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return r;
}

// The whole of s as a non-negative decimal integer (digits only, as kohya's \d+).
template <class T>
std::optional<T> parse_uint(std::string_view s) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
    T v{};
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

// kohya's [\d.]+ read by Python's float(): digits with at most one dot.
std::optional<double> parse_scale(std::string_view s) {
    const bool chars_ok = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
    if (!chars_ok || std::count(s.begin(), s.end(), '.') > 1 || s == ".") return std::nullopt;
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
    return v;
}

}  // namespace

SamplePrompt kohya_prompt_defaults() { return SamplePrompt{}; }

void validate_prompt(const SamplePrompt& p, const std::string& where) {
    for (const auto& [name, v] : {std::pair{"width", p.width}, std::pair{"height", p.height}})
        GL_CHECK(v >= 8 && v <= 8192 && v % 8 == 0, where, ": ", name, " ", v,
                 " must be a multiple of 8 in [8, 8192] (the VAE works on 8x8-pixel latents)");
    GL_CHECK(std::isfinite(p.cfg_scale) && p.cfg_scale >= 0, where, ": CFG scale ", p.cfg_scale,
             " must be finite and >= 0");
    GL_CHECK(p.steps >= 1 && p.steps <= 1000, where, ": steps ", p.steps, " must be in [1, 1000]");
    if (!p.sampler.empty()) {
        try {
            parse_sampler_name(p.sampler);
        } catch (const gl::Error& e) {
            gl::fail(where, ": ", e.what());
        }
    }
}

std::optional<SamplePrompt> parse_prompt_line(std::string_view raw, const SamplePrompt& defaults,
                                              const std::string& origin, int line_no) {
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') return std::nullopt;
    const std::string where = line_no > 0 ? gl::cat(origin, ":", line_no) : origin;
    SamplePrompt p = defaults;
    p.line = line_no;

    // Pieces between " --" separators: the prompt, then one option each.
    std::vector<std::string_view> pieces;
    for (size_t pos = 0;;) {
        const size_t next = line.find(" --", pos);
        pieces.push_back(line.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
        if (next == std::string_view::npos) break;
        pos = next + 3;
    }
    p.prompt = std::string(trim(pieces.front()));
    for (size_t i = 1; i < pieces.size(); i++) {
        const std::string_view piece = trim(pieces[i]);
        const size_t space = piece.find_first_of(" \t");
        const std::string flag = lower(piece.substr(0, space));
        const std::string_view value = space == std::string_view::npos ? std::string_view() : trim(piece.substr(space));
        const std::string shown = gl::cat("--", piece.substr(0, space));
        GL_CHECK(!flag.empty(), where, ": an empty option ('--' followed by a space or nothing)");
        if (flag == "g" || flag == "cn" || flag == "ctr" || flag == "rcfg" || flag == "fs")
            gl::fail(where, ": ", shown, " is one of kohya's options for other model families (guidance scale, "
                     "ControlNet image, CFG truncation / renormalisation, flow shift); SD1.5 sampling has no such option");
        const bool known = flag == "w" || flag == "h" || flag == "d" || flag == "s" || flag == "l" || flag == "n" ||
                           flag == "ss";
        GL_CHECK(known, where, ": unknown option ", shown, " (known: --n --w --h --d --l --s --ss)");
        GL_CHECK(!value.empty(), where, ": ", shown, " has no value");
        auto bad = [&](const char* want) { gl::fail(where, ": ", shown, " '", value, "' is not ", want); };
        if (flag == "w" || flag == "h") {
            const auto v = parse_uint<int>(value);
            if (!v) bad("a whole number of pixels");
            (flag == "w" ? p.width : p.height) = *v;
        } else if (flag == "d") {
            const auto v = parse_uint<uint64_t>(value);
            if (!v) bad("a seed (a whole number below 2^64)");
            p.seed = *v;
        } else if (flag == "s") {
            const auto v = parse_uint<uint64_t>(value);
            if (!v) bad("a whole number of steps");
            p.steps = int(std::clamp<uint64_t>(*v, 1, 1000));  // kohya: max(1, min(1000, steps))
        } else if (flag == "l") {
            const auto v = parse_scale(value);
            if (!v) bad("a CFG scale (digits and one dot)");
            p.cfg_scale = *v;
        } else if (flag == "n") {
            p.negative = std::string(value);
        } else {  // ss
            p.sampler = std::string(value);
        }
    }
    validate_prompt(p, where);
    return p;
}

std::vector<SamplePrompt> parse_prompt_text(std::string_view text, const SamplePrompt& defaults,
                                            const std::string& origin) {
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    std::vector<SamplePrompt> out;
    int line_no = 0;
    for (size_t pos = 0; pos <= text.size();) {
        const size_t nl = text.find('\n', pos);
        const std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        line_no++;
        if (auto p = parse_prompt_line(line, defaults, origin, line_no)) out.push_back(std::move(*p));
        if (nl == std::string_view::npos) break;
        pos = nl + 1;
    }
    return out;
}

std::vector<SamplePrompt> read_prompt_file(const std::string& path, const SamplePrompt& defaults) {
    const std::string ext = lower(path.substr(std::min(path.size(), path.find_last_of('.'))));
    GL_CHECK(ext != ".toml" && ext != ".json", "prompt file ", path, ": kohya's ", ext,
             " prompt files are not read here; write one prompt per line in a .txt file");
    std::string text;
    try {  // a FIFO or a folder is refused, never waited on
        text = gl::io::read_small_file(path);
    } catch (const gl::Error& e) {
        gl::fail("prompt file ", e.what());
    }
    std::vector<SamplePrompt> out = parse_prompt_text(text, defaults, path);
    GL_CHECK(!out.empty(), "prompt file ", path, ": holds no prompt (only empty or '#' comment lines)");
    return out;
}

}  // namespace sd
