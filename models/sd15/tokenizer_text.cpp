// UTF-8, NFC, white space, lower-case and pre-tokenising for the CLIP tokenizer (see tokenizer_text.h).
#include "models/sd15/tokenizer_text.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "ggml-lite/core/error.h"

namespace sd::cliptext {
namespace {

struct CharRange {
    char32_t first, last;
    unsigned char value;
};
struct LowerRun {
    char32_t first;
    uint16_t count;
    int32_t delta;
    uint8_t stride;
};
struct LowerMulti {
    char32_t c, first, second;
};
struct Decomposition {
    char32_t c, first, second;
    bool recomposes;
};

#include "data/clip_unicode.inc"

// Hangul syllables (de)compose algorithmically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool is_hangul(char32_t c) { return c >= kSBase && c < kSBase + kSCount; }

template <size_t N>
int range_value(const CharRange (&table)[N], char32_t c) {
    const CharRange* end = table + N;
    const CharRange* it = std::upper_bound(table, end, c, [](char32_t v, const CharRange& r) { return v < r.first; });
    if (it == table) return 0;
    --it;
    return c <= it->last ? it->value : 0;
}

const Decomposition* find_decomposition(char32_t c) {
    const Decomposition* end = kDecompositions + std::size(kDecompositions);
    const Decomposition* it =
        std::lower_bound(kDecompositions, end, c, [](const Decomposition& d, char32_t v) { return d.c < v; });
    return it != end && it->c == c ? it : nullptr;
}

const std::unordered_map<uint64_t, char32_t>& compositions() {
    static const std::unordered_map<uint64_t, char32_t> map = [] {
        std::unordered_map<uint64_t, char32_t> m;
        for (const Decomposition& d : kDecompositions)
            if (d.recomposes) m.emplace((uint64_t(d.first) << 32) | d.second, d.c);
        return m;
    }();
    return map;
}

void decompose(char32_t c, std::u32string& out) {
    if (c < 0xC0) {
        out.push_back(c);
    } else if (is_hangul(c)) {
        int s = int(c - kSBase);
        out.push_back(kLBase + s / kNCount);
        out.push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount) out.push_back(kTBase + s % kTCount);
    } else if (const Decomposition* d = find_decomposition(c)) {
        decompose(d->first, out);
        if (d->second) decompose(d->second, out);
    } else {
        out.push_back(c);
    }
}

// The primary composite of a starter and a following character, or 0.
char32_t compose_pair(char32_t a, char32_t b) {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
        return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    if (is_hangul(a) && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) return a + (b - kTBase);
    const auto& m = compositions();
    auto it = m.find((uint64_t(a) << 32) | b);
    return it == m.end() ? 0 : it->second;
}

char32_t lower_simple(char32_t c, char32_t* second) {
    *second = 0;
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    for (const LowerMulti& m : kLowerMulti)
        if (m.c == c) {
            *second = m.second;
            return m.first;
        }
    const LowerRun* end = kLowerRuns + std::size(kLowerRuns);
    const LowerRun* it =
        std::upper_bound(kLowerRuns, end, c, [](char32_t v, const LowerRun& r) { return v < r.first; });
    if (it == kLowerRuns) return c;
    --it;
    char32_t off = c - it->first;
    if (off % it->stride == 0 && off / it->stride < it->count) return char32_t(int64_t(c) + it->delta);
    return c;
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0;
    auto bad = [&](size_t at) { gl::fail("tokenizer: invalid UTF-8 at byte ", at, " of the text"); };
    while (i < s.size()) {
        unsigned char b = static_cast<unsigned char>(s[i]);
        if (b < 0x80) {
            out.push_back(b);
            ++i;
            continue;
        }
        // Lead byte: sequence length, payload bits, smallest value that length may encode.
        int n = 0;
        char32_t c = 0, min = 0;
        if (b >= 0xC2 && b <= 0xDF) n = 1, c = b & 0x1F, min = 0x80;
        else if (b >= 0xE0 && b <= 0xEF) n = 2, c = b & 0x0F, min = 0x800;
        else if (b >= 0xF0 && b <= 0xF4) n = 3, c = b & 0x07, min = 0x10000;
        else bad(i);
        for (int k = 1; k <= n; ++k) {
            if (i + k >= s.size()) bad(i);
            unsigned char cb = static_cast<unsigned char>(s[i + k]);
            if ((cb & 0xC0) != 0x80) bad(i);
            c = (c << 6) | (cb & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) bad(i);
        out.push_back(c);
        i += size_t(n) + 1;
    }
    return out;
}

void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out.push_back(char(c));
    } else if (c < 0x800) {
        out.push_back(char(0xC0 | (c >> 6)));
        out.push_back(char(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(char(0xE0 | (c >> 12)));
        out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(char(0x80 | (c & 0x3F)));
    } else {
        out.push_back(char(0xF0 | (c >> 18)));
        out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(char(0x80 | (c & 0x3F)));
    }
}

std::string encode_utf8(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) append_utf8(out, c);
    return out;
}

CharClass char_class(char32_t c) {
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::letter;
        if (c >= '0' && c <= '9') return CharClass::number;
        if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::space;
        return CharClass::other;
    }
    return static_cast<CharClass>(range_value(kCharClass, c));
}

