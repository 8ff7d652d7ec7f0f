// kohya's weighted captions: the attention parser, the weighted ids and the row weights.
#include "models/sd15/prompt_weights.h"

#include <charconv>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace sd {

namespace {

constexpr double kRound = 1.1;        // "(a)"
constexpr double kSquare = 1.0 / 1.1;  // "[a]"

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's float() of text matching [+-]?[.\d]+ (ASCII digits): digits with at most one point.
double python_float(std::string_view s, std::string_view caption) {
    std::string_view body = s;
    if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
    size_t digits = 0, points = 0;
    for (char c : body) (c == '.' ? points : digits)++;
    GL_CHECK(digits > 0 && points <= 1, "weighted caption \"", caption, "\": '", s,
             "' is not a number (kohya's float() refuses it too)");
    double v = 0;
    const char* first = body.data();
    const auto r = std::from_chars(first, first + body.size(), v);
    GL_CHECK(r.ec == std::errc() && r.ptr == first + body.size() && std::isfinite(v), "weighted caption \"", caption,
             "\": the weight '", s, "' is out of range");
    return !s.empty() && s[0] == '-' ? -v : v;
}

}  // namespace

std::vector<WeightedPiece> parse_prompt_attention(std::string_view text) {
    std::vector<WeightedPiece> res;
    std::vector<size_t> round, square;
    const auto multiply = [&res](size_t from, double m) {
        for (size_t p = from; p < res.size(); p++) res[p].weight *= m;
    };
    const auto append = [&res](std::string_view t) { res.push_back({std::string(t), 1.0}); };
    // kohya's regex, alternative by alternative, at each position (every character matches one).
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
        const char c = text[i];
        if (c == '\\') {  // \( \) \[ \] \\ are the character; a lone \ is dropped
            const bool escape = i + 1 < n && std::string_view("()[]\\").find(text[i + 1]) != std::string_view::npos;
            append(escape ? text.substr(i + 1, 1) : std::string_view());
            i += escape ? 2 : 1;
        } else if (c == '(') {
            round.push_back(res.size());
            i++;
        } else if (c == '[') {
            square.push_back(res.size());
            i++;
        } else if (c == ':') {  // ":<[+-]?[.\d]+>)" takes a weight; a ':' alone is text
            size_t j = i + 1;
            if (j < n && (text[j] == '+' || text[j] == '-')) j++;
            size_t k = j;
            while (k < n && (is_digit(text[k]) || text[k] == '.')) k++;
            if (k > j && k < n && text[k] == ')') {
                if (!round.empty()) {
                    const size_t from = round.back();
                    round.pop_back();
                    multiply(from, python_float(text.substr(i + 1, k - i - 1), text));
                } else {
                    append(text.substr(i, k + 1 - i));
                }
                i = k + 1;
            } else {
                append(":");
                i++;
            }
        } else if (c == ')' || c == ']') {
            std::vector<size_t>& open = c == ')' ? round : square;
            if (!open.empty()) {
                const size_t from = open.back();
                open.pop_back();
                multiply(from, c == ')' ? kRound : kSquare);
            } else {
                append(text.substr(i, 1));
            }
            i++;
        } else {
            size_t k = i;
            while (k < n && std::string_view("\\()[]:").find(text[k]) == std::string_view::npos) k++;
            append(text.substr(i, k - i));
            i = k;
        }
    }
    for (size_t p : round) multiply(p, kRound);
    for (size_t p : square) multiply(p, kSquare);
    if (res.empty()) res.push_back({"", 1.0});
    for (size_t p = 0; p + 1 < res.size();) {  // runs of equal weights merge
        if (res[p].weight == res[p + 1].weight) {
            res[p].text += res[p + 1].text;
            res.erase(res.begin() + std::ptrdiff_t(p + 1));
        } else {
            p++;
        }
    }
    return res;
}

WeightedIds encode_weighted(const ClipTokenizer& tok, std::string_view text, int max_tokens) {
    GL_CHECK(max_tokens == 75 || max_tokens == 150 || max_tokens == 225,
             "weighted captions: max_tokens must be 75, 150 or 225 (kohya's max_token_length), got ", max_tokens);
    std::vector<int32_t> content;
    std::vector<double> w;
    for (const WeightedPiece& p : parse_prompt_attention(text)) {
        const std::vector<int32_t> ids = tok.tokenize(p.text);
        content.insert(content.end(), ids.begin(), ids.end());
        w.insert(w.end(), ids.size(), p.weight);
        if (content.size() > size_t(max_tokens)) break;  // kohya stops reading there
    }
    WeightedIds out;
    out.truncated = content.size() > size_t(max_tokens);
    if (out.truncated) {
        content.resize(size_t(max_tokens));
        w.resize(size_t(max_tokens));
    }
    out.weights.assign(size_t(max_tokens) + 2, 1.0f);
    for (size_t k = 0; k < w.size(); k++) out.weights[1 + k] = float(w[k]);
    out.ids = tok.encode_content(std::move(content), max_tokens);
    return out;
}

void apply_token_weights(std::span<float> context, std::span<const float> weights, int64_t batch, int64_t rows,
                         int64_t width) {
    GL_CHECK(batch >= 0 && rows >= 0 && width >= 0 && int64_t(weights.size()) == batch * rows &&
                 int64_t(context.size()) == batch * rows * width,
             "weighted captions: ", weights.size(), " token weights and ", context.size(),
             " context values for a batch of ", batch, " x ", rows, " rows x ", width);
    for (int64_t r = 0; r < batch * rows; r++) {
        const float m = weights[size_t(r)];
        for (float& v : context.subspan(size_t(r * width), size_t(width))) v *= m;
    }
}

}  // namespace sd
