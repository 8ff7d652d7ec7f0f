// The CLIP BPE tokenizer of SD1.5, giving the ids transformers' CLIPTokenizer gives.
//
// Text -> ids, as transformers (>= 5; CLIPTokenizerFast before) does it:
//   1. the special tokens "<|startoftext|>" / "<|endoftext|>" written literally in the text are
//      split out first and map to their ids;
//   2. each remaining piece is normalised: Unicode NFC, every run of white space becomes one
//      space, lower-case (character by character);
//   3. pre-tokenised with CLIP's pattern  's|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+
//      (spaces dropped);
//   4. each piece's UTF-8 bytes become byte-level symbols (GPT-2's byte -> character map; the last
//      one carries "</w>") and are merged by BPE rank.
// encode() wraps the ids as BOS + at most 75 + EOS and pads to 77 with the pad token: EOS for
// SD1.x, "!" (id 0) for SD2.x (its tokenizer's special_tokens_map.json says so).
//
// The vocabulary is CLIP's (49408 tokens, BOS 49406, EOS 49407), compiled into the binary from
// models/sd15/data/clip_merges.txt; a diffusers tokenizer/ folder (vocab.json + merges.txt) can be
// loaded instead. Not reproduced: the older slow CLIPTokenizer's ftfy / BasicTokenizer clean-up
// (HTML entities, curly quotes, CJK spacing), which only that class applied.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sd {

class ClipTokenizer {
public:
    static constexpr int kContext = 77;    // ids per sequence, BOS and EOS included
    static constexpr int kChunk = 75;      // content tokens per sequence

    // The built-in CLIP vocabulary; built once (a few ms), shared, thread-safe.
    static const ClipTokenizer& builtin();
    // The same vocabulary with SD2.x's pad token "!" (id 0).
    static const ClipTokenizer& builtin_sd2();
    // A diffusers tokenizer/ folder: <dir>/vocab.json and <dir>/merges.txt, and the pad token of
    // <dir>/special_tokens_map.json when it is there (EOS otherwise).
    static ClipTokenizer from_folder(const std::string& dir);
    static ClipTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);

    ClipTokenizer(ClipTokenizer&&) noexcept;
    ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
    ~ClipTokenizer();

    // Content ids of UTF-8 text: no BOS / EOS, no truncation. Throws gl::Error on invalid UTF-8.
    std::vector<int32_t> tokenize(std::string_view text) const;
    // 77 ids: BOS, the first 75 content ids, EOS, then padding.
    std::vector<int32_t> encode(std::string_view text) const;
    // kohya sd-scripts' long prompts (--max_token_length 150 / 225): the text is cut to
    // `max_tokens` content ids and split into max_tokens / 75 chunks of 77, row after row
    // ([max_tokens / 75, 77] as a flat vector; 75 gives encode()). EOS padding (SD1.x): each chunk
    // BOS + 75 + EOS. Another pad (SD2.x), as kohya's get_input_ids: BOS + 75 ids of the padded
    // sequence + its last id, that last made EOS after a content id, a chunk that starts with
    // padding made BOS, EOS, padding.
    std::vector<int32_t> encode_chunks(std::string_view text, int max_tokens) const;
    // The same from content ids already tokenised (cut to max_tokens here): kohya's weighted
    // captions tokenise each weighted piece alone (models/sd15/prompt_weights.h).
    std::vector<int32_t> encode_content(std::vector<int32_t> ids, int max_tokens) const;

    int32_t bos() const;
    int32_t eos() const;
    int32_t pad() const;  // SD1.x pads with EOS, SD2.x with "!" (0)
    // Number of ids (the largest id + 1) and the token string of an id ("" for a hole).
    int32_t vocab_size() const;
    const std::string& token(int32_t id) const;

    struct Impl;

private:
    explicit ClipTokenizer(std::unique_ptr<Impl> impl);
    std::vector<int32_t> encode_padded(const std::vector<int32_t>& content, int max_tokens) const;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sd
