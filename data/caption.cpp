#include "data/caption.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "ggml-lite/core/error.h"

namespace data {
namespace {

// Python's str.strip(): ASCII whitespace (enough for caption files; Unicode spaces are kept).
std::string strip(const std::string& s) {
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Python's str.split(sep) (sep non-empty): empty pieces kept.
std::vector<std::string> split(const std::string& s, const std::string& sep) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t next; (next = s.find(sep, at)) != std::string::npos; at = next + sep.size())
        out.push_back(s.substr(at, next - at));
    out.push_back(s.substr(at));
    return out;
}

std::vector<std::string> stripped_nonempty(const std::string& s, const std::string& sep) {
    std::vector<std::string> out;
    for (const std::string& t : split(s, sep))
        if (!strip(t).empty()) out.push_back(strip(t));
    return out;
}

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (n < 0 || s.size() - i <= size_t(n)) return false;  // a bad lead byte, or cut short
        for (int k = 1; k <= n; k++)
            if ((static_cast<unsigned char>(s[i + size_t(k)]) >> 6) != 2) return false;
        i += size_t(n) + 1;
    }
    return true;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
}

// kohya's wildcards: "{a|b|c}" (a '{', then anything up to the next '}', at least one character)
// becomes one of its '|' parts; "{{" and "}}" stand for literal braces. The escapes are swapped for
// a marker the caption does not hold while the wildcards are drawn, as kohya does.
std::string draw_wildcards(std::string caption, Rng& rng) {
    std::string open = "\x1e(", close = "\x1e)";
    while (caption.find(open) != std::string::npos || caption.find(close) != std::string::npos)
        open += '(', close += ')';
    replace_all(caption, "{{", open);
    replace_all(caption, "}}", close);
    std::string out;
    for (size_t i = 0; i < caption.size();) {
        const size_t end = caption[i] == '{' ? caption.find('}', i + 1) : std::string::npos;
        if (end == std::string::npos || end == i + 1) {
            out += caption[i++];
            continue;
        }
        const std::vector<std::string> options = split(caption.substr(i + 1, end - i - 1), "|");
        out += options[size_t(rng.below(options.size()))];
        i = end + 1;
    }
    replace_all(out, open, "{");
    replace_all(out, close, "}");
    return out;
}

}  // namespace

void CaptionOptions::validate() const {
    GL_CHECK(caption_dropout_rate >= 0 && caption_dropout_rate <= 1, "caption_dropout_rate must be in [0, 1], got ",
             caption_dropout_rate);
    GL_CHECK(caption_tag_dropout_rate >= 0 && caption_tag_dropout_rate <= 1,
             "caption_tag_dropout_rate must be in [0, 1], got ", caption_tag_dropout_rate);
    GL_CHECK(caption_dropout_every_n_epochs >= 0, "caption_dropout_every_n_epochs must be >= 0, got ",
             caption_dropout_every_n_epochs);
    GL_CHECK(keep_tokens >= 0, "keep_tokens must be >= 0, got ", keep_tokens);
    GL_CHECK(!caption_separator.empty(), "caption_separator must not be empty");
    GL_CHECK(token_warmup_min >= 0, "token_warmup_min must be >= 0, got ", token_warmup_min);
    GL_CHECK(std::isfinite(token_warmup_step) && token_warmup_step >= 0,
             "token_warmup_step must be a finite number >= 0, got ", token_warmup_step);
}

int64_t CaptionOptions::token_warmup_steps(int64_t max_train_steps) const {
    // Beyond 2^53 steps no run gets to the end of the warm-up: held there, where an int64 holds it.
    const double steps = token_warmup_step < 1 ? token_warmup_step * double(max_train_steps) : token_warmup_step;
    return int64_t(std::floor(std::min(steps, 0x1p53)));
}

