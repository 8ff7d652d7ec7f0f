#include "models/diffusion/sampler_prompts.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "models/diffusion/sampler.h"

namespace diffusion {

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

// How a value of kohya's \d+ or [\d.]+ read.
enum class Read : uint8_t { ok, malformed, too_large };

// The whole of s as a non-negative decimal integer (digits only, as kohya's \d+).
Read parse_digits(std::string_view s, uint64_t& v) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return Read::malformed;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && end == s.data() + s.size() ? Read::ok : Read::too_large;
}

// kohya's [\d.]+ read by Python's float(): digits with at most one dot.
Read parse_scale(std::string_view s, double& v) {
    const bool chars_ok = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
    if (!chars_ok || std::count(s.begin(), s.end(), '.') > 1 || s == ".") return Read::malformed;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (end != s.data() + s.size()) return Read::malformed;
    return ec == std::errc() && std::isfinite(v) ? Read::ok : Read::too_large;
}

std::string side_rule(const SampleBounds& b) {
    return gl::cat("a multiple of ", b.side_step, " in [", b.side_min, ", ", b.side_max, "]");
}

}  // namespace

SamplePrompt kohya_prompt_defaults() { return SamplePrompt{}; }

void validate_prompt(const SamplePrompt& p, const std::string& where) {
    const SampleBounds& b = kSampleBounds;
    for (const auto& [name, v] : {std::pair{"width", p.width}, std::pair{"height", p.height}})
        GL_CHECK(v >= b.side_min && v <= b.side_max && v % b.side_step == 0, where, ": ", name, " ", v, " must be ",
                 side_rule(b), " (the VAE works on 8x8-pixel latents; larger sides are beyond SD1.5)");
    GL_CHECK(std::isfinite(p.cfg_scale) && p.cfg_scale >= 0 && p.cfg_scale <= b.cfg_max, where, ": CFG scale ",
             p.cfg_scale, " must be in [0, ", b.cfg_max, "]");
    GL_CHECK(p.steps >= b.steps_min && p.steps <= b.steps_max, where, ": steps ", p.steps, " must be in [",
             b.steps_min, ", ", b.steps_max, "]");
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
    p.where = where;

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
        auto too_large = [&](const std::string& rule) {
            gl::fail(where, ": ", shown, " ", value, " is out of range: ", rule);
        };
        // A whole number that fits an int (validate_prompt then checks the bounds).
        auto whole_int = [&](const char* want, const std::string& rule) {
            uint64_t v = 0;
            const Read r = parse_digits(value, v);
            if (r == Read::malformed) bad(want);
            if (r == Read::too_large || v > uint64_t(std::numeric_limits<int>::max())) too_large(rule);
            return int(v);
        };
        const SampleBounds& b = kSampleBounds;
        if (flag == "w" || flag == "h") {
            (flag == "w" ? p.width : p.height) = whole_int("a whole number of pixels", "a side is " + side_rule(b));
        } else if (flag == "s") {
            p.steps = whole_int("a whole number of steps", gl::cat("steps must be in [", b.steps_min, ", ",
                                                                   b.steps_max, "]"));
        } else if (flag == "d") {
            uint64_t v = 0;
            const Read r = parse_digits(value, v);
            if (r == Read::malformed) bad("a seed (a whole number)");
            if (r == Read::too_large)
                too_large(gl::cat("a seed is an integer in [0, ", std::numeric_limits<uint64_t>::max(), "]"));
            p.seed = v;
        } else if (flag == "l") {
            double v = 0;
            const Read r = parse_scale(value, v);
            if (r == Read::malformed) bad("a CFG scale (digits and one dot)");
            if (r == Read::too_large) too_large(gl::cat("the CFG scale must be in [0, ", b.cfg_max, "]"));
            p.cfg_scale = v;
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

}  // namespace diffusion
