// gl::Error: the one exception type the library throws. It carries the context a
// user needs to fix the call (op name, shapes, dtypes, file, key) in its message.
#pragma once
#include <charconv>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace gl {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
// Strings, characters and numbers are appended directly, exactly as operator<< would print them
// (integers in decimal, floating point as %g, bool as 0 / 1, char types as characters); anything
// else goes through a stream. Graph building names every value with cat(), so a stream per call
// would cost more than the graph.
template <class T>
void append(std::string& s, const T& v) {
    using U = std::decay_t<T>;
    if constexpr (std::is_convertible_v<const U&, std::string_view>) {
        s += std::string_view(v);
    } else if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> || std::is_same_v<U, unsigned char>) {
        s += char(v);
    } else if constexpr (std::is_integral_v<U>) {
        char buf[24];
        s.append(buf, size_t(std::to_chars(buf, buf + sizeof buf, std::is_same_v<U, bool> ? int(v) : v).ptr - buf));
    } else if constexpr (std::is_floating_point_v<U>) {
        char buf[40];
        const int n = std::snprintf(buf, sizeof buf, "%g", double(v));
        s.append(buf, size_t(n));
    } else {
        std::ostringstream os;
        os << v;
        s += os.str();
    }
}
}  // namespace detail

// Concatenates its arguments into one message, each printed as operator<< prints it.
template <class... Args>
std::string cat(const Args&... args) {
    std::string s;
    (detail::append(s, args), ...);
    return s;
}

template <class... Args>
[[noreturn]] void fail(const Args&... args) {
    throw Error(cat(args...));
}

}  // namespace gl

// GL_CHECK(cond, parts...): throws gl::Error with the message parts when cond is false.
#define GL_CHECK(cond, ...)                                \
    do {                                                   \
        if (!(cond)) ::gl::fail(__VA_ARGS__);              \
    } while (0)
