// Image decoding (data/image.h) against Pillow's view of the same files
// (tests/golden/data/dataset/images/, made by make_data_images.py), and the corrupt corpus.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "data/image.h"
#include "test_util.h"

namespace {

std::string images_dir() {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/dataset/images/";
}

int max_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    REQUIRE(a.size() == b.size());
    int m = 0;
    for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
    return m;
}

}  // namespace

TEST_CASE("data image: every layout decodes as Pillow shows it") {
    // Tolerance 0 everywhere: JPEG goes through libjpeg-turbo with Pillow's settings, WebP through
    // libwebp as in Pillow, and PNG / BMP are lossless.
    const char* names[] = {"rgb.png",      "rgba.png",    "grey.png",        "grey_alpha.png", "palette.png",
                           "rgb16.png",    "grey16.png",  "rgb.bmp",         "lossless.webp",  "alpha.webp",
                           "lossy.webp",   "1x1.png",     "rgb.jpg",         "rgb_q70.jpeg",   "progressive.jpg",
                           "grey.jpg",     "cmyk.jpg",    "orient1.jpg",     "orient2.jpg",    "orient3.jpg",
                           "orient4.jpg",  "orient5.jpg", "orient6.jpg",     "orient7.jpg",    "orient8.jpg"};
    for (const std::string name : names) {
        CAPTURE(name);
        const data::Image got = data::load_image(images_dir() + "ok/" + name);
        const data::Image want = data::load_image(images_dir() + "ok/" + name + ".ref.png");
        CHECK(got.width == want.width);
        CHECK(got.height == want.height);
        CHECK(got.alpha.empty());
        CHECK(max_abs_diff(got.rgb, want.rgb) == 0);
    }
}

TEST_CASE("data image: EXIF orientation gives the displayed size, the header agrees with the pixels") {
    for (int o = 1; o <= 8; o++) {
        CAPTURE(o);
        const std::vector<uint8_t> bytes = data::read_file_bytes(images_dir() + "ok/orient" + std::to_string(o) + ".jpg");
        CHECK(data::jpeg_exif_orientation(bytes.data(), bytes.size()) == o);
        const data::ImageHeader h = data::read_image_header(bytes.data(), bytes.size(), "x.jpg");
        CHECK(h.orientation == o);
        CHECK(h.width == (o >= 5 ? 16 : 24));
        CHECK(h.height == (o >= 5 ? 24 : 16));
        const data::Image img = data::decode_image(bytes.data(), bytes.size(), "x.jpg");
        CHECK(img.width == h.width);
        CHECK(img.height == h.height);
    }
    // apply_orientation on a 3x2 picture of distinct values, each case written out by hand.
    const std::vector<uint8_t> px = {1, 2, 3, 4, 5, 6};  // rows {1 2 3} {4 5 6}
    const std::vector<std::vector<uint8_t>> want = {
        {1, 2, 3, 4, 5, 6}, {3, 2, 1, 6, 5, 4}, {6, 5, 4, 3, 2, 1}, {4, 5, 6, 1, 2, 3},
        {1, 4, 2, 5, 3, 6}, {4, 1, 5, 2, 6, 3}, {6, 3, 5, 2, 4, 1}, {3, 6, 2, 5, 1, 4}};
    for (int o = 1; o <= 8; o++) CHECK(data::apply_orientation(px, 3, 2, 1, o) == want[size_t(o - 1)]);
}

TEST_CASE("data image: alpha kept as a mask on request, 255 where the file has none") {
    data::DecodeOptions opt;
    opt.alpha = data::AlphaMode::mask;
    for (const char* name : {"rgba.png", "alpha.webp"}) {
        CAPTURE(name);
        const data::Image got = data::load_image(images_dir() + "ok/" + name, opt);
        const data::Image alpha = data::load_image(images_dir() + "ok/" + name + ".alpha.png");
        const data::Image rgb = data::load_image(images_dir() + "ok/rgb.png");
        REQUIRE(got.alpha.size() == size_t(got.width) * got.height);
        for (size_t i = 0; i < got.alpha.size(); i++) REQUIRE(got.alpha[i] == alpha.rgb[i * 3]);
        CHECK(got.rgb == rgb.rgb);  // the colours as stored, not composited
    }
    const data::Image opaque = data::load_image(images_dir() + "ok/rgb.jpg", opt);
    CHECK(opaque.alpha == std::vector<uint8_t>(size_t(24) * 16, 255));
}

