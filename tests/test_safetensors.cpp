// safetensors: round trips through our writer and reader, compatibility with the reference
// package (tests/golden/make_safetensors.py), clear errors on malformed headers, and a bounded,
// deterministic fuzz of the header parser (mutated headers must give gl::Error, never a crash
// or an out-of-bounds read; run under ASan/UBSan to make that last part strict).
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sources.h"
#include "test_util.h"

using namespace gl;
using namespace gl::io;
namespace fs = std::filesystem;

using gltest::error_of;
using gltest::fuzz_iterations;
using gltest::TempDir;

namespace {

std::string golden_dir() { return gltest::golden_dir("safetensors"); }


std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A safetensors image from a header text and a data area.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> b(8 + header.size() + data.size());
    for (int i = 0; i < 8; i++) b[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
    std::copy(header.begin(), header.end(), b.begin() + 8);
    std::copy(data.begin(), data.end(), b.begin() + 8 + long(header.size()));
    return b;
}

float ramp(int64_t i) { return float(i) * 0.25f - 2.0f; }

// The set make_safetensors.py expects from our writer (its common()).
struct Canonical {
    std::vector<float> f32;
    std::vector<uint16_t> f16, bf16;
    std::vector<int32_t> ids{-1, 0, 1, 2147483647};
    std::vector<uint8_t> bytes{0, 128, 255};
    std::vector<int8_t> sign{-128, 127};
    float scalar = 0.5f;
    Canonical() {
        for (int i = 0; i < 6; i++) f32.push_back(ramp(i));
        for (int i = 0; i < 3; i++) f16.push_back(f32_to_f16(ramp(i)));
        for (int i = 0; i < 4; i++) bf16.push_back(f32_to_bf16(ramp(i)));
    }
    std::vector<TensorToWrite> tensors() const {
        return {{"w.f32", DType::f32, {2, 3}, f32.data()},   {"w.f16", DType::f16, {3}, f16.data()},
                {"w.bf16", DType::bf16, {2, 2}, bf16.data()}, {"ids", DType::i32, {4}, ids.data()},
                {"bytes", DType::u8, {3}, bytes.data()},      {"signed", DType::i8, {2}, sign.data()},
                {"scalar", DType::f32, {}, &scalar},          {"empty", DType::f32, {0, 4}, nullptr}};
    }
    std::map<std::string, std::string> meta() const {
        return {{"format", "pt"}, {"ss_note", "\xc3\xbc" "n" "\xc3\xaf" "code \xe2\x9c\x93"}};
    }
};

template <class T>
std::vector<T> read_as(const TensorSource& s, const std::string& name, DType to) {
    std::vector<T> v(size_t(s.info(name).numel()));
    s.read(name, v.data(), to);
    return v;
}

}  // namespace

