#include "lora/block_args.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <numbers>
#include <optional>

#include "ggml-lite/core/error.h"

namespace lora {

namespace {

constexpr const char* kDims[] = {"block_dims", "block_alphas", "conv_block_dims", "conv_block_alphas"};
constexpr const char* kLrWeights[] = {"down_lr_weight", "mid_lr_weight", "up_lr_weight", "block_lr_zero_threshold"};
constexpr const char* kLoraPlus[] = {"loraplus_lr_ratio", "loraplus_unet_lr_ratio", "loraplus_text_encoder_lr_ratio"};

std::string strip(const std::string& s) {  // what int() and float() ignore around a number
    const char* ws = " \t\n\v\f\r";
    const size_t a = s.find_first_not_of(ws);
    return a == std::string::npos ? "" : s.substr(a, s.find_last_not_of(ws) - a + 1);
}

// Digits with single underscores between them (PEP 515), from i; returns the end, or npos.
size_t digit_part(const std::string& s, size_t i) {
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return std::string::npos;
    while (i < s.size()) {
        if (std::isdigit(static_cast<unsigned char>(s[i])))
            i++;
        else if (s[i] == '_' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))
            i++;
        else
            break;
    }
    return i;
}

std::string without_underscores(std::string s) {
    std::erase(s, '_');
    return s;
}

// Python's float() of the text: nullopt when it raises.
std::optional<double> py_float(const std::string& text) {
    const std::string s = strip(text);
    size_t i = s.empty() || (s[0] != '+' && s[0] != '-') ? 0 : 1;
    std::string word = s.substr(i);
    std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (word == "inf" || word == "infinity" || word == "nan") {
        const double v =
            word == "nan" ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
        return s[0] == '-' ? -v : v;
    }
    const size_t int_end = digit_part(s, i);
    size_t end = int_end == std::string::npos ? i : int_end;
    if (end < s.size() && s[end] == '.') {
        const size_t frac_end = digit_part(s, end + 1);
        if (frac_end != std::string::npos)
            end = frac_end;
        else if (int_end == std::string::npos)
            return std::nullopt;
        else
            end++;
    } else if (int_end == std::string::npos) {
        return std::nullopt;
    }
    if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
        size_t e = end + 1;
        if (e < s.size() && (s[e] == '+' || s[e] == '-')) e++;
        const size_t exp_end = digit_part(s, e);
        if (exp_end == std::string::npos) return std::nullopt;
        end = exp_end;
    }
    if (end != s.size()) return std::nullopt;
    return std::strtod(without_underscores(s).c_str(), nullptr);
}

// Python's int() of the text (base 10): nullopt when it raises or the value is beyond 2^62.
std::optional<int64_t> py_int(const std::string& text) {
    const std::string s = strip(text);
    const size_t i = s.empty() || (s[0] != '+' && s[0] != '-') ? 0 : 1;
    if (digit_part(s, i) != s.size()) return std::nullopt;
    const std::string digits = without_underscores(s.substr(i));
    const size_t first = std::min(digits.find_first_not_of('0'), digits.size());
    if (digits.size() - first > 18) return std::nullopt;
    const int64_t v = std::strtoll(digits.c_str(), nullptr, 10);
    return s[0] == '-' ? -v : v;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        const size_t at = s.find(sep, start);
        out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos) return out;
        start = at + 1;
    }
}

// A float the run computes in: finite, within float's range, >= lo.
double checked_float(const std::string& what, const std::string& text, double lo) {
    const std::optional<double> v = py_float(text);
    GL_CHECK(v.has_value(), "--network_args ", what, ": '", text, "' is not a number (kohya reads it with float())");
    GL_CHECK(std::isfinite(*v) && *v >= lo && std::fabs(*v) <= std::numeric_limits<float>::max() &&
                 (*v == 0 || std::fabs(*v) >= std::numeric_limits<float>::denorm_min()),
             "--network_args ", what, ": ", text, " must be a finite number >= ", lo, " that a 32-bit float holds");
    return *v;
}

// block_dims / conv_block_dims: one int() per block.
std::vector<int> dims_of(const std::string& key, const std::string& value, int blocks) {
    const std::vector<std::string> items = split(value, ',');
    GL_CHECK(int(items.size()) == blocks, "--network_args ", key, " must have ", blocks, " elements but ", items.size(),
             " elements are given (kohya's rule: one per block)");
    std::vector<int> out;
    for (size_t i = 0; i < items.size(); i++) {
        const std::optional<int64_t> v = py_int(items[i]);
        GL_CHECK(v.has_value(), "--network_args ", key, ": element ", i, " '", items[i],
                 "' is not an integer (kohya reads it with int())");
        GL_CHECK(*v >= 0 && *v < 1000000, "--network_args ", key, ": element ", i, " is ", *v,
                 "; a rank lies in [0, 10^6) (0: no module in that block)");
        out.push_back(int(*v));
    }
    return out;
}