TEST_CASE("data image: extreme sizes decode, max_pixels refuses before decoding") {
    const data::Image wide = data::load_image(images_dir() + "ok/10000x10.png");
    CHECK(wide.width == 10000);
    CHECK(wide.height == 10);
    const data::Image one = data::load_image(images_dir() + "ok/1x1.png");
    CHECK(one.rgb.size() == 3);
    data::DecodeOptions small;
    small.max_pixels = 50000;
    CHECK(gltest::error_of([&] { data::load_image(images_dir() + "ok/10000x10.png", small); })
              .find("too large: 10000x10 is more than 50000 pixels") != std::string::npos);
}

TEST_CASE("data image: the corrupt corpus is refused with the path and the reason") {
    const std::map<std::string, std::string> reason = {
        {"empty.png", "empty file (0 bytes)"},
        {"truncated.png", "truncated PNG (no IEND chunk"},
        {"corrupt_data.png", "corrupt or truncated PNG data ("},
        {"truncated.jpg", "truncated JPEG (no end-of-image marker"},
        {"truncated.bmp", "truncated BMP ("},
        {"truncated.webp", "truncated WebP ("},
        {"png_named.jpg", "wrong extension: the file holds PNG data"},
        {"text.png", "not a PNG, JPEG, BMP or WebP image"},
        {"bad_header.png", "corrupt PNG header ("},
        {"huge_claim.png", "too large: 100000x100000"},
        {"missing.png", "cannot open: No such file or directory"},
    };
    for (const auto& [name, why] : reason) {
        CAPTURE(name);
        const std::string path = images_dir() + "bad/" + name;
        try {
            data::load_image(path);
            FAIL("no error");
        } catch (const data::ImageError& e) {
            CHECK(e.path() == path);
            CHECK_MESSAGE(e.reason().find(why) == 0, e.reason());
            CHECK(std::string(e.what()).find(path + ": ") == 0);
        }
    }
}

namespace {

// The reason verify_image and decode_image give for a file whose header reads well (checked), or
// "(accepted)"; the two must agree.
std::string data_reason(const std::string& name) {
    const std::string path = images_dir() + "bad/" + name;
    const std::vector<uint8_t> bytes = data::read_file_bytes(path);
    data::read_image_header(bytes.data(), bytes.size(), path);  // the header alone finds nothing
    std::string verified = "(accepted)", decoded = "(accepted)";
    try {
        data::verify_image(bytes.data(), bytes.size(), path);
    } catch (const data::ImageError& e) {
        CHECK(e.path() == path);
        verified = e.reason();
    }
    try {
        data::decode_image(bytes.data(), bytes.size(), path);
    } catch (const data::ImageError& e) {
        decoded = e.reason();
    }
    CHECK(verified == decoded);  // one rule for the dataset's check and the caches' decode
    return verified;
}

}  // namespace

