// kohya's latent cache files: the .npz reader (data/npz.h) on files numpy wrote (stored members with
// numpy's zip64 local headers, deflated members) and on damaged ones, read_kohya_npz's rule on a
// file kohya's own caching code wrote (tests/golden/make_kohya_npz.py: a tiny AutoencoderKL), and
// cache_latents reusing it beside its image instead of encoding (the npz left as it was), or
// ignoring it with the reason when it does not match or is damaged.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/latent_cache.h"
#include "data/npz.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

namespace fs = std::filesystem;

namespace {

std::string npz_golden(const std::string& name) {
    const std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/kohya/npz/" + name;
}

// expected.txt: latents then latents_flipped as [h][w][c] (2 x 4 x 4 each), original_size, crop_ltrb.
struct Expected {
    std::vector<float> latents, flipped;
    std::vector<int64_t> original_size;
};
Expected expected() {
    std::ifstream in(npz_golden("expected.txt"));
    REQUIRE(in);
    Expected e;
    for (int i = 0; i < 64; i++) {
        float v;
        REQUIRE(static_cast<bool>(in >> v));
        (i < 32 ? e.latents : e.flipped).push_back(v);
    }
    int64_t w, h;
    REQUIRE(static_cast<bool>(in >> w >> h));
    e.original_size = {w, h};
    return e;
}

std::string bytes_of(const fs::path& p) { return gl::io::read_small_file(p.string()); }
void write_bytes(const fs::path& p, const std::string& b) { std::ofstream(p, std::ios::binary) << b; }

// Latents at 1/8 like the SD VAE's; counts the images it is given.
class Stride8Encoder : public data::ImageEncoder {
public:
    std::string identity() const override { return "stride8"; }
    data::LatentSpec latent_spec() const override { return {4, 8, 0.5f, 0.25f}; }
    std::vector<float> encode(const void*, gl::DType, const data::EncoderShape& s, std::span<const float>) override {
        images += size_t(s.batch);
        return std::vector<float>(size_t(s.batch) * size_t(s.height / 8) * size_t(s.width / 8) * 4, 7.0f);
    }
    void release() override {}
    size_t images = 0;
};

// img.png (72x32) in a folder, at resolution 32x16 (resized 36x16, centre crop), with flip_aug.
struct Folder {
    fs::path root = fs::temp_directory_path() / ("gl_npz_" + std::to_string(getpid()));
    fs::path image = root / "img" / "1_x" / "img.png";
    fs::path npz = root / "img" / "1_x" / "img_0072x0032_sd.npz";
    data::Dataset ds;
    data::BucketAssignment buckets;
    explicit Folder(const std::string& npz_file = "img_0072x0032_sd.npz", std::array<int64_t, 2> reso = {32, 16},
                    bool flip = true) {
        fs::create_directories(image.parent_path());
        fs::copy_file(npz_golden("img.png"), image);
        if (!npz_file.empty()) fs::copy_file(npz_golden(npz_file), npz);
        std::vector<std::string> w;
        data::ConfigLevel cli = {{"resolution", reso}, {"flip_aug", flip}};
        ds = data::build_dataset(data::folder_dataset_config(root / "img", std::nullopt, cli, w));
        buckets = data::assign_buckets(ds);
    }
    data::CacheReport run(Stride8Encoder& enc, data::LatentCache& cache, bool kohya = true) {
        data::CacheOptions o;
        o.kohya_npz = kohya;
        o.threads = 2;
        return data::cache_latents(ds, buckets, cache, enc, o);
    }
    ~Folder() { fs::remove_all(root); }
};

}  // namespace

TEST_CASE("data npz: numpy's stored and deflated archives read back as kohya wrote them") {
    const Expected ex = expected();
    for (const char* file : {"img_0072x0032_sd.npz", "deflated_sd.npz"}) {
        CAPTURE(file);
        const data::NpzFile f(npz_golden(file));
        CHECK(f.names() == std::vector<std::string>{"crop_ltrb", "latents", "latents_flipped", "original_size"});
        const data::NpyArray l = f.array("latents");
        CHECK(l.kind == 'f');
        CHECK(l.itemsize == 4);
        CHECK(l.shape == std::vector<int64_t>{4, 2, 4});
        const std::vector<float> v = l.to_float();
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < 8; i++) CHECK(v[size_t(c * 8 + i)] == ex.latents[size_t(i * 4 + c)]);
        const data::NpyArray size = f.array("original_size");
        CHECK(size.kind == 'i');
        CHECK(size.itemsize == 8);
        CHECK(size.to_int() == ex.original_size);
        CHECK(f.array("crop_ltrb").to_int() == std::vector<int64_t>{0, 0, 32, 14});  // kohya's f8 values
        CHECK_THROWS_WITH_AS(f.array("alpha_mask"), doctest::Contains("no array 'alpha_mask'"), gl::Error);
    }
}

