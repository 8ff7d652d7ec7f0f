// PyTorch .ckpt reading: the files torch.save wrote (tests/golden/make_ckpt.py: every dtype,
// {"state_dict": ...} wrapping, strided/shared/broadcast views, a module's OrderedDict, torch's
// own f16/bf16 rounding), then hand-built archives and pickles that must be refused clearly
// (forbidden GLOBALs, views outside their storage, truncation, nesting bombs, compression),
// a zip64 archive, and bounded deterministic fuzzing of the archive and the pickle.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/torch_ckpt.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sources.h"
#include "ggml-lite/io/zip.h"
#include "test_util.h"

using namespace gl;
using namespace gl::io;

using gltest::error_of;
using gltest::fuzz_iterations;

namespace {

std::string golden(const std::string& name) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/ckpt/" + name;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE(f.good());
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <class T>
std::vector<T> read_as(const TensorSource& s, const std::string& name, DType to) {
    std::vector<T> v(size_t(s.info(name).numel()));
    s.read(name, v.data(), to);
    return v;
}

float ramp(int64_t i, float scale = 0.25f, float bias = -2.0f) { return float(i) * scale + bias; }
std::vector<float> ramps(int n, float scale = 0.25f, float bias = -2.0f) {
    std::vector<float> v;
    for (int i = 0; i < n; i++) v.push_back(ramp(i, scale, bias));
    return v;
}

// ---- building archives and pickles by hand ----

void put(std::vector<uint8_t>& b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b.push_back(uint8_t(v >> (8 * i)));
}

struct ZipItem {
    std::string name;
    std::vector<uint8_t> data;
    uint16_t method = 0;
};

// Stored entries, local headers, central directory, end record; zip64 records on request.
std::vector<uint8_t> make_zip(const std::vector<ZipItem>& items, bool zip64 = false) {
    std::vector<uint8_t> z, cd;
    for (const ZipItem& it : items) {
        const uint64_t local = z.size();
        const uint32_t crc = crc32(it.data.data(), it.data.size());
        put(z, 0x04034b50, 4), put(z, 45, 2), put(z, 0, 2), put(z, it.method, 2), put(z, 0, 4), put(z, crc, 4);
        put(z, it.data.size(), 4), put(z, it.data.size(), 4), put(z, it.name.size(), 2), put(z, 0, 2);
        z.insert(z.end(), it.name.begin(), it.name.end());
        z.insert(z.end(), it.data.begin(), it.data.end());
        const uint64_t big = zip64 ? 0xffffffffu : 0;
        put(cd, 0x02014b50, 4), put(cd, 45, 2), put(cd, 45, 2), put(cd, 0, 2), put(cd, it.method, 2), put(cd, 0, 4);
        put(cd, crc, 4), put(cd, zip64 ? big : it.data.size(), 4), put(cd, zip64 ? big : it.data.size(), 4);
        put(cd, it.name.size(), 2), put(cd, zip64 ? 28 : 0, 2), put(cd, 0, 2), put(cd, 0, 2), put(cd, 0, 2);
        put(cd, 0, 4), put(cd, zip64 ? big : local, 4);
        cd.insert(cd.end(), it.name.begin(), it.name.end());
        if (zip64) put(cd, 1, 2), put(cd, 24, 2), put(cd, it.data.size(), 8), put(cd, it.data.size(), 8), put(cd, local, 8);
    }
    const uint64_t cd_off = z.size();
    z.insert(z.end(), cd.begin(), cd.end());
    if (zip64) {
        const uint64_t rec = z.size();
        put(z, 0x06064b50, 4), put(z, 44, 8), put(z, 45, 2), put(z, 45, 2), put(z, 0, 4), put(z, 0, 4);
        put(z, items.size(), 8), put(z, items.size(), 8), put(z, cd.size(), 8), put(z, cd_off, 8);
        put(z, 0x07064b50, 4), put(z, 0, 4), put(z, rec, 8), put(z, 1, 4);
        put(z, 0x06054b50, 4), put(z, 0, 4), put(z, 0xffff, 2), put(z, 0xffff, 2), put(z, 0xffffffffu, 4);
        put(z, 0xffffffffu, 4), put(z, 0, 2);
    } else {
        put(z, 0x06054b50, 4), put(z, 0, 4), put(z, items.size(), 2), put(z, items.size(), 2), put(z, cd.size(), 4);
        put(z, cd_off, 4), put(z, 0, 2);
    }
    return z;
}

// Pickle assembly, protocol 2 opcodes as torch writes them.
struct Pickle {
    std::vector<uint8_t> b{0x80, 2};
    Pickle& raw(std::initializer_list<uint8_t> ops) {
        b.insert(b.end(), ops);
        return *this;
    }
    Pickle& str(const std::string& s) {
        b.push_back('X');
        put(b, s.size(), 4);
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Pickle& num(int64_t v) {
        if (v == int64_t(int32_t(v))) {
            b.push_back('J');
            put(b, uint64_t(v), 4);
        } else {  // LONG1 with 8 bytes, as pickle writes integers beyond 32 bits
            b.insert(b.end(), {0x8a, 8});
            put(b, uint64_t(v), 8);
        }
        return *this;
    }
    Pickle& global(const std::string& module, const std::string& name) {
        b.push_back('c');
        for (char c : module + "\n" + name + "\n") b.push_back(uint8_t(c));
        return *this;
    }
    Pickle& tuple(const std::vector<int64_t>& v) {
        raw({'('});
        for (int64_t x : v) num(x);
        return raw({'t'});
    }
    // _rebuild_tensor_v2(("storage", <type>, key, "cpu", numel), offset, size, stride, False, OrderedDict())
    Pickle& tensor(const std::string& type, const std::string& key, int64_t numel, int64_t offset,
                   const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
        global("torch._utils", "_rebuild_tensor_v2").raw({'(', '('}).str("storage").global("torch", type);
        str(key).str("cpu").num(numel).raw({'t', 'Q'}).num(offset).tuple(size).tuple(stride);
        return raw({0x89}).global("collections", "OrderedDict").raw({')', 'R', 't', 'R'});
    }
};

// {name: f32 tensor over storage "0"} with the view given, plus STOP.
std::vector<uint8_t> one_tensor_pickle(int64_t numel, int64_t offset, const std::vector<int64_t>& size,
                                       const std::vector<int64_t>& stride) {
    Pickle p;
    p.raw({'}', '('}).str("w").tensor("FloatStorage", "0", numel, offset, size, stride).raw({'u', '.'});
    return p.b;
}

std::vector<uint8_t> make_ckpt(const std::vector<uint8_t>& pkl, const std::vector<ZipItem>& storages,
                               const std::string& top = "archive", bool zip64 = false) {
    std::vector<ZipItem> items{{top + "/data.pkl", pkl}, {top + "/byteorder", {'l', 'i', 't', 't', 'l', 'e'}}};
    for (const ZipItem& s : storages) items.push_back({top + "/data/" + s.name, s.data, s.method});
    return make_zip(items, zip64);
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& want) {
    std::string e = error_of([&] { CkptFile f(bytes, "bad.ckpt"); });
    CHECK_MESSAGE(e.rfind("bad.ckpt", 0) == 0, e);
    CHECK_MESSAGE(e.find(want) != std::string::npos, "want '", want, "', got: ", e);
}

}  // namespace

TEST_CASE("torch_ckpt: every dtype torch.save writes") {
    CkptFile f(golden("dtypes.ckpt"));
    CHECK(f.list().size() == 12);
    CHECK(read_as<float>(f, "f32", DType::f32) == ramps(6));
    CHECK(f.info("f32").shape == std::vector<int64_t>{2, 3});
    CHECK(read_as<float>(f, "f16", DType::f32) == ramps(4));
    CHECK(f.info("f16").dtype == DType::f16);
    CHECK(read_as<float>(f, "bf16", DType::f32) == ramps(4));
    CHECK(f.info("bf16").dtype == DType::bf16);
    CHECK(read_as<uint16_t>(f, "bf16", DType::f16)[1] == f32_to_f16(ramp(1)));
    CHECK(f.stored_type("f64") == StoredType::f64);
    CHECK(read_as<float>(f, "f64", DType::f32) == ramps(3));
    CHECK(read_as<int32_t>(f, "i64", DType::i32) == std::vector<int32_t>{-3, 0, 7, 2147483647, -2147483647 - 1});
    CHECK(f.info("i64").shape == std::vector<int64_t>{1, 5});
    CHECK(read_as<int32_t>(f, "i32", DType::i32) == std::vector<int32_t>{-5, 6});
    CHECK(read_as<uint8_t>(f, "u8", DType::u8) == std::vector<uint8_t>{0, 255, 7});
    CHECK(read_as<int8_t>(f, "i8", DType::i8) == std::vector<int8_t>{-128, 127, -1});
    CHECK(read_as<uint8_t>(f, "bool", DType::u8) == std::vector<uint8_t>{1, 0, 1});
    CHECK(f.info("scalar").shape.empty());
    CHECK(read_as<float>(f, "scalar", DType::f32) == std::vector<float>{1.5f});
    CHECK(f.info("empty").shape == std::vector<int64_t>{0, 3});
    CHECK(read_as<float>(f, "empty", DType::f32).empty());
    CHECK(read_as<float>(f, "five_d", DType::f32) == ramps(32));
    std::string e = error_of([&] { read_as<float>(f, "i64", DType::f32); });
    CHECK_MESSAGE(e.find("dtypes.ckpt: tensor 'i64': cannot read I64 data as f32") != std::string::npos, e);
}

TEST_CASE("torch_ckpt: a {state_dict: ...} wrapper is unwrapped and the training state beside it ignored") {
    CkptFile f(golden("nested.ckpt"));  // also holds a numpy scalar (an inert GLOBAL)
    std::vector<TensorInfo> l = f.list();
    REQUIRE(l.size() == 2);
    CHECK(l[0].name == "first_stage_model.b");
    CHECK(l[1].name == "model.diffusion_model.w");
    CHECK(read_as<float>(f, "model.diffusion_model.w", DType::f32) == ramps(4));
    CHECK(read_as<uint16_t>(f, "first_stage_model.b", DType::bf16) ==
          std::vector<uint16_t>{f32_to_bf16(0.0f), f32_to_bf16(1.0f)});
}

TEST_CASE("torch_ckpt: strided, transposed, offset and broadcast views over shared storages") {
    CkptFile f(golden("views.ckpt"));
    std::vector<float> base = read_as<float>(f, "base", DType::f32);
    REQUIRE(base.size() == 24);
    for (int i = 0; i < 24; i++) CHECK(base[size_t(i)] == float(i));
    CHECK(!f.tensor("strided").contiguous());
    CHECK(f.tensor("strided").storage == f.tensor("base").storage);
    std::vector<float> s = read_as<float>(f, "strided", DType::f32), want;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 2; c++) want.push_back(float(r * 6 + 1 + 2 * c));
    CHECK(s == want);
    std::vector<uint16_t> t = read_as<uint16_t>(f, "transposed", DType::bf16);
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 4; c++) CHECK(t[size_t(r * 4 + c)] == f32_to_bf16(float(c * 6 + r)));
    CHECK(read_as<float>(f, "row2", DType::f32) == std::vector<float>{12, 13, 14, 15, 16, 17});
    CHECK(read_as<float>(f, "tail", DType::f32) == std::vector<float>{20, 21, 22, 23});
    CHECK(f.info("expanded").dtype == DType::bf16);
    std::vector<float> x = read_as<float>(f, "expanded", DType::f32);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) CHECK(x[size_t(r * 4 + c)] == float(r));
    CHECK(read_as<float>(f, "param", DType::f32) == ramps(4));
}

