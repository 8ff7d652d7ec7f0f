// The exhaustive (all 2^32 floats) check of the 8-bit AdamW code search, run on the GPU.
#pragma once
#include <cstdint>

namespace gltest {

struct Adam8bitCodeCheck {
    unsigned long long mismatches = 0;
    uint32_t first_bits = 0xffffffffu;  // the smallest bit pattern that disagreed
};
Adam8bitCodeCheck adam8bit_codes_all_floats(bool is_signed);

}  // namespace gltest