TEST_CASE("safetensors: write, then read back every dtype, shape and conversion") {
    TempDir dir;
    const std::string path = dir / "model.safetensors";
    Canonical c;
    write_safetensors(path, c.tensors(), c.meta());

    SafetensorsFile f(path);
    CHECK(f.origin() == path);
    CHECK(f.metadata() == c.meta());
    std::vector<std::string> names;
    for (const TensorInfo& t : f.list()) names.push_back(t.name);
    CHECK(names == std::vector<std::string>{"bytes", "empty", "ids", "scalar", "signed", "w.bf16", "w.f16", "w.f32"});
    CHECK(f.info("w.f32").shape == std::vector<int64_t>{2, 3});
    CHECK(f.info("scalar").shape.empty());
    CHECK(f.info("empty").numel() == 0);
    CHECK(f.info("w.bf16").dtype == DType::bf16);

    // Header padded to 8 bytes: 4-byte data starts aligned in the file.
    std::vector<uint8_t> b = file_bytes(path);
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    CHECK(n % 8 == 0);
    CHECK(reinterpret_cast<uintptr_t>(f.raw("w.f32")) % 4 == 0);
    CHECK(std::memcmp(f.raw("w.f32"), c.f32.data(), 24) == 0);
    CHECK(f.nbytes("w.f16") == 6);

    CHECK(read_as<float>(f, "w.f32", DType::f32) == c.f32);
    CHECK(read_as<float>(f, "scalar", DType::f32) == std::vector<float>{0.5f});
    CHECK(read_as<int32_t>(f, "ids", DType::i32) == c.ids);
    CHECK(read_as<uint8_t>(f, "bytes", DType::u8) == c.bytes);
    CHECK(read_as<int8_t>(f, "signed", DType::i8) == c.sign);
    // Float conversions in every direction agree with core/dtype.h.
    std::vector<uint16_t> h = read_as<uint16_t>(f, "w.f32", DType::f16), bb = read_as<uint16_t>(f, "w.f32", DType::bf16);
    for (size_t i = 0; i < 6; i++) {
        CHECK(h[i] == f32_to_f16(c.f32[i]));
        CHECK(bb[i] == f32_to_bf16(c.f32[i]));
    }
    CHECK(read_as<float>(f, "w.f16", DType::f32) == std::vector<float>{ramp(0), ramp(1), ramp(2)});
    CHECK(read_as<uint16_t>(f, "w.bf16", DType::f16)[3] == f32_to_f16(ramp(3)));
    CHECK(error_of([&] { read_as<float>(f, "ids", DType::f32); }).find("cannot read I32 data as f32") !=
          std::string::npos);
    CHECK(error_of([&] { read_as<int32_t>(f, "w.f32", DType::i32); }).find("tensor 'w.f32'") != std::string::npos);
    CHECK(error_of([&] { f.info("nope"); }) == path + ": no tensor 'nope'");

    // No temporary left behind, permissions for others to read, open_checkpoint finds the format.
    int files = 0;
    for (auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
    CHECK(files == 1);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
    CHECK(open_checkpoint(path)->list().size() == 8);
}

TEST_CASE("safetensors: a read gives the tensor's mapped pages back, and reading it again gives the same bytes") {
    TempDir dir;
    const std::string path = dir / "big.safetensors";
    const size_t n = size_t(3) << 20;  // 12 MiB of f32: many whole pages inside the tensor
    std::vector<float> w(n);
    for (size_t i = 0; i < n; i++) w[i] = float(i % 9973) * 0.25f - 7.0f;
    write_safetensors(path, {{"w", DType::f32, {int64_t(n)}, w.data()}}, {});
    SafetensorsFile f(path);
    const uint8_t* raw = static_cast<const uint8_t*>(f.raw("w"));
    CHECK(std::memcmp(raw, w.data(), n * 4) == 0);  // every page resident now
    CHECK(read_as<float>(f, "w", DType::f32) == w);
    // The file's pages stay in the page cache; what must go is this mapping's share of the
    // process's resident set (its Rss line in /proc/self/smaps).
    auto rss_of_mapping_kib = [&] {
        std::ifstream smaps("/proc/self/smaps");
        std::string line;
        bool in = false;
        while (std::getline(smaps, line)) {
            unsigned long lo = 0, hi = 0;
            char perms[8] = {};
            if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3) {  // a mapping's first line
                in = uintptr_t(raw) >= lo && uintptr_t(raw) < hi;
                continue;
            }
            if (in && line.rfind("Rss:", 0) == 0) return std::stol(line.substr(4));
        }
        return -1L;
    };
    const long rss = rss_of_mapping_kib();
    CHECK(rss >= 0);
    CHECK(rss < 1024);  // of 12 MiB mapped, at most the partial first and last pages and the header
    CHECK(read_as<float>(f, "w", DType::f32) == w);  // faulted in again from the file, unchanged
    CHECK(std::memcmp(raw, w.data(), n * 4) == 0);
}

