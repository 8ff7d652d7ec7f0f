// CLIP BPE tokenizer: vocabulary loading (embedded or a tokenizer/ folder), BPE, 77-token and
// kohya long-prompt encodings. Text normalisation and pre-tokenising live in tokenizer_text.cpp.
#include "models/sd15/tokenizer.h"

#include <array>
#include <filesystem>
#include <mutex>
#include <queue>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "models/sd15/tokenizer_text.h"

// models/sd15/data/clip_merges.txt, compiled in by cmake/GlEmbed.cmake.
extern const unsigned char gl_embed_clip_merges[];
extern const std::size_t gl_embed_clip_merges_size;

namespace sd {
namespace {

const std::u32string kBosText = U"<|startoftext|>";
const std::u32string kEosText = U"<|endoftext|>";
constexpr int32_t kMaxVocab = 1 << 24;  // bounds the id -> token table a vocab.json can ask for
constexpr size_t kCacheLimit = 1 << 16;

// GPT-2's byte -> character map: printable Latin-1 bytes stand for themselves, the others (space,
// controls, ...) move to U+0100 and up, so every byte is a visible character of the vocabulary.
std::array<char32_t, 256> byte_chars() {
    std::array<char32_t, 256> m{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        m[size_t(b)] = printable ? char32_t(b) : next++;
    }
    return m;
}

// The order of CLIP's base vocabulary: the printable bytes, then the moved ones.
std::vector<int> byte_order() {
    std::vector<int> order;
    for (int pass = 0; pass < 2; ++pass)
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            if (printable == (pass == 0)) order.push_back(b);
        }
    return order;
}

// merges.txt: one "left right" pair a line, by rank; a "#version" line and empty lines skipped.
std::vector<std::pair<std::string, std::string>> parse_merges(std::string_view text, const std::string& origin) {
    std::vector<std::pair<std::string, std::string>> merges;
    size_t pos = 0, line_no = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty() || line.starts_with("#version")) continue;
        size_t sp = line.find(' ');
        if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
            line.find(' ', sp + 1) != std::string_view::npos)
            gl::fail("tokenizer: ", origin, " line ", line_no, ": expected two tokens separated by one space");
        merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
    }
    return merges;
}

// vocab.json: one JSON object of token -> id. Strict JSON, nothing else accepted.
class VocabJson {
public:
    VocabJson(std::string_view text, std::string origin) : s_(text), origin_(std::move(origin)) {}

    std::vector<std::pair<std::string, int64_t>> parse() {
        std::vector<std::pair<std::string, int64_t>> out;
        skip_ws();
        expect('{');
        skip_ws();
        if (peek() == '}') {
            ++i_;
        } else {
            for (;;) {
                skip_ws();
                std::string key = string();
                skip_ws();
                expect(':');
                skip_ws();
                out.emplace_back(std::move(key), integer());
                skip_ws();
                if (peek() == ',') {
                    ++i_;
                    continue;
                }
                expect('}');
                break;
            }
        }
        skip_ws();
        if (i_ != s_.size()) fail("unexpected data after the object");
        return out;
    }

private:
    [[noreturn]] void fail(const char* what) { gl::fail("tokenizer: ", origin_, " at byte ", i_, ": ", what); }
    char peek() { return i_ < s_.size() ? s_[i_] : '\0'; }
    void expect(char c) {
        if (peek() != c) fail(c == '{' ? "expected '{'" : c == ':' ? "expected ':'" : "expected ',' or '}'");
        ++i_;
    }
    void skip_ws() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
    }
    uint32_t hex4() {
        if (i_ + 4 > s_.size()) fail("truncated \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            char c = s_[i_++];
            int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
            if (d < 0) fail("bad \\u escape");
            v = v * 16 + uint32_t(d);
        }
        return v;
    }
    std::string string() {
        if (peek() != '"') fail("expected a string");
        ++i_;
        std::string out;
        for (;;) {
            if (i_ >= s_.size()) fail("unterminated string");
            unsigned char c = static_cast<unsigned char>(s_[i_++]);
            if (c == '"') return out;
            if (c < 0x20) fail("control character in a string");
            if (c != '\\') {
                out.push_back(char(c));
                continue;
            }
            char e = peek();
            ++i_;
            switch (e) {
                case '"': out.push_back('"'); break;
                case '\\': out.push_back('\\'); break;
                case '/': out.push_back('/'); break;
                case 'b': out.push_back('\b'); break;
                case 'f': out.push_back('\f'); break;
                case 'n': out.push_back('\n'); break;
                case 'r': out.push_back('\r'); break;
                case 't': out.push_back('\t'); break;
                case 'u': {
                    uint32_t v = hex4();
                    if (v >= 0xD800 && v <= 0xDBFF) {  // a surrogate pair encodes one code point
                        if (peek() != '\\' || i_ + 1 >= s_.size() || s_[i_ + 1] != 'u') fail("lone surrogate");
                        i_ += 2;
                        uint32_t lo = hex4();
                        if (lo < 0xDC00 || lo > 0xDFFF) fail("bad surrogate pair");
                        v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    } else if (v >= 0xDC00 && v <= 0xDFFF) {
                        fail("lone surrogate");
                    }
                    cliptext::append_utf8(out, v);
                    break;
                }
                default: fail("bad escape");
            }
        }
    }
    int64_t integer() {
        size_t start = i_;
        int64_t v = 0;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
            v = v * 10 + (s_[i_++] - '0');
            if (v >= kMaxVocab) fail("token id too large");
        }
        if (i_ == start) fail("expected a non-negative integer id");
        return v;
    }

    std::string_view s_;
    std::string origin_;
    size_t i_ = 0;
};

