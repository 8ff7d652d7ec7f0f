// Numbers read from text the way our command lines and option tables take them: whole, in base
// 10, into exactly the variable's type and within a range; anything else ("abc", "12x", "0x10",
// 4294967297 for an int) is a gl::Error naming what was read (`what`: "--seed", "run.toml: seed")
// and the accepted range. tools/common/cli.h turns these errors into usage errors; the trainer's
// option table (train/run/option_table.cpp) reads its values with them too.
#pragma once
#include <charconv>
#include <cmath>
#include <concepts>
#include <limits>
#include <string>
#include <string_view>

#include "ggml-lite/core/error.h"

namespace gl {

// "[lo, hi]" for the messages and --help.
template <class T>
std::string range_text(T lo, T hi) {
    return cat("[", lo, ", ", hi, "]");
}
// The same for a floating-point range, where the type's limits mean "no bound": " in [lo, hi]",
// " >= lo", " <= hi" or "".
template <std::floating_point T>
std::string real_range_text(T lo, T hi) {
    const bool low = lo != std::numeric_limits<T>::lowest(), high = hi != std::numeric_limits<T>::max();
    return low && high ? " in " + range_text(lo, hi) : low ? cat(" >= ", lo) : high ? cat(" <= ", hi) : "";
}

// text as an integer of type T in [lo, hi]: an optional '-' and decimal digits, nothing else (no
// spaces, '+', hex or octal prefixes, exponents).
template <std::integral T>
T parse_int(std::string_view what, std::string_view text, T lo, T hi) {
    T v{};
    const char* end = text.data() + text.size();
    const bool digits = !text.empty() && text.find_first_not_of("0123456789", text[0] == '-' ? 1 : 0) ==
                                             std::string_view::npos && text != "-";
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (!digits || ec != std::errc() || ptr != end || v < lo || v > hi)
        fail(what, " wants an integer in ", range_text(+lo, +hi), ", got '", text, "'");
    return v;
}

// text as a finite floating-point number of type T in [lo, hi] (decimal or exponent form). A value
// kept in T and computed in a narrower type Used (a double option the run uses as a float) must
// also be finite there and not round to zero there unless it is zero: 1e39 is a finite double and
// an infinite float, 1e-50 a float 0.
template <std::floating_point T, std::floating_point Used = T>
T parse_real(std::string_view what, std::string_view text, T lo, T hi) {
    T v{};
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || ptr != end || !(v >= lo && v <= hi))
        fail(what, " wants a finite number", real_range_text(lo, hi), ", got '", text, "'");
    if constexpr (sizeof(Used) < sizeof(T)) {
        const T size = std::fabs(v), largest = std::numeric_limits<Used>::max(),
                smallest = std::numeric_limits<Used>::denorm_min();
        if (size > largest || (v != 0 && size < smallest))
            fail(what, " wants a finite number", real_range_text(lo, hi), " that a ", 8 * sizeof(Used),
                 "-bit float holds (the run computes it in one: 0, or ", smallest, " to ", largest, " in size), got '",
                 text, "'");
    }
    return v;
}

}  // namespace gl