std::optional<std::string> read_caption_file(const std::filesystem::path& image, const std::string& extension,
                                             bool all_lines) {
    std::filesystem::path p = image;
    p.replace_extension();
    p += extension;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
    std::ifstream f(p, std::ios::binary);
    GL_CHECK(f, "caption file ", p.string(), ": cannot be opened");
    std::ostringstream all;
    all << f.rdbuf();  // an empty file sets failbit on `all` only
    GL_CHECK(!f.bad(), "caption file ", p.string(), ": cannot be read");
    std::string text = all.str();
    if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // UTF-8 byte order mark
    GL_CHECK(valid_utf8(text), "caption file ", p.string(), ": not valid UTF-8");
    if (!all_lines) {
        const size_t nl = text.find('\n');
        return strip(nl == std::string::npos ? text : text.substr(0, nl));
    }
    std::string joined;
    for (const std::string& line : split(text, "\n")) {
        const std::string t = strip(line);
        if (t.empty()) continue;
        if (!joined.empty()) joined += '\n';
        joined += t;
    }
    return joined;
}

std::string process_caption(const CaptionOptions& o, const std::string& raw, int epoch, Rng& rng, CaptionStep at) {
    std::string caption = raw;
    if (!o.caption_prefix.empty()) caption = o.caption_prefix + " " + caption;
    if (!o.caption_suffix.empty()) caption = caption + " " + o.caption_suffix;
    bool drop = o.caption_dropout_rate > 0 && rng.uniform() < o.caption_dropout_rate;
    drop = drop || (o.caption_dropout_every_n_epochs > 0 && epoch % o.caption_dropout_every_n_epochs == 0);
    if (drop) return "";
    if (o.enable_wildcard) {
        if (caption.find('\n') != std::string::npos) {
            const std::vector<std::string> lines = split(caption, "\n");
            caption = lines[size_t(rng.below(lines.size()))];
        }
        caption = draw_wildcards(std::move(caption), rng);
    } else {
        caption = caption.substr(0, caption.find('\n'));
    }
    // kohya resolves a share of the run to steps at its first caption: one that rounds to 0 steps is off.
    const int64_t warmup = o.token_warmup_steps(at.max_train_steps);
    if (o.shuffle_caption || warmup > 0 || o.caption_tag_dropout_rate > 0) {
        std::vector<std::string> fixed, flex, fixed_suffix;
        const std::string& ks = o.keep_tokens_separator;
        if (!ks.empty() && caption.find(ks) != std::string::npos) {
            const size_t a = caption.find(ks);
            std::string flex_part = caption.substr(a + ks.size());
            const size_t b = flex_part.find(ks);
            if (b != std::string::npos) {
                fixed_suffix = stripped_nonempty(flex_part.substr(b + ks.size()), o.caption_separator);
                flex_part = flex_part.substr(0, b);
            }
            fixed = stripped_nonempty(caption.substr(0, a), o.caption_separator);
            flex = stripped_nonempty(flex_part, o.caption_separator);
        } else {
            for (const std::string& t : split(strip(caption), o.caption_separator)) flex.push_back(strip(t));
            if (o.keep_tokens > 0) {
                const size_t k = std::min(flex.size(), size_t(o.keep_tokens));
                fixed.assign(flex.begin(), flex.begin() + long(k));
                flex.erase(flex.begin(), flex.begin() + long(k));
            }
        }
        if (warmup > 0 && at.step < warmup) {
            // kohya's floor(step * (tags - min) / warm-up steps) + min, in floating point as there
            const double slope = double(int64_t(flex.size()) - o.token_warmup_min) / double(warmup);
            const int64_t n = int64_t(std::floor(double(at.step) * slope)) + o.token_warmup_min;
            flex.resize(size_t(std::clamp<int64_t>(n, 0, int64_t(flex.size()))));
        }
        if (o.shuffle_caption) rng.shuffle(flex);
        if (o.caption_tag_dropout_rate > 0) {
            std::vector<std::string> kept;
            for (std::string& t : flex)
                if (rng.uniform() >= o.caption_tag_dropout_rate) kept.push_back(std::move(t));
            flex.swap(kept);
        }
        caption.clear();
        bool first = true;
        for (const auto* part : {&fixed, &flex, &fixed_suffix})
            for (const std::string& t : *part) {
                caption += (first ? "" : ", ") + t;
                first = false;
            }
    }
    if (!o.secondary_separator.empty()) replace_all(caption, o.secondary_separator, o.caption_separator);
    return caption;
}

}  // namespace data