TEST_CASE("torch_ckpt: a module's state dict (OrderedDict with _metadata) matches torch's values") {
    CkptFile f(golden("module.ckpt"));
    std::ifstream txt(golden("module_values.txt"));
    REQUIRE(txt.good());
    std::string line;
    int tensors = 0;
    while (std::getline(txt, line)) {
        std::istringstream in(line.substr(0, line.find(" :")));
        std::string name;
        in >> name;
        std::vector<int64_t> shape;
        for (int64_t d; in >> d;) shape.push_back(d);
        CHECK(f.info(name).shape == shape);
        std::istringstream vals(line.substr(line.find(" :") + 2));
        std::vector<float> want;
        for (float v; vals >> v;) want.push_back(v);
        CHECK(read_as<float>(f, name, DType::f32) == want);
        tensors++;
    }
    CHECK(tensors == 6);
    CHECK(f.list().size() == 6);
}

TEST_CASE("torch_ckpt: f32 -> f16/bf16 rounding matches torch bit for bit") {
    CkptFile f(golden("rounding.ckpt"));
    const std::vector<uint16_t> h = read_as<uint16_t>(f, "r32", DType::f16), th = read_as<uint16_t>(f, "r16", DType::f16);
    const std::vector<uint16_t> b = read_as<uint16_t>(f, "r32", DType::bf16), tb = read_as<uint16_t>(f, "rbf", DType::bf16);
    REQUIRE(h.size() == 256);
    int mismatches = 0;
    for (size_t i = 0; i < h.size(); i++) mismatches += (h[i] != th[i]) + (b[i] != tb[i]);
    CHECK(mismatches == 0);
}