struct Merge {
    int32_t rank, id;
};

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

struct ClipTokenizer::Impl {
    std::vector<std::string> tokens;  // id -> token ("" for ids no token has)
    std::unordered_map<std::string, int32_t> ids;
    std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> rank, merged id
    std::array<int32_t, 256> byte_id{}, byte_end_id{};  // a byte's symbol, inside / at the end of a word
    int32_t bos = 0, eos = 0, unk = 0;
    int32_t pad = -1;  // -1: EOS

    mutable std::mutex cache_mu;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

    void add_token(std::string tok, int64_t id, const std::string& origin) {
        if (size_t(id) >= tokens.size()) tokens.resize(size_t(id) + 1);
        if (!tokens[size_t(id)].empty() && tokens[size_t(id)] != tok)
            gl::fail("tokenizer: ", origin, ": id ", id, " given to both '", tokens[size_t(id)], "' and '", tok, "'");
        if (tok.empty()) gl::fail("tokenizer: ", origin, ": empty token for id ", id);
        tokens[size_t(id)] = tok;
        ids[std::move(tok)] = int32_t(id);
    }

    int32_t id_of(const std::string& tok, const std::string& origin) const {
        auto it = ids.find(tok);
        if (it == ids.end()) gl::fail("tokenizer: ", origin, ": token '", tok, "' is not in the vocabulary");
        return it->second;
    }

    // Merge ranks by line order (a later duplicate of a pair wins, as in tokenizers), the byte
    // symbols and the special tokens.
    void finish(const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& origin) {
        for (size_t r = 0; r < pairs.size(); ++r) {
            const auto& [a, b] = pairs[r];
            int32_t ia = id_of(a, origin), ib = id_of(b, origin), im = id_of(a + b, origin);
            merges[pair_key(ia, ib)] = Merge{int32_t(r), im};
        }
        bos = id_of(cliptext::encode_utf8(kBosText), origin);
        eos = id_of(cliptext::encode_utf8(kEosText), origin);
        unk = eos;  // CLIP's unknown token is <|endoftext|>
        const std::array<char32_t, 256> chars = byte_chars();
        for (int b = 0; b < 256; ++b) {
            std::string s;
            cliptext::append_utf8(s, chars[size_t(b)]);
            auto it = ids.find(s);
            byte_id[size_t(b)] = it == ids.end() ? unk : it->second;
            it = ids.find(s + "</w>");
            byte_end_id[size_t(b)] = it == ids.end() ? unk : it->second;
        }
    }

    // BPE of one pre-token: the lowest-ranked adjacent pair is merged first, equal ranks left to
    // right; a heap keeps long words O(n log n). Stale heap entries are skipped when popped.
    void bpe(const std::string& piece, std::vector<int32_t>& out) const {
        const size_t n = piece.size();
        if (n == 0) return;
        std::vector<int32_t> sym(n), next(n), prev(n);
        for (size_t k = 0; k < n; ++k) {
            auto b = static_cast<unsigned char>(piece[k]);
            sym[k] = k + 1 == n ? byte_end_id[b] : byte_id[b];
            next[k] = k + 1 == n ? -1 : int32_t(k + 1);
            prev[k] = int32_t(k) - 1;
        }
        struct Cand {
            int32_t rank, pos, left, right, id;
            bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
        };
        std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
        auto push = [&](int32_t pos) {
            if (pos < 0 || next[size_t(pos)] < 0) return;
            int32_t l = sym[size_t(pos)], r = sym[size_t(next[size_t(pos)])];
            auto it = merges.find(pair_key(l, r));
            if (it != merges.end()) heap.push(Cand{it->second.rank, pos, l, r, it->second.id});
        };
        for (size_t k = 0; k + 1 < n; ++k) push(int32_t(k));
        std::vector<bool> dead(n, false);
        while (!heap.empty()) {
            Cand c = heap.top();
            heap.pop();
            size_t p = size_t(c.pos);
            if (dead[p] || next[p] < 0 || sym[p] != c.left || sym[size_t(next[p])] != c.right) continue;
            size_t r = size_t(next[p]);
            sym[p] = c.id;
            dead[r] = true;
            next[p] = next[r];
            if (next[r] >= 0) prev[size_t(next[r])] = int32_t(p);
            push(prev[p]);
            push(int32_t(p));
        }
        for (int32_t k = 0; k >= 0; k = next[size_t(k)]) out.push_back(sym[size_t(k)]);
    }