TEST_CASE("data npz: damaged archives and arrays are refused with the reason") {
    const fs::path dir = fs::temp_directory_path() / ("gl_npz_bad_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const std::string good = bytes_of(npz_golden("img_0072x0032_sd.npz"));
    const std::string deflated = bytes_of(npz_golden("deflated_sd.npz"));
    auto open_and_read = [&](const std::string& bytes) {
        write_bytes(dir / "x.npz", bytes);
        const data::NpzFile f(dir / "x.npz");
        for (const std::string& n : f.names()) f.array(n);
    };
    CHECK_NOTHROW(open_and_read(good));
    std::string b = good;
    b[200] ^= 0x40;  // inside latents.npy's data
    CHECK_THROWS_WITH_AS(open_and_read(b), doctest::Contains("CRC-32 mismatch"), gl::Error);
    b = deflated;
    b[120] ^= 0x55;  // inside the first deflate stream
    CHECK_THROWS_AS(open_and_read(b), gl::Error);
    b = deflated;  // the first central directory entry's uncompressed size: 2^31 - 1
    const size_t cd = b.find(std::string("PK\x01\x02", 4));
    REQUIRE(cd != std::string::npos);
    b.replace(cd + 24, 4, std::string("\xff\xff\xff\x7f", 4));
    CHECK_THROWS_WITH_AS(open_and_read(b), doctest::Contains("claims an impossible size"), gl::Error);
    CHECK_THROWS_WITH_AS(open_and_read(good.substr(0, good.size() - 30)), doctest::Contains("not a zip archive"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(open_and_read(""), doctest::Contains("not a zip archive"), gl::Error);
    CHECK_THROWS_AS(open_and_read(good.substr(0, 900) + good.substr(good.size() - 400)), gl::Error);  // a hole
    fs::remove_all(dir);

    auto npy = [](const std::string& header, size_t data_bytes) {
        std::string s = std::string("\x93NUMPY\x01\x00", 8);
        s += char(header.size() & 0xff);
        s += char(header.size() >> 8);
        s += header;
        s += std::string(data_bytes, '\0');
        return data::parse_npy(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "a.npy");
    };
    CHECK(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24).count() == 6);
    CHECK(npy("{'descr': '<f2', 'fortran_order': False, 'shape': (), }", 2).count() == 1);
    CHECK_THROWS_WITH_AS(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20),
                         doctest::Contains("20 data bytes for 6 values"), gl::Error);
    CHECK_THROWS_WITH_AS(npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4),
                         doctest::Contains("little-endian"), gl::Error);
    CHECK_THROWS_WITH_AS(npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8),
                         doctest::Contains("not supported"), gl::Error);
    CHECK_THROWS_WITH_AS(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 4),
                         doctest::Contains("Fortran"), gl::Error);
    CHECK_THROWS_WITH_AS(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", 4),
                         doctest::Contains("overflows"), gl::Error);
    CHECK_THROWS_WITH_AS(npy("{'descr': '<f4', 'shape': (1,), }", 4), doctest::Contains("missing"), gl::Error);
    CHECK_THROWS_WITH_AS(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4),
                         doctest::Contains("unexpected key"), gl::Error);
}

TEST_CASE("data npz: kohya's file matches by kohya's rule and gives its sample as the encoder's latents") {
    const Expected ex = expected();
    const data::LatentSpec spec{4, 8, 0.18215f, 0.0f};
    std::string why;
    const auto k = data::read_kohya_npz(npz_golden("img_0072x0032_sd.npz"), {{32, 16}, 72, 32, true, false}, spec, &why);
    REQUIRE_MESSAGE(k.has_value(), why);
    CHECK(k->latents.height == 2);
    CHECK(k->latents.width == 4);
    CHECK(k->latents.channels == 4);
    REQUIRE(k->flipped.has_value());
    for (size_t i = 0; i < 32; i++) {
        CHECK(k->latents.data[i] == ex.latents[i] * 0.18215f);
        CHECK(k->flipped->data[i] == ex.flipped[i] * 0.18215f);
    }
    // Not flipping: the mirror is not needed, and not given.
    const auto plain = data::read_kohya_npz(npz_golden("noflip_sd.npz"), {{32, 16}, 72, 32, false, false}, spec, &why);
    REQUIRE(plain.has_value());
    CHECK(!plain->flipped);
    CHECK(plain->latents.data == k->latents.data);

    struct Bad {
        std::string file;
        data::KohyaNpzExpect expect;
        data::LatentSpec spec;
        std::string why;
    };
    const Bad bad[] = {
        {"noflip_sd.npz", {{32, 16}, 72, 32, true, false}, spec, "no 'latents_flipped'"},
        {"img_0072x0032_sd.npz", {{32, 16}, 72, 32, false, true}, spec, "no 'alpha_mask'"},
        {"img_0072x0032_sd.npz", {{32, 24}, 72, 32, true, false}, spec, "the bucket 32x24 needs float [4, 3, 4]"},
        {"img_0072x0032_sd.npz", {{32, 16}, 72, 33, true, false}, spec, "original_size is not the image's 72x33"},
        {"img_0072x0032_sd.npz", {{32, 16}, 72, 32, true, false}, {8, 8, 1, 0}, "needs float [8, 2, 4]"},
        {"img_0072x0032_sd.npz", {{32, 16}, 72, 32, true, false}, {4, 4, 1, 0}, "1/4 of the image"},
        {"intlatents_sd.npz", {{32, 16}, 72, 32, true, false}, spec, "'latents' is not float"},
        {"missing_sd.npz", {{32, 16}, 72, 32, true, false}, spec, "missing_sd.npz"},
    };
    for (const Bad& b : bad) {
        CAPTURE(b.why);
        why.clear();
        CHECK(!data::read_kohya_npz(npz_golden(b.file), b.expect, b.spec, &why));
        CHECK(why.find(b.why) != std::string::npos);
    }
}

