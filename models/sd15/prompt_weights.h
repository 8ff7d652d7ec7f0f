// kohya's weighted captions (--weighted_captions), as sd-scripts' train_network.py runs them for
// SD1.x / SD2.x (library/strategy_base.py's TokenizeStrategy._get_weighted_input_ids and
// _get_input_ids, strategy_sd.py's SdTextEncodingStrategy.encode_tokens_with_weights):
//
//   1. parse_prompt_attention splits the caption into pieces with a weight each: "(a)" multiplies
//      a by 1.1, "[a]" by 1 / 1.1, "(a:1.3)" by 1.3 (nested brackets multiply; an unclosed "(" or
//      "[" runs to the end of the text; an unmatched ")" or "]" is text), "\(", "\)", "\[", "\]",
//      "\\" are the literal characters, a lone "\" is dropped; neighbours of equal weight merge.
//   2. each piece is tokenised alone (its content ids), the ids joined and cut to the
//      max_token_length's content (75, 150, 225), and laid out in chunks of 77 as the unweighted
//      ids are (ClipTokenizer::encode_content).
//   3. the text encoder's joined output [rows = chunks * 75 + 2, width] is multiplied row by row
//      by the weights: row 1 + i by the weight of content token i, BOS, EOS and the padding by 1.
//      The mean is not restored (the older get_weighted_text_embeddings of
//      custom_train_functions.py did that; train_network.py no longer calls it).
// The weights are computed in double as Python does and rounded to float as torch.tensor does.
// Not reproduced: Python's \d also takes non-ASCII decimal digits ("(a:１.５)"); here only 0-9.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/sd15/tokenizer.h"

namespace sd {

struct WeightedPiece {
    std::string text;
    double weight = 1.0;
};

// The pieces of a caption (never empty: "" gives one piece of weight 1). Throws gl::Error when a
// "(text:number)" has a number Python's float() refuses ("1.2.3", "."), as kohya's run stops there.
std::vector<WeightedPiece> parse_prompt_attention(std::string_view text);

struct WeightedIds {
    std::vector<int32_t> ids;   // [max_tokens / 75, 77], as ClipTokenizer::encode_chunks lays them out
    std::vector<float> weights;  // [max_tokens + 2]: one per row of the joined text encoder output
    bool truncated = false;      // the caption had more than max_tokens content tokens
};

// Steps 1 and 2 for max_tokens 75, 150 or 225 (kohya's max_token_length; 75 without it).
WeightedIds encode_weighted(const ClipTokenizer& tok, std::string_view text, int max_tokens);

// Step 3 on host floats: context [batch, rows, width] times weights [batch, rows].
void apply_token_weights(std::span<float> context, std::span<const float> weights, int64_t batch, int64_t rows,
                         int64_t width);

}  // namespace sd