    void bpe_cached(const std::string& piece, std::vector<int32_t>& out) const {
        {
            std::lock_guard<std::mutex> lock(cache_mu);
            auto it = cache.find(piece);
            if (it != cache.end()) {
                out.insert(out.end(), it->second.begin(), it->second.end());
                return;
            }
        }
        std::vector<int32_t> ids_of_piece;
        bpe(piece, ids_of_piece);
        out.insert(out.end(), ids_of_piece.begin(), ids_of_piece.end());
        std::lock_guard<std::mutex> lock(cache_mu);
        if (cache.size() >= kCacheLimit) cache.clear();  // bounded: captions are unbounded input
        cache.emplace(piece, std::move(ids_of_piece));
    }

    void tokenize_plain(std::u32string_view text, std::vector<int32_t>& out) const {
        if (text.empty()) return;
        std::vector<std::string> pieces;
        cliptext::pre_tokenize(cliptext::normalize(text), pieces);
        for (const std::string& p : pieces) bpe_cached(p, out);
    }
};

ClipTokenizer::ClipTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

namespace {

// CLIP's vocabulary is implied by its merges: the byte characters, the same with "</w>", one
// token per merge (in rank order), then <|startoftext|> and <|endoftext|>.
std::unique_ptr<ClipTokenizer::Impl> builtin_impl() {
    const std::string origin = "built-in CLIP vocabulary";
    std::string_view text(reinterpret_cast<const char*>(gl_embed_clip_merges), gl_embed_clip_merges_size);
    auto pairs = parse_merges(text, origin);
    auto impl = std::make_unique<ClipTokenizer::Impl>();
    const std::array<char32_t, 256> chars = byte_chars();
    const std::vector<int> order = byte_order();
    int64_t id = 0;
    for (int suffix = 0; suffix < 2; ++suffix)
        for (int b : order) {
            std::string s;
            cliptext::append_utf8(s, chars[size_t(b)]);
            impl->add_token(suffix ? s + "</w>" : s, id++, origin);
        }
    for (const auto& [a, b] : pairs) impl->add_token(a + b, id++, origin);
    impl->add_token(cliptext::encode_utf8(kBosText), id++, origin);
    impl->add_token(cliptext::encode_utf8(kEosText), id++, origin);
    GL_CHECK(impl->ids.size() == size_t(id), "tokenizer: ", origin, " has duplicate tokens");
    impl->finish(pairs, origin);
    return impl;
}

}  // namespace

const ClipTokenizer& ClipTokenizer::builtin() {
    static const ClipTokenizer tok(builtin_impl());
    return tok;
}

const ClipTokenizer& ClipTokenizer::builtin_sd2() {
    static const ClipTokenizer tok = [] {
        std::unique_ptr<Impl> impl = builtin_impl();
        impl->pad = impl->ids.at("!");
        return ClipTokenizer(std::move(impl));
    }();
    return tok;
}

ClipTokenizer ClipTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
    auto impl = std::make_unique<Impl>();
    for (auto& [tok, id] : VocabJson(gl::io::read_small_file(vocab_json), vocab_json).parse())
        impl->add_token(std::move(tok), id, vocab_json);
    impl->finish(parse_merges(gl::io::read_small_file(merges_txt), merges_txt), merges_txt);
    return ClipTokenizer(std::move(impl));
}