TEST_CASE("safetensors: the writer replaces atomically and refuses bad input before touching the disk") {
    TempDir dir;
    const std::string path = dir / "out.safetensors";
    float x = 1.0f;
    write_safetensors(path, {{"a", DType::f32, {1}, &x}});
    const std::vector<uint8_t> before = file_bytes(path);

    auto fails = [&](std::vector<TensorToWrite> t, const char* want) {
        std::string e = error_of([&] { write_safetensors(path, t); });
        CHECK_MESSAGE(e.find(want) != std::string::npos, e);
        CHECK(file_bytes(path) == before);
    };
    fails({{"a", DType::f32, {1}, &x}, {"a", DType::f32, {1}, &x}}, "tensor 'a': given twice");
    fails({{"__metadata__", DType::f32, {1}, &x}}, "invalid tensor name");
    fails({{"b", DType::f32, {-1}, &x}}, "tensor 'b': shape [-1] has a negative dimension");
    fails({{"c", DType::f32, {2}, nullptr}}, "tensor 'c': no data");
    std::string e = error_of([&] { write_safetensors(path, {{"\xff", DType::f32, {1}, &x}}); });
    CHECK_MESSAGE(e.find("UTF-8") != std::string::npos, e);
    e = error_of([&] { write_safetensors(dir / "missing/x.safetensors", {{"a", DType::f32, {1}, &x}}); });
    CHECK_MESSAGE(e.find("missing/x.safetensors: its folder does not exist") != std::string::npos, e);

    float y = 2.0f;  // a second write replaces the first completely
    write_safetensors(path, {{"b", DType::f32, {1}, &y}});
    SafetensorsFile f(path);
    CHECK(!f.has("a"));
    CHECK(read_as<float>(f, "b", DType::f32) == std::vector<float>{2.0f});
    int files = 0;
    for (auto& it : fs::directory_iterator(dir.path)) files += it.is_regular_file();
    CHECK(files == 1);
}

TEST_CASE("safetensors: compatible with the reference package both ways") {
    // Our writer's bytes are stable, and make_safetensors.py checked that the reference
    // package reads exactly these bytes back (GL_REGEN_GOLDEN=1 rewrites them).
    Canonical c;
    TempDir dir;
    write_safetensors(dir / "ours.safetensors", c.tensors(), c.meta());
    const std::string committed = golden_dir() + "cpp_written.safetensors";
    if (const char* regen = std::getenv("GL_REGEN_GOLDEN"); regen && std::string(regen) == "1")
        fs::copy_file(dir / "ours.safetensors", committed, fs::copy_options::overwrite_existing);
    CHECK(file_bytes(dir / "ours.safetensors") == file_bytes(committed));

    // Written by python safetensors (make_safetensors.py).
    SafetensorsFile py(golden_dir() + "py_written.safetensors");
    CHECK(py.metadata() == c.meta());
    CHECK(read_as<float>(py, "w.f32", DType::f32) == c.f32);
    CHECK(read_as<uint16_t>(py, "w.f16", DType::f16) == c.f16);
    CHECK(read_as<uint16_t>(py, "w.bf16", DType::bf16) == c.bf16);
    CHECK(read_as<int32_t>(py, "ids", DType::i32) == c.ids);
    CHECK(read_as<int8_t>(py, "signed", DType::i8) == c.sign);
    CHECK(py.info("empty").shape == std::vector<int64_t>{0, 4});
    CHECK(py.info("scalar").shape.empty());
    // Types the runtime has no dtype for: listed as what they read into.
    CHECK(py.entry("f64").stored == StoredType::f64);
    CHECK(py.info("f64").dtype == DType::f32);
    CHECK(read_as<float>(py, "f64", DType::f32) == std::vector<float>{ramp(0), ramp(1), ramp(2)});
    CHECK(read_as<int32_t>(py, "i64", DType::i32) == std::vector<int32_t>{5, -6});
    CHECK(read_as<uint8_t>(py, "bool", DType::u8) == std::vector<uint8_t>{1, 0});
    std::string e = error_of([&] { read_as<float>(py, "i64", DType::f32); });
    CHECK_MESSAGE(e.find("py_written.safetensors: tensor 'i64': cannot read I64 data as f32") != std::string::npos, e);
}