std::vector<float> alphas_of(const std::string& key, const std::string& value, int blocks) {
    const std::vector<std::string> items = split(value, ',');
    GL_CHECK(int(items.size()) == blocks, "--network_args ", key, " must have ", blocks, " elements but ", items.size(),
             " elements are given (kohya's rule: one per block)");
    std::vector<float> out;
    for (size_t i = 0; i < items.size(); i++)
        out.push_back(float(checked_float(gl::cat(key, " element ", i), items[i], 0.0)));
    return out;
}

// get_block_lr_weight's get_list: a preset over n blocks, plus its offset. kohya's message for a
// name it does not know (an empty one too) raises itself (its format string wants two names).
std::vector<double> lr_preset(const std::string& key, const std::string& text, int n) {
    const std::vector<std::string> tokens = split(text, '+');
    const std::string& name = tokens[0];
    double base = 0.0;
    if (tokens.size() > 1) {
        const std::optional<double> b = py_float(tokens[1]);
        GL_CHECK(b.has_value(), "--network_args ", key, "=", text, ": the offset '", tokens[1], "' is not a number");
        base = *b;
    }
    GL_CHECK(name == "cosine" || name == "sine" || name == "linear" || name == "reverse_linear" || name == "zeros",
             "--network_args ", key, "=", text, ": unknown lr_weight preset '", name,
             "' (kohya's: cosine, sine, linear, reverse_linear, zeros, each with an optional +offset; or one number "
             "per block, separated by commas)");
    std::vector<double> w;
    for (int k = 0; k < n; k++) {
        const double i = double(k), last = double(n - 1), r = double(n - 1 - k);
        if (name == "cosine") w.push_back(std::sin(std::numbers::pi * (r / last) / 2) + base);
        if (name == "sine") w.push_back(std::sin(std::numbers::pi * (i / last) / 2) + base);
        if (name == "linear") w.push_back(i / last + base);
        if (name == "reverse_linear") w.push_back(r / last + base);
        if (name == "zeros") w.push_back(0.0 + base);
    }
    return w;
}

// A list of lr weights: "a,b,..." (an empty item is 0.0), or for down / up a preset when it has no comma.
std::vector<double> lr_list(const std::string& key, const std::string& text, int n, bool presets) {
    if (presets && text.find(',') == std::string::npos) return lr_preset(key, text, n);
    std::vector<double> w;
    const std::vector<std::string> items = split(text, ',');
    for (size_t i = 0; i < items.size(); i++) {
        if (items[i].empty()) {
            w.push_back(0.0);
            continue;
        }
        const std::optional<double> v = py_float(items[i]);
        GL_CHECK(v.has_value(), "--network_args ", key, ": element ", i, " '", items[i], "' is not a number");
        w.push_back(*v);
    }
    return w;
}

// get_block_lr_weight: the per-block weights (down, mid, up), cut or filled with 1 to their blocks'
// counts, then those not above the threshold set to 0.
std::vector<double> block_lr_weights(const std::map<std::string, std::string>& a, const models::LoraBlocks& b,
                                     std::vector<std::string>& notes) {
    const double threshold = a.count("block_lr_zero_threshold")
                                 ? checked_float("block_lr_zero_threshold", a.at("block_lr_zero_threshold"),
                                                 -std::numeric_limits<float>::max())
                                 : 0.0;
    std::vector<double> all;
    for (const auto& [key, n] :
         {std::pair{"down_lr_weight", b.down_up}, {"mid_lr_weight", b.mid}, {"up_lr_weight", b.down_up}}) {
        std::vector<double> w(size_t(n), 1.0);
        if (a.count(key)) {
            w = lr_list(key, a.at(key), n, key != std::string("mid_lr_weight"));
            if (int(w.size()) > n)
                notes.push_back(gl::cat("--network_args ", key, " holds ", w.size(), " weights for ", n,
                                        " blocks: the ones after the ", n, "th are ignored (as kohya)"));
            if (int(w.size()) < n)
                notes.push_back(gl::cat("--network_args ", key, " holds ", w.size(), " weights for ", n,
                                        " blocks: the rest are 1 (as kohya)"));
            w.resize(size_t(n), 1.0);
            for (double& x : w) x = x > threshold ? x : 0.0;  // NaN too, as kohya's comparison
        }
        all.insert(all.end(), w.begin(), w.end());
    }
    for (size_t i = 0; i < all.size(); i++)
        GL_CHECK(std::isfinite(all[i]) && all[i] >= 0.0 && all[i] <= std::numeric_limits<float>::max(),
                 "--network_args: block ", i, "'s lr weight is ", all[i],
                 "; a learning rate must be finite and >= 0 (torch refuses a negative one)");
    return all;
}

}  // namespace