int combining_class(char32_t c) { return c < 0x300 ? 0 : range_value(kCombining, c); }

std::u32string nfc(std::u32string_view s) {
    // Nothing below U+0300 changes under NFC or composes with what follows (checked when the
    // tables are generated), so plain Latin text skips the work.
    if (std::all_of(s.begin(), s.end(), [](char32_t c) { return c < 0x300; })) return std::u32string(s);

    std::u32string d;
    d.reserve(s.size() + 8);
    for (char32_t c : s) decompose(c, d);
    // Canonical ordering: each run of non-starters sorted (stably) by combining class.
    for (size_t i = 0; i < d.size();) {
        if (combining_class(d[i]) == 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < d.size() && combining_class(d[j]) != 0) ++j;
        std::stable_sort(d.begin() + i, d.begin() + j,
                         [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
        i = j;
    }
    // Canonical composition: a character joins the last starter unless something between them
    // blocks it (a starter, or a mark of the same or a higher class).
    std::u32string out;
    out.reserve(d.size());
    long starter = -1;
    int last_cc = 0;
    for (char32_t c : d) {
        int cc = combining_class(c);
        if (starter >= 0 && (long(out.size()) - 1 == starter || (last_cc != 0 && last_cc < cc))) {
            if (char32_t p = compose_pair(out[size_t(starter)], c)) {
                out[size_t(starter)] = p;
                continue;
            }
        }
        if (cc == 0) starter = long(out.size());
        last_cc = cc;
        out.push_back(c);
    }
    return out;
}

std::u32string normalize(std::u32string_view s) {
    std::u32string composed = nfc(s);
    std::u32string out;
    out.reserve(composed.size());
    bool in_space = false;
    for (char32_t c : composed) {
        if (char_class(c) == CharClass::space) {
            if (!in_space) out.push_back(U' ');
            in_space = true;
            continue;
        }
        in_space = false;
        char32_t second;
        out.push_back(lower_simple(c, &second));
        if (second) out.push_back(second);
    }
    return out;
}

void pre_tokenize(std::u32string_view s, std::vector<std::string>& pieces) {
    const size_t n = s.size();
    size_t i = 0;
    auto emit = [&](size_t from, size_t to) { pieces.push_back(encode_utf8(s.substr(from, to - from))); };
    while (i < n) {
        char32_t c = s[i];
        CharClass cls = char_class(c);
        if (cls == CharClass::space) {
            ++i;
            continue;
        }
        // The contractions come first in the pattern; they are only tried where a match starts
        // (a run of other characters swallows a quote that follows it).
        if (c == U'\'' && i + 1 < n) {
            char32_t a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
            size_t len = 0;
            if (a == U's' || a == U't' || a == U'm' || a == U'd') len = 2;
            else if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) len = 3;
            if (len) {
                emit(i, i + len);
                i += len;
                continue;
            }
        }
        size_t j = i + 1;
        if (cls != CharClass::number)  // numbers are single; letters and others form runs
            while (j < n && char_class(s[j]) == cls) ++j;
        emit(i, j);
        i = j;
    }
}

}  // namespace sd::cliptext