TEST_CASE("safetensors: malformed files give errors naming the file and the tensor") {
    const std::vector<uint8_t> data(64, 0);
    struct Bad {
        std::string header;
        size_t data_bytes;
        const char* want;
    };
    const std::string ok = R"("t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]})";
    const Bad cases[] = {
        {"[1, 2]", 16, "does not start with a JSON object"},
        {"{\"t\": 1", 16, "not valid JSON"},
        {"{" + ok + ", " + ok + "}", 16, "names tensor 't' twice"},
        {R"({"t": {"dtype": "F17", "shape": [4], "data_offsets": [0, 16]}})", 16, "tensor 't': unsupported dtype \"F17\""},
        {R"({"t": {"dtype": "I16", "shape": [8], "data_offsets": [0, 16]}})", 16, "unsupported dtype \"I16\""},
        {R"({"t": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", 16, "tensor 't': shape [-4] holds"},
        {R"({"t": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}})", 16, "holds something other"},
        {R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}})", 16, "overflows"},
        {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 17]}})", 16, "fall outside the 16-byte data area"},
        {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [8, 4]}})", 16, "end before they begin"},
        {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})", 16, "needs 16 bytes but data_offsets [0,12] hold 12"},
        {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})", 16, "data_offsets is not [begin, end]"},
        {R"({"t": {"dtype": "F32", "shape": [4]}})", 16, "needs dtype, shape and data_offsets"},
        {R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16], "x": 1}})", 16, "unknown header field 'x'"},
        {R"({"t": [1]})", 16, "tensor 't': header entry is not a JSON object"},
        {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
             "b": {"dtype": "F16", "shape": [4], "data_offsets": [8, 16]}})", 16, "tensors 'a' and 'b' overlap"},
        {R"({"__metadata__": {"k": 1}})", 0, "__metadata__ value of 'k' is not a string"},
        {R"({"__metadata__": []})", 0, "__metadata__ is not a JSON object"},
        {R"({"t": {"dtype": "F32", "shape": [[[[1]]]], "data_offsets": [0, 4]}})", 4, "nests deeper"},
        {"{" + ok + "}", 15, "fall outside the 15-byte data area (file truncated?)"},
    };
    for (const Bad& b : cases) {
        std::vector<uint8_t> img = image(b.header, std::vector<uint8_t>(data.begin(), data.begin() + long(b.data_bytes)));
        std::string e = error_of([&] { SafetensorsFile f(img, "bad.safetensors"); });
        CHECK_MESSAGE(e.rfind("bad.safetensors: ", 0) == 0, e);
        CHECK_MESSAGE(e.find(b.want) != std::string::npos, b.header, " -> ", e);
    }
    // The length field itself.
    CHECK(error_of([] { SafetensorsFile({1, 2, 3}, "x"); }).find("shorter than the 8-byte header length") !=
          std::string::npos);
    std::vector<uint8_t> huge = image("{}", {});
    huge[5] = 1;  // 2^40
    CHECK(error_of([&] { SafetensorsFile(huge, "x"); }).find("exceeds the 104857600-byte limit") != std::string::npos);
    std::vector<uint8_t> past = image("{}", {});
    past[0] = 3;  // 3 > the 2 bytes that follow
    CHECK(error_of([&] { SafetensorsFile(past, "x"); }).find("truncated: header length 3") != std::string::npos);
    // A file on disk cut short (the most common corruption: an interrupted download).
    TempDir dir;
    Canonical c;
    write_safetensors(dir / "full.safetensors", c.tensors(), c.meta());
    std::vector<uint8_t> full = file_bytes(dir / "full.safetensors");
    std::ofstream(dir / "cut.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(full.data()), long(full.size() - 3));
    std::string e = error_of([&] { open_checkpoint(dir / "cut.safetensors"); });
    CHECK_MESSAGE(e.find("cut.safetensors: tensor '") != std::string::npos, e);
    CHECK_MESSAGE(e.find("file truncated?") != std::string::npos, e);
    CHECK(error_of([&] { SafetensorsFile(dir / "none.safetensors"); }).find("none.safetensors: cannot open") !=
          std::string::npos);
}