TEST_CASE("torch_ckpt: open_checkpoint and MergedSource") {
    std::unique_ptr<TensorSource> c = open_checkpoint(golden("views.ckpt"));
    CHECK(c->has("strided"));
    MergedSource m("tiny diffusers folder");
    m.add("unet.", open_checkpoint(golden("views.ckpt")));
    m.add("vae.", std::make_unique<CkptFile>(golden("nested.ckpt")));
    CHECK(m.has("unet.strided"));
    CHECK(m.has("vae.model.diffusion_model.w"));
    CHECK(!m.has("strided"));
    CHECK(m.list().size() == 9);
    CHECK(m.info("unet.row2").name == "unet.row2");
    CHECK(read_as<float>(m, "unet.row2", DType::f32) == std::vector<float>{12, 13, 14, 15, 16, 17});
    std::string e = error_of([&] { m.add("unet.", open_checkpoint(golden("views.ckpt"))); });
    CHECK_MESSAGE(e.find("tiny diffusers folder: tensor unet.") != std::string::npos, e);
    CHECK(error_of([&] { m.info("x"); }) == "tiny diffusers folder: no tensor 'x'");
    CHECK(error_of([] { open_checkpoint(golden("module_values.txt")); }).find("neither a safetensors file nor") !=
          std::string::npos);
}