TEST_CASE("data image: damaged PNG data is refused by the check and the decode alike") {
    const std::map<std::string, std::string> reason = {
        {"png_idat_not_zlib.png", "corrupt or truncated PNG data (libpng: IDAT: incorrect header check)"},
        {"png_short_idat.png", "corrupt or truncated PNG data (libpng: Not enough image data)"},
        {"png_filter7.png", "corrupt or truncated PNG data (libpng: bad adaptive filter value)"},
        {"png_zlib_checksum.png", "corrupt or truncated PNG data (libpng: IDAT: incorrect data check)"},
        {"png_chunk_length_2g.png", "corrupt or truncated PNG data (libpng: PNG unsigned integer out of range)"},
        {"png_bad_idat_crc.png", "corrupt or truncated PNG data (libpng: IDAT: CRC error)"},
    };
    for (const auto& [name, why] : reason) {
        CAPTURE(name);
        CHECK(data_reason(name) == why);
    }
    // A CRC error before the image data is found by the header read already (it reads those chunks).
    CHECK(gltest::error_of([] { data::load_image(images_dir() + "bad/png_bad_text_crc.png"); })
              .find("corrupt PNG header (libpng: tEXt: CRC error)") != std::string::npos);
}

TEST_CASE("data image: damaged JPEG scan data is refused, not filled with grey") {
    CHECK(data_reason("jpeg_corrupt_scan.jpg").find("corrupt JPEG data (libjpeg: Corrupt JPEG data: ") == 0);
    CHECK(data_reason("jpeg_scan_cut.jpg") ==
          "corrupt JPEG data (libjpeg: Corrupt JPEG data: premature end of data segment)");
}

TEST_CASE("data image: a WebP canvas without an image and a 7-bit BMP are refused") {
    CHECK(data_reason("webp_vp8x_no_image.webp").find("corrupt or truncated WebP data (libwebp: ") == 0);
    // stb_image reads this header and fails at the pixels with "invalid": the depth is checked first.
    CHECK(gltest::error_of([] { data::load_image(images_dir() + "bad/bmp_7bpp.bmp"); })
              .find("bmp_7bpp.bmp: unsupported BMP bit depth 7 (1, 4, 8, 16, 24 or 32)") != std::string::npos);
}

TEST_CASE("data image: every readable layout passes the check, with the header's size") {
    for (const auto& e : std::filesystem::directory_iterator(images_dir() + "ok")) {
        const std::string path = e.path().string();
        CAPTURE(path);
        const std::vector<uint8_t> bytes = data::read_file_bytes(path);
        const data::ImageHeader v = data::verify_image(bytes.data(), bytes.size(), path);
        const data::ImageHeader h = data::read_image_header(bytes.data(), bytes.size(), path);
        CHECK(v.width == h.width);
        CHECK(v.height == h.height);
        CHECK(v.format == h.format);
    }
}

TEST_CASE("data image: a FIFO, a folder and an unreadable file are refused by type or the system's reason") {
    gltest::TempDir dir;
    const std::string fifo = dir / "pipe.png";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    // No writer ever opens the FIFO: a blocking open would wait forever (the test's timeout).
    CHECK(gltest::error_of([&] { data::read_file_bytes(fifo); }) ==
          fifo + ": is a FIFO (named pipe), not a regular file");
    std::filesystem::create_directories(dir / "folder.png");
    CHECK(gltest::error_of([&] { data::load_image(dir / "folder.png"); }) ==
          dir / "folder.png" + ": is a directory, not a regular file");

    // Permissions: root reads any file, so the read runs in a child that gave up root first.
    const std::string locked = dir / "locked.png";
    std::filesystem::copy_file(images_dir() + "ok/rgb.png", locked);
    REQUIRE(::chmod(locked.c_str(), 0) == 0);
    REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);
    int out[2];
    REQUIRE(::pipe(out) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(out[0]);
        std::string reason = "(could not drop root)";
        if (::geteuid() != 0 || (::setgid(65534) == 0 && ::setuid(65534) == 0)) {
            try {
                data::read_file_bytes(locked);
                reason = "(read)";
            } catch (const data::ImageError& e) {
                reason = e.reason();
            }
        }
        (void)!::write(out[1], reason.data(), reason.size());
        ::_exit(0);
    }
    ::close(out[1]);
    std::string reason;
    char buf[256];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) reason.append(buf, size_t(n));
    ::close(out[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (reason == "(could not drop root)") MESSAGE("permission case skipped: running as root and setuid failed");
    else CHECK(reason == "cannot open: Permission denied");
}