// Fuzz target for the header parser: deterministic mutations of valid files (byte flips,
// splices, number and dtype substitutions, length-field and truncation changes). Each mutant
// must either be rejected with gl::Error or parse into entries that read within bounds.
TEST_CASE("safetensors fuzz: mutated headers are rejected cleanly or read in bounds") {
    Canonical c;
    TempDir dir;
    write_safetensors(dir / "seed.safetensors", c.tensors(), c.meta());
    const std::vector<uint8_t> seed = file_bytes(dir / "seed.safetensors");
    uint64_t hlen = 0;
    std::memcpy(&hlen, seed.data(), 8);
    const std::vector<std::string> tokens = {"0", "-1", "18446744073709551615", "9223372036854775807", "1e309",
                                             "4294967296", "\"F64\"", "\"BOOL\"", "\"U8\"", "[]", "{}", "null",
                                             "\"__metadata__\"", "[0,0]", "\"", ",", "}", "]", "\\u0000", "3"};
    std::mt19937_64 rng(20240611);
    int accepted = 0, rejected = 0;
    const int kIterations = fuzz_iterations(4000);
    for (int it = 0; it < kIterations; it++) {
        std::vector<uint8_t> m = seed;
        const int edits = 1 + int(rng() % 4);
        for (int k = 0; k < edits; k++) {
            const size_t hend = 8 + size_t(hlen);
            switch (rng() % 6) {
                case 0: m[8 + rng() % hlen] ^= uint8_t(1u << (rng() % 8)); break;  // bit flip in the header
                case 1: {  // replace a run of header bytes with a token
                    size_t at = 8 + rng() % hlen, len = std::min<size_t>(rng() % 6, hend - at);
                    const std::string& t = tokens[rng() % tokens.size()];
                    m.erase(m.begin() + long(at), m.begin() + long(at + len));
                    m.insert(m.begin() + long(at), t.begin(), t.end());
                    int64_t grow = int64_t(t.size()) - int64_t(len);
                    if (rng() % 4) {  // usually keep the length field consistent
                        uint64_t nl = uint64_t(int64_t(hlen) + grow);
                        std::memcpy(m.data(), &nl, 8);
                    }
                    break;
                }
                case 2: m.resize(rng() % (m.size() + 1)); break;                  // truncate
                case 3: m[rng() % std::min<size_t>(8, m.size())] = uint8_t(rng()); break;  // length field
                case 4: if (m.size() > 8) m[8 + rng() % (m.size() - 8)] = uint8_t(rng()); break;  // anywhere
                case 5: m.insert(m.end(), size_t(rng() % 16), uint8_t(rng())); break;  // trailing bytes
            }
            if (m.size() < 8 + hlen) break;
        }
        try {
            SafetensorsFile f(std::move(m), "fuzz");
            for (const TensorInfo& t : f.list()) {
                const SafetensorsFile::Entry& e = f.entry(t.name);
                std::vector<uint8_t> dst(size_t(t.numel()) * dtype_size(t.dtype) + 1, 0xAB);
                try {
                    f.read(t.name, dst.data(), t.dtype);
                } catch (const Error&) {  // e.g. an I64 value that does not fit in i32
                }
                CHECK(dst.back() == 0xAB);  // nothing written past the tensor
                CHECK(e.end - e.begin == t.numel() * int64_t(stored_size(e.stored)));
            }
            accepted++;
        } catch (const Error&) {
            rejected++;
        }
    }
    MESSAGE("safetensors fuzz: ", kIterations, " mutants, ", accepted, " accepted, ", rejected, " rejected");
    CHECK(accepted + rejected == kIterations);
    CHECK(rejected > kIterations / 2);
}