TEST_CASE("data npz: the kohya file's name beside its image") {
    const fs::path root = fs::temp_directory_path() / ("gl_npz_name_" + std::to_string(getpid()));
    fs::create_directories(root);
    CHECK(data::kohya_npz_path(root / "a.b.png", 72, 1024) == root / "a.b_0072x1024_sd.npz");
    CHECK(data::kohya_npz_path(root / "a.png", 12345, 7) == root / "a_12345x0007_sd.npz");
    write_bytes(root / "a.npz", "");  // kohya's older name wins when it exists
    CHECK(data::kohya_npz_path(root / "a.png", 72, 32) == root / "a.npz");
    fs::remove_all(root);
}

TEST_CASE("data npz: cache_latents reuses a matching kohya file instead of encoding, and never writes it") {
    const Expected ex = expected();
    Folder f;
    const std::string before = bytes_of(f.npz);
    Stride8Encoder enc;
    const fs::path dir = f.root / "cache";
    data::LatentCache cache(dir);
    const data::CacheReport r = f.run(enc, cache);
    CHECK(r.total == 2);
    CHECK(r.hits == 2);
    CHECK(r.kohya_reused == 2);
    CHECK(r.encoded == 0);
    CHECK(r.kohya_ignored.empty());
    CHECK(enc.images == 0);
    for (int flip = 0; flip < 2; flip++) {
        const std::string& key = r.keys[size_t(flip)];
        REQUIRE(!key.empty());
        const data::Latent l = *cache.get(key);
        REQUIRE(l.data.size() == 32);
        for (size_t i = 0; i < 32; i++) CHECK(l.data[i] == ((flip ? ex.flipped : ex.latents)[i] - 0.25f) * 0.5f);
        CHECK(!fs::exists(*cache.file_of(key)));  // kept in RAM: the npz stays the copy on disk
    }
    CHECK(bytes_of(f.npz) == before);

    // Off (no --cache_latents_to_disk): encoded.
    Stride8Encoder enc2;
    data::LatentCache ram;
    const data::CacheReport off = f.run(enc2, ram, false);
    CHECK(off.encoded == 2);
    CHECK(off.kohya_reused == 0);
    CHECK(enc2.images == 2);
}

TEST_CASE("data npz: a kohya file that does not match or is damaged is ignored with the reason") {
    struct Case {
        std::string file;
        std::array<int64_t, 2> reso;
        bool flip;
        std::string why;
        bool corrupt = false;
    };
    const Case cases[] = {
        {"noflip_sd.npz", {32, 16}, true, "no 'latents_flipped'"},
        {"img_0072x0032_sd.npz", {32, 32}, true, "the bucket 32x32 needs float [4, 4, 4]"},
        {"intlatents_sd.npz", {32, 16}, false, "is not float"},
        {"img_0072x0032_sd.npz", {32, 16}, true, "CRC-32 mismatch", true},
    };
    for (const Case& c : cases) {
        CAPTURE(c.why);
        Folder f(c.file, c.reso, c.flip);
        if (c.corrupt) {
            std::string b = bytes_of(f.npz);
            b[200] ^= 0x40;
            write_bytes(f.npz, b);
        }
        const std::string before = bytes_of(f.npz);
        Stride8Encoder enc;
        data::LatentCache cache(f.root / "cache");
        const data::CacheReport r = f.run(enc, cache);
        CHECK(r.kohya_reused == 0);
        CHECK(r.encoded == r.total);
        CHECK(enc.images == r.total);
        REQUIRE(r.kohya_ignored.size() == 1);
        CHECK(r.kohya_ignored[0].rfind(f.npz.string() + ": ", 0) == 0);
        CHECK(r.kohya_ignored[0].find(c.why) != std::string::npos);
        CHECK(bytes_of(f.npz) == before);
    }
    // No file beside the image: nothing to report.
    Folder none("");
    Stride8Encoder enc;
    data::LatentCache cache(none.root / "cache");
    const data::CacheReport r = none.run(enc, cache);
    CHECK(r.encoded == 2);
    CHECK(r.kohya_ignored.empty());
}
