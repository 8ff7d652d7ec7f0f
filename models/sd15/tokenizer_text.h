// Text handling of the CLIP tokenizer (internal to tokenizer.cpp and its tests): UTF-8, the
// normaliser (NFC, white space, lower-case) and the pre-tokeniser of transformers' CLIPTokenizer.
// The Unicode tables are measured on HF tokenizers by tests/golden/make_tokenizer_tables.py.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace sd::cliptext {

enum class CharClass : unsigned char { other = 0, letter = 1, number = 2, space = 3 };

// Code points of UTF-8 text; throws gl::Error naming the byte offset on malformed input
// (bad lead or continuation bytes, overlong forms, surrogates, values past U+10FFFF).
std::u32string decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(std::u32string_view s);

CharClass char_class(char32_t c);
int combining_class(char32_t c);
// Canonical composition (NFC) of the code points.
std::u32string nfc(std::u32string_view s);
// NFC, each run of white space -> one ' ', lower-case: the tokenizer's normaliser.
std::u32string normalize(std::u32string_view s);
// The pieces of normalised text under CLIP's pattern, as UTF-8 (spaces dropped).
void pre_tokenize(std::u32string_view s, std::vector<std::string>& pieces);

}  // namespace sd::cliptext