TEST_CASE("torch_ckpt: hand-built archives, zip64 and another top folder") {
    const std::vector<uint8_t> pkl = one_tensor_pickle(6, 1, {2, 2}, {3, 1});
    const std::vector<uint8_t> data = f32_bytes(ramps(6));
    for (bool zip64 : {false, true}) {
        CkptFile f(make_ckpt(pkl, {{"0", data}}, "my_model", zip64), "hand.ckpt");
        CHECK(read_as<float>(f, "w", DType::f32) == std::vector<float>{ramp(1), ramp(2), ramp(4), ramp(5)});
    }
}

TEST_CASE("torch_ckpt: corrupt, hostile and unsupported files are refused clearly") {
    const std::vector<uint8_t> data = f32_bytes(ramps(6));
    const std::vector<uint8_t> good = make_ckpt(one_tensor_pickle(6, 0, {6}, {1}), {{"0", data}});
    CkptFile ok(good, "good.ckpt");
    CHECK(read_as<float>(ok, "w", DType::f32) == ramps(6));

    expect_error({'n', 'o', 'p', 'e', 0, 0}, "not a PyTorch zip checkpoint");
    expect_error({0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc}, "legacy (pre-1.6) torch.save format");
    // Views outside their storage, storages larger than their entries, missing entries.
    expect_error(make_ckpt(one_tensor_pickle(6, 3, {4}, {1}), {{"0", data}}), "lies outside storage 0 of 6 elements");
    expect_error(make_ckpt(one_tensor_pickle(6, 0, {3, 3}, {3, 1}), {{"0", data}}), "last element 8");
    expect_error(make_ckpt(one_tensor_pickle(6, -1, {1}, {1}), {{"0", data}}), "negative or overflowing");
    expect_error(make_ckpt(one_tensor_pickle(6, 0, {2, 2}, {-1, 1}), {{"0", data}}), "negative or overflowing");
    expect_error(make_ckpt(one_tensor_pickle(6, 0, {1 << 30, 1 << 30, 1 << 30}, {1, 1, 1}), {{"0", data}}),
                 "negative or overflowing");
    expect_error(make_ckpt(one_tensor_pickle(7, 0, {6}, {1}), {{"0", data}}),
                 "storage 0 declares 7 F32 elements but its entry holds 24 bytes");
    // Views that repeat one element (stride 0, as expand() makes) have no byte bound from the
    // file: 2^62 elements would make an element count x 4 wrap to a 0-byte buffer.
    const int64_t big = int64_t(1) << 31;
    expect_error(make_ckpt(one_tensor_pickle(6, 0, {big, big}, {0, 0}), {{"0", data}}),
                 "tensor 'w' (a view of storage 0): 4611686018427387904 elements of 8 bytes exceed 2^63 bytes");
    expect_error(make_ckpt(one_tensor_pickle(6, 0, {3, 2}, {INT64_MAX, 1}), {{"0", data}}), "negative or overflowing");
    expect_error(make_ckpt(one_tensor_pickle(6, INT64_MAX, {1}, {1}), {{"0", data}}), "lies outside storage");
    {
        CkptFile wide(make_ckpt(one_tensor_pickle(6, 5, {int64_t(1) << 29, int64_t(1) << 29}, {0, 0}), {{"0", data}}),
                      "wide.ckpt");
        CHECK(wide.info("w").numel() == int64_t(1) << 58);
        CHECK(wide.info("w").nbytes() == size_t(1) << 60);  // listed; reading it is the caller's allocation
        const std::vector<float> some = read_as<float>(CkptFile(make_ckpt(one_tensor_pickle(6, 5, {3, 2}, {0, 0}),
                                                                          {{"0", data}}), "small.ckpt"), "w", DType::f32);
        CHECK(some == std::vector<float>(6, ramp(5)));
    }
    expect_error(make_ckpt(one_tensor_pickle(6, 0, {6}, {1}), {{"1", data}}), "storage 0 has no entry archive/data/0");
    expect_error(make_ckpt(one_tensor_pickle(6, 0, {6}, {1}), {{"0", data, 8}}),
                 "entry archive/data/0 is compressed (method 8)");

    // Code execution attempts and things a state dict never holds.
    Pickle sys;
    sys.raw({'}', '('}).str("w").global("os", "system").str("echo pwned").raw({0x85, 'R', 'u', '.'});
    expect_error(make_ckpt(sys.b, {}), "refusing to unpickle GLOBAL os.system");
    Pickle eval;
    eval.str("builtins").str("eval").raw({0x93});
    expect_error(make_ckpt(eval.b, {}), "refusing to unpickle GLOBAL builtins.eval");
    Pickle storage_call;
    storage_call.global("torch", "FloatStorage").raw({')', 'R', '.'});
    expect_error(make_ckpt(storage_call.b, {}), "refusing to call torch.FloatStorage");
    Pickle inst;
    inst.raw({'(', 'i'});
    expect_error(make_ckpt(inst.b, {}), "unsupported pickle opcode 0x69");
    Pickle get;
    get.raw({'h', 7});
    expect_error(make_ckpt(get.b, {}), "GET of a memo slot never PUT");
    Pickle list;
    list.raw({']', '.'});
    expect_error(make_ckpt(list.b, {}), "does not hold a dict");
    Pickle under;
    under.raw({'R'});
    expect_error(make_ckpt(under.b, {}), "stack underflow");
    Pickle longstr;
    longstr.raw({'X', 0xff, 0xff, 0xff, 0x7f});
    expect_error(make_ckpt(longstr.b, {}), "runs past the end of the pickle");

    // Nesting bombs: 100 nested lists, 100 open MARKs.
    Pickle deep;
    for (int i = 0; i < 100; i++) deep.raw({']'});
    for (int i = 0; i < 99; i++) deep.raw({'a'});
    expect_error(make_ckpt(deep.b, {}), "containers nest deeper than 64");
    Pickle marks;
    for (int i = 0; i < 100; i++) marks.raw({'('});
    expect_error(make_ckpt(marks.b, {}), "more than 64 open MARKs");
    // A list that contains itself is only a cycle in an arena, not a crash.
    Pickle cycle;
    cycle.raw({'}', ']', 'q', 0, 'h', 0, 'a', '0', '.'});
    CHECK(CkptFile(make_ckpt(cycle.b, {}), "cycle.ckpt").list().empty());

    // Damage to the archive itself.
    std::vector<uint8_t> crc = good;
    crc[30 + std::strlen("archive/data.pkl") + 5] ^= 1;  // a byte inside data.pkl
    expect_error(crc, "entry archive/data.pkl is corrupt (CRC-32");
    std::vector<uint8_t> truncated(good.begin(), good.end() - 30);
    expect_error(truncated, "truncated");
}