bool is_block_arg(const std::string& key) {
    return std::any_of(std::begin(kDims), std::end(kDims), [&](const char* k) { return key == k; }) ||
           std::any_of(std::begin(kLrWeights), std::end(kLrWeights), [&](const char* k) { return key == k; }) ||
           std::any_of(std::begin(kLoraPlus), std::end(kLoraPlus), [&](const char* k) { return key == k; });
}

void read_block_args(LoraConfig& c, const std::vector<std::pair<std::string, std::string>>& args,
                     bool dim_from_weights) {
    std::map<std::string, std::string> a;  // a dict, as kohya's: the last value of a key
    for (const auto& [k, v] : args)
        if (is_block_arg(k)) a[k] = v;
    const auto given = [&](std::initializer_list<const char*> keys) {
        return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return a.count(k) != 0; });
    };

    // LoRA+: kohya's `part_ratio or loraplus_lr_ratio`.
    std::optional<double> all, unet, te;
    for (auto [key, r] : {std::pair{"loraplus_lr_ratio", &all},
                          {"loraplus_unet_lr_ratio", &unet},
                          {"loraplus_text_encoder_lr_ratio", &te}})
        if (a.count(key)) *r = checked_float(key, a.at(key), 0.0);
    const auto pick = [&](const std::optional<double>& part) { return part && *part != 0.0 ? part : all; };

    const models::LoraBlocks b = c.family->lora_blocks();
    const bool lr_weights = given({"down_lr_weight", "mid_lr_weight", "up_lr_weight"});
    const bool block_mode = a.count("block_dims") || lr_weights;
    GL_CHECK(!block_mode || b.size() > 0, "--network_args block_dims / *_lr_weight: the ", c.family->description(),
             " family has no kohya block list");

    if (dim_from_weights) {
        // create_network_from_weights reads the lr weights only.
        for (const char* k : {"block_dims", "block_alphas", "conv_block_dims", "conv_block_alphas", "loraplus_lr_ratio",
                              "loraplus_unet_lr_ratio", "loraplus_text_encoder_lr_ratio"})
            if (a.count(k))
                c.notes.push_back(gl::cat("--network_args ", k,
                                          ": no effect with --dim_from_weights (kohya "
                                          "builds the network from the file then)"));
        if (lr_weights) c.block_lr_weights = block_lr_weights(a, b, c.notes);
        return;
    }
    c.loraplus_unet = pick(unet);
    c.loraplus_text_encoder = pick(te);

    if (!block_mode) {
        for (const char* k : {"block_alphas", "conv_block_dims", "conv_block_alphas", "block_lr_zero_threshold"})
            if (a.count(k))
                c.notes.push_back(gl::cat("--network_args ", k,
                                          ": no effect without block_dims or "
                                          "down_lr_weight / mid_lr_weight / up_lr_weight (as kohya)"));
        return;
    }
    const int n = b.size();
    if (lr_weights)
        c.block_lr_weights = block_lr_weights(a, b, c.notes);
    else if (a.count("block_lr_zero_threshold"))
        c.notes.push_back(
            "--network_args block_lr_zero_threshold: no effect without down_lr_weight / mid_lr_weight / "
            "up_lr_weight (as kohya)");
    c.block_dims =
        a.count("block_dims") ? dims_of("block_dims", a.at("block_dims"), n) : std::vector<int>(size_t(n), c.rank);
    c.block_alphas = a.count("block_alphas") ? alphas_of("block_alphas", a.at("block_alphas"), n)
                                             : std::vector<float>(size_t(n), c.alpha);
    if (a.count("conv_block_dims")) {
        c.conv_block_dims = dims_of("conv_block_dims", a.at("conv_block_dims"), n);
        c.conv_block_alphas = a.count("conv_block_alphas")
                                  ? alphas_of("conv_block_alphas", a.at("conv_block_alphas"), n)
                                  : std::vector<float>(size_t(n), c.conv_dim > 0 ? c.conv_alpha : 1.0f);
    } else {
        if (a.count("conv_block_alphas"))
            c.notes.push_back("--network_args conv_block_alphas: no effect without conv_block_dims (as kohya)");
        if (c.conv_dim > 0) {
            c.conv_block_dims.assign(size_t(n), c.conv_dim);
            c.conv_block_alphas.assign(size_t(n), c.conv_alpha);
        }
    }
    // remove_block_dims_and_alphas: a block trained at lr 0 gets no module.
    for (size_t i = 0; i < c.block_lr_weights.size(); i++)
        if (c.block_lr_weights[i] == 0.0) {
            c.block_dims[i] = 0;
            if (!c.conv_block_dims.empty()) c.conv_block_dims[i] = 0;
        }
}

}  // namespace lora
