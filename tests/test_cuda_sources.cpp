// The CUDA sources' launch-order rule, checked without a GPU: every kernel of the library (and
// of any product folder) begins with kernel_entry() (cuda/primitives.cuh). The CUDA runtime
// makes a captured graph's edge between two of our kernels programmatic on sm_90
// (cuda/runtime.cu), so the second kernel's blocks may start while the first one still runs; a
// kernel without the wait at its top would then read inputs not yet written, or overwrite memory
// the first one still reads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// The text with comments and string / character literals blanked (newlines kept), so that a
// "__global__" or a brace inside them is not taken for code.
std::string code_only(const std::string& s) {
    std::string o = s;
    size_t i = 0;
    while (i < o.size()) {
        if (o.compare(i, 2, "//") == 0) {
            while (i < o.size() && o[i] != '\n') o[i++] = ' ';
        } else if (o.compare(i, 2, "/*") == 0) {
            size_t e = o.find("*/", i + 2);
            e = e == std::string::npos ? o.size() : e + 2;
            for (; i < e; i++)
                if (o[i] != '\n') o[i] = ' ';
        } else if (o[i] == '"' || o[i] == '\'') {
            const char q = o[i++];
            while (i < o.size() && o[i] != q) {
                if (o[i] == '\\' && i + 1 < o.size()) o[i++] = ' ';
                if (o[i] != '\n') o[i] = ' ';
                i++;
            }
            i++;
        } else {
            i++;
        }
    }
    return o;
}

size_t skip_space(const std::string& s, size_t i) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) i++;
    return i;
}

// The line of offset i (1-based).
int line_of(const std::string& s, size_t i) { return 1 + int(std::count(s.begin(), s.begin() + long(i), '\n')); }

// "file:line" of every kernel definition in src whose body does not begin with kernel_entry();
// `kernels` counts the definitions seen (declarations without a body are skipped).
std::vector<std::string> kernels_without_entry(const std::string& name, const std::string& src, int& kernels) {
    const std::string s = code_only(src);
    std::vector<std::string> bad;
    for (size_t at = s.find("__global__"); at != std::string::npos; at = s.find("__global__", at + 1)) {
        // Past each parenthesised group (__launch_bounds__'s, then the parameters) until a body
        // or a ';' follows one.
        size_t i = at;
        bool body = false;
        while (true) {
            i = s.find('(', i);
            if (i == std::string::npos) break;
            int depth = 0;
            for (; i < s.size(); i++) {
                if (s[i] == '(') depth++;
                if (s[i] == ')' && --depth == 0) break;
            }
            i = skip_space(s, i + 1);
            if (i >= s.size() || s[i] == ';') break;
            if (s[i] == '{') {
                body = true;
                break;
            }
        }
        if (!body) continue;
        kernels++;
        const size_t first = skip_space(s, i + 1);
        const std::string want = "kernel_entry();";
        if (s.compare(first, want.size(), want) != 0) bad.push_back(name + ":" + std::to_string(line_of(s, at)));
    }
    return bad;
}

}  // namespace

TEST_CASE("cuda sources: the checker finds a kernel that does not begin with kernel_entry") {
    int n = 0;
    const std::string ok =
        "template <class T>\n__global__ void __launch_bounds__(256, 2) a(const T* x) {\n  kernel_entry();\n  x[0];\n}\n"
        "__global__ void declared(int);\n"
        "// __global__ void in_a_comment() { }\n"
        "const char* s = \"__global__ void f() {\";\n";
    CHECK(kernels_without_entry("ok.cu", ok, n).empty());
    CHECK(n == 1);
    n = 0;
    const std::string missing =
        "__global__ void b(float* y) {\n  y[0] = 1;\n  kernel_entry();\n}\n__global__ void c() {\n  kernel_entry();\n}\n"
        "__global__ void d() { /* kernel_entry(); */ }\n";
    const std::vector<std::string> bad = kernels_without_entry("bad.cu", missing, n);
    CHECK(n == 3);
    REQUIRE(bad.size() == 2);
    CHECK(bad[0] == "bad.cu:1");
    CHECK(bad[1] == "bad.cu:8");
}

TEST_CASE("cuda sources: every kernel of the library and the product begins with kernel_entry (programmatic launch order)") {
    // Every .cu / .cuh of the source tree but the stand-alone checks and tests (bench/, tests/:
    // their kernels never run in a runtime's graph) and build folders.
    const fs::path root = fs::path(GL_SOURCE_DIR);
    REQUIRE(fs::is_directory(root / "ggml-lite" / "cuda"));
    int kernels = 0, files = 0;
    std::vector<std::string> bad;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        const fs::path& p = it->path();
        const std::string name = p.filename().string();
        if (it->is_directory() && it.depth() == 0 &&
            (name[0] == '.' || name.rfind("build", 0) == 0 || name == "bench" || name == "tests")) {
            it.disable_recursion_pending();
            continue;
        }
        const std::string ext = p.extension().string();
        if (!it->is_regular_file() || (ext != ".cu" && ext != ".cuh")) continue;
        std::ifstream f(p, std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        files++;
        for (std::string& b : kernels_without_entry(fs::relative(p, root).string(), ss.str(), kernels)) bad.push_back(b);
    }
    MESSAGE(kernels, " kernels in ", files, " files");
    CHECK(files >= 30);
    CHECK(kernels >= 100);  // 112 when this test was written
    for (const std::string& b : bad) FAIL_CHECK("kernel without kernel_entry() as its first statement: ", b);
}