ClipTokenizer ClipTokenizer::from_folder(const std::string& dir) {
    ClipTokenizer tok = from_files(dir + "/vocab.json", dir + "/merges.txt");
    const std::string map = dir + "/special_tokens_map.json";
    std::error_code ec;
    if (!std::filesystem::exists(map, ec)) return tok;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(gl::io::read_small_file(map));
    } catch (const nlohmann::json::exception& e) {
        gl::fail(map, ": not valid JSON (", e.what(), ")");
    }
    if (!j.is_object() || !j.contains("pad_token")) return tok;
    // transformers writes a token as its text or as {"content": text, ...}.
    const nlohmann::json& p = j.at("pad_token");
    const nlohmann::json& text = p.is_object() && p.contains("content") ? p.at("content") : p;
    GL_CHECK(text.is_string(), map, ": pad_token is not a token string");
    const auto it = tok.impl_->ids.find(text.get<std::string>());
    GL_CHECK(it != tok.impl_->ids.end(), map, ": pad_token \"", text.get<std::string>(), "\" is not in the vocabulary");
    tok.impl_->pad = it->second;
    return tok;
}

std::vector<int32_t> ClipTokenizer::tokenize(std::string_view text) const {
    // Special tokens written in the text are split out before normalisation (so "<|ENDOFTEXT|>"
    // is ordinary text); the pieces between them are tokenised separately.
    const std::u32string all = cliptext::decode_utf8(text);
    std::u32string_view rest(all);
    std::vector<int32_t> out;
    for (;;) {
        size_t b = rest.find(kBosText), e = rest.find(kEosText);
        size_t at = std::min(b, e);
        impl_->tokenize_plain(rest.substr(0, at), out);
        if (at == std::u32string_view::npos) break;
        out.push_back(at == b ? impl_->bos : impl_->eos);
        rest.remove_prefix(at + (at == b ? kBosText.size() : kEosText.size()));
    }
    return out;
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view text) const { return encode_chunks(text, kChunk); }

std::vector<int32_t> ClipTokenizer::encode_chunks(std::string_view text, int max_tokens) const {
    return encode_content(tokenize(text), max_tokens);
}

std::vector<int32_t> ClipTokenizer::encode_content(std::vector<int32_t> ids, int max_tokens) const {
    GL_CHECK(max_tokens == 75 || max_tokens == 150 || max_tokens == 225,
             "tokenizer: max_tokens must be 75, 150 or 225 (kohya's max_token_length), got ", max_tokens);
    if (ids.size() > size_t(max_tokens)) ids.resize(size_t(max_tokens));
    if (pad() != eos()) return encode_padded(ids, max_tokens);
    ids.resize(size_t(max_tokens), impl_->eos);  // padding (the content's own EOS is the first pad)
    // Each chunk: BOS, its 75 ids, and the last id of the whole padded sequence, which is EOS.
    std::vector<int32_t> out;
    out.reserve(size_t(max_tokens / kChunk) * kContext);
    for (int c = 0; c < max_tokens / kChunk; ++c) {
        out.push_back(impl_->bos);
        out.insert(out.end(), ids.begin() + c * kChunk, ids.begin() + (c + 1) * kChunk);
        out.push_back(impl_->eos);
    }
    return out;
}

std::vector<int32_t> ClipTokenizer::encode_padded(const std::vector<int32_t>& content, int max_tokens) const {
    // transformers' padded sequence of max_tokens + 2 ids: BOS, content, EOS, padding.
    std::vector<int32_t> seq{impl_->bos};
    seq.insert(seq.end(), content.begin(), content.end());
    seq.push_back(impl_->eos);
    seq.resize(size_t(max_tokens) + 2, pad());
    if (max_tokens == kChunk) return seq;
    std::vector<int32_t> out;
    out.reserve(size_t(max_tokens / kChunk) * kContext);
    for (int c = 0; c < max_tokens / kChunk; ++c) {
        const size_t at = out.size();
        out.push_back(impl_->bos);
        out.insert(out.end(), seq.begin() + 1 + c * kChunk, seq.begin() + 1 + (c + 1) * kChunk);
        out.push_back(seq.back());
        if (out[at + kChunk] != impl_->eos && out[at + kChunk] != pad()) out[at + kChunk + 1] = impl_->eos;
        if (out[at + 1] == pad()) out[at + 1] = impl_->eos;
    }
    return out;
}

int32_t ClipTokenizer::bos() const { return impl_->bos; }
int32_t ClipTokenizer::eos() const { return impl_->eos; }
int32_t ClipTokenizer::pad() const { return impl_->pad >= 0 ? impl_->pad : impl_->eos; }
int32_t ClipTokenizer::vocab_size() const { return int32_t(impl_->tokens.size()); }

const std::string& ClipTokenizer::token(int32_t id) const {
    GL_CHECK(id >= 0 && size_t(id) < impl_->tokens.size(), "tokenizer: id ", id, " outside the vocabulary of ",
             impl_->tokens.size());
    return impl_->tokens[size_t(id)];
}

}  // namespace sd