// Truncation at every length, and random mutations of the pickle (re-zipped with a valid CRC
// so they reach the unpickler): every outcome is gl::Error or a file whose tensors all read.
TEST_CASE("torch_ckpt fuzz: truncations and mutated pickles are refused cleanly or read in bounds") {
    const std::vector<uint8_t> seed = file_bytes(golden("views.ckpt"));
    int accepted = 0, rejected = 0;
    auto attempt = [&](std::vector<uint8_t> bytes) {
        try {
            CkptFile f(std::move(bytes), "fuzz.ckpt");
            for (const TensorInfo& t : f.list()) {
                if (t.nbytes() > (size_t(64) << 20)) continue;  // a valid stride-0 view too large to read here
                std::vector<uint8_t> dst(t.nbytes() + 1, 0xAB);
                f.read(t.name, dst.data(), t.dtype);
                CHECK(dst.back() == 0xAB);
            }
            accepted++;
        } catch (const Error&) {
            rejected++;
        }
    };
    for (size_t n = 0; n < seed.size(); n++) attempt(std::vector<uint8_t>(seed.begin(), seed.begin() + long(n)));
    CHECK(accepted == 0);

    ZipIndex zip(seed.data(), seed.size(), "views.ckpt");
    std::vector<ZipItem> items;
    size_t pkl = 0;
    for (const ZipEntry& e : zip.entries()) {
        if (e.name.size() > 8 && e.name.compare(e.name.size() - 8, 8, "data.pkl") == 0) pkl = items.size();
        items.push_back({e.name, std::vector<uint8_t>(seed.begin() + long(e.offset), seed.begin() + long(e.offset + e.size))});
    }
    const std::vector<uint8_t> original = items[pkl].data;
    std::mt19937_64 rng(7);
    const int kIterations = fuzz_iterations(3000);
    for (int it = 0; it < kIterations; it++) {
        std::vector<uint8_t>& p = items[pkl].data;
        p = original;
        for (int k = 0, edits = 1 + int(rng() % 3); k < edits && !p.empty(); k++) {
            size_t at = rng() % p.size();
            switch (rng() % 4) {
                case 0: p[at] = uint8_t(rng()); break;
                case 1: p[at] ^= uint8_t(1u << (rng() % 8)); break;
                case 2: p.erase(p.begin() + long(at), p.begin() + long(std::min(p.size(), at + 1 + rng() % 8))); break;
                case 3: {  // splice in a copy of another stretch of the pickle
                    size_t from = rng() % p.size(), len = std::min<size_t>(1 + rng() % 16, p.size() - from);
                    std::vector<uint8_t> piece(p.begin() + long(from), p.begin() + long(from + len));
                    p.insert(p.begin() + long(at), piece.begin(), piece.end());
                    break;
                }
            }
        }
        attempt(make_zip(items));
    }
    MESSAGE("ckpt fuzz: ", seed.size(), " truncations and ", kIterations, " pickle mutants; ", accepted, " accepted, ",
            rejected, " rejected");

    // Views with extreme sizes, strides and offsets (overflow, stride 0, near INT64_MAX): each is
    // refused naming the file, or lists a byte size that fits and reads in bounds.
    const std::vector<int64_t> extremes = {0, 1, 2, 5, 6, (int64_t(1) << 29), (int64_t(1) << 31) - 1,
                                           int64_t(1) << 31, int64_t(1) << 32, int64_t(1) << 61, int64_t(1) << 62,
                                           INT64_MAX, -1, INT64_MIN};
    const std::vector<uint8_t> data = f32_bytes(ramps(6));
    int views = 0;
    for (int it = 0; it < kIterations; it++) {
        const size_t rank = 1 + rng() % 3;
        std::vector<int64_t> size(rank), stride(rank);
        for (size_t d = 0; d < rank; d++) {
            size[d] = extremes[rng() % extremes.size()];
            stride[d] = extremes[rng() % extremes.size()];
        }
        const int64_t offset = extremes[rng() % extremes.size()];
        const std::vector<uint8_t> b = make_ckpt(one_tensor_pickle(6, offset, size, stride), {{"0", data}});
        const std::string e = error_of([&] { attempt(b); });
        CHECK_MESSAGE(e == "(no error)", e);  // attempt() catches gl::Error itself; anything else is a defect
        views++;
    }
    MESSAGE("ckpt fuzz: ", views, " extreme views; ", accepted, " accepted, ", rejected, " rejected in all");
}
