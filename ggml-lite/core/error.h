// gl::Error: the one exception type the library throws. It carries the context a
// user needs to fix the call (op name, shapes, dtypes, file, key) in its message.
#pragma once
#include <stdexcept>
#include <string>
#include <sstream>

namespace gl {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void format_into(std::ostringstream&) {}
template <class T, class... Rest>
void format_into(std::ostringstream& os, const T& v, const Rest&... rest) {
    os << v;
    format_into(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<< into one message.
template <class... Args>
std::string cat(const Args&... args) {
    std::ostringstream os;
    detail::format_into(os, args...);
    return os.str();
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
