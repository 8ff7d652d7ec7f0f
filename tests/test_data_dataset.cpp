// kohya's dataset layouts (data/config.h, data/dataset.h): <repeats>_<name> folders with odd and
// unicode names, regularisation balancing, bad images (headers, damaged data, FIFOs) skipped and
// named or fatal, the skipped list, and the dataset TOML's precedence (subset > dataset >
// [general] > command line > defaults) and refusals.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "data/config.h"
#include "data/dataset.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::string images_dir() {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/dataset/images/";
}

// A scratch folder removed at the end of the test.
struct Scratch {
    fs::path root = fs::temp_directory_path() / ("gl_dataset_" + std::to_string(getpid()));
    Scratch() { fs::create_directories(root); }
    ~Scratch() { fs::remove_all(root); }
    fs::path image(const fs::path& rel, const char* golden = "ok/rgb.png") {
        fs::create_directories((root / rel).parent_path());
        fs::copy_file(images_dir() + golden, root / rel, fs::copy_options::overwrite_existing);
        return root / rel;
    }
    void text(const fs::path& rel, const std::string& s) { std::ofstream(root / rel, std::ios::binary) << s; }
};

}  // namespace

TEST_CASE("data dataset: folder layout, captions, class tokens, bad images, reg balancing") {
    Scratch s;
    s.image("train/10_sks dog/a.png");
    s.image("train/10_sks dog/b b.JPG", "ok/rgb.jpg");
    s.text("train/10_sks dog/a.txt", "a photo of sks dog\nignored second line");
    s.image("train/3_ünï_cödé/猫 1.webp", "ok/lossy.webp");
    s.image("train/3_ünï_cödé/wide.png", "ok/orient6.jpg");  // JPEG data named .png
    s.image("train/3_ünï_cödé/rot.jpg", "ok/orient6.jpg");
    s.text("train/3_ünï_cödé/notes.md", "not an image");
    s.image("train/no_number/x.png");
    s.image("train/0_zero/x.png");
    s.image("train/top.png");
    s.image("reg/1_dog/r1.png");
    s.image("reg/1_dog/r2.png");
    s.image("reg/1_dog/r3.bmp", "ok/rgb.bmp");

    data::ConfigLevel cli = {{"caption_extension", std::string(".txt")}, {"resolution", int64_t(512)}};
    std::vector<std::string> warnings;
    const data::DatasetConfig cfg = data::folder_dataset_config(s.root / "train", s.root / "reg", cli, warnings);
    REQUIRE(warnings.size() == 2);
    CHECK(warnings[0].find("0_zero") != std::string::npos);
    CHECK(warnings[1].find("no_number") != std::string::npos);
    REQUIRE(cfg.subsets.size() == 3);
    CHECK(cfg.subsets[0].num_repeats == 10);
    CHECK(cfg.subsets[0].class_tokens == "sks dog");
    CHECK(cfg.subsets[1].num_repeats == 3);
    CHECK(cfg.subsets[1].class_tokens == "ünï_cödé");  // everything after the first underscore
    CHECK(cfg.subsets[2].is_reg);
    CHECK(cfg.subsets[0].caption.caption_extension == ".txt");

    const data::Dataset ds = data::build_dataset(cfg);
    REQUIRE(ds.skipped.size() == 1);
    CHECK(ds.skipped[0].path.find("wide.png") != std::string::npos);
    CHECK(ds.skipped[0].reason == "wrong extension: the file holds JPEG data");
    CHECK(data::describe_skipped(ds.skipped) ==
          "  " + ds.skipped[0].path + ": wrong extension: the file holds JPEG data\n");
    REQUIRE(ds.images.size() == 7);
    CHECK(ds.images[0].path.filename() == "a.png");
    CHECK(ds.images[0].caption == "a photo of sks dog");
    CHECK(ds.images[1].caption == "sks dog");  // no caption file: the class tokens
    const data::ImageEntry& rot = ds.images[2];
    CHECK(rot.path.filename() == "rot.jpg");
    CHECK(rot.width == 16);  // EXIF orientation 6 swaps the stored 24x16
    CHECK(rot.height == 24);
    CHECK(ds.images[3].path.filename().u8string() == u8"猫 1.webp");
    CHECK(ds.num_train_images == 2 * 10 + 2 * 3);
    CHECK(ds.num_reg_images == 3);
    // 26 training images with repeats: reg repeats grow round by round until they add up to 26.
    CHECK(ds.images[4].num_repeats + ds.images[5].num_repeats + ds.images[6].num_repeats == 26);
    CHECK(ds.images[4].num_repeats == 9);
    CHECK(ds.images[5].num_repeats == 9);
    CHECK(ds.images[6].num_repeats == 8);
    bool listed = false;
    for (const std::string& w : ds.warnings) listed |= w.find("no caption file for 6 images") == 0;
    CHECK(listed);

    CHECK_THROWS_AS(data::build_dataset(cfg, data::BadImagePolicy::fail), data::ImageError);
}

TEST_CASE("data dataset: more reg than train uses a prefix of the reg images, empty datasets are errors") {
    Scratch s;
    s.image("t/1_a/x.png");
    for (int i = 0; i < 4; i++) s.image("r/1_b/r" + std::to_string(i) + ".png");
    std::vector<std::string> w;
    const data::Dataset ds = data::build_dataset(data::folder_dataset_config(s.root / "t", s.root / "r", {}, w));
    REQUIRE(ds.images.size() == 2);  // one train image with one repeat needs one reg image
    CHECK(ds.images[1].is_reg);
    bool warned = false;
    for (const std::string& x : ds.warnings) warned |= x.find("more regularisation images") == 0;
    CHECK(warned);

    s.image("bad/2_x/e.png", "bad/empty.png");
    const std::string err = gltest::error_of(
        [&] { data::build_dataset(data::folder_dataset_config(s.root / "bad", std::nullopt, {}, w)); });
    CHECK(err.find("the dataset has no usable images (1 unreadable, first: ") == 0);
    CHECK(err.find("empty file (0 bytes)") != std::string::npos);
    CHECK(gltest::error_of([&] { data::folder_dataset_config(s.root / "missing", std::nullopt, {}, w); })
              .find("train_data_dir " + (s.root / "missing").string() + ": not a directory") == 0);
}

TEST_CASE("data config: TOML precedence subset > dataset > general > command line > defaults") {
    const std::string toml = R"(
[general]
shuffle_caption = true
caption_extension = ".txt"
keep_tokens = 1
enable_bucket = true

[[datasets]]
resolution = [768, 512]
batch_size = 4
keep_tokens = 2

  [[datasets.subsets]]
  image_dir = "/data/ünï code/img"
  num_repeats = 20
  keep_tokens = 3
  class_tokens = "sks girl"

  [[datasets.subsets]]
  image_dir = 'C:\data\reg'
  is_reg = true
  caption_dropout_rate = 0.1

[[datasets]]
resolution = 640
token_warmup_step = 0.5
  [[datasets.subsets]]
  image_dir = "/x"
  enable_wildcard = true
  token_warmup_min = 3
)";
    const data::ConfigLevel cli = {{"flip_aug", true}, {"batch_size", int64_t(8)}, {"keep_tokens", int64_t(9)}};
    const std::vector<data::DatasetConfig> ds = data::parse_dataset_config(toml, "cfg.toml", cli);
    REQUIRE(ds.size() == 2);
    CHECK(ds[0].width == 768);
    CHECK(ds[0].height == 512);
    CHECK(ds[0].batch_size == 4);  // dataset beats command line
    CHECK(ds[1].batch_size == 8);  // command line beats the default
    CHECK(ds[1].width == 640);
    CHECK(ds[0].enable_bucket);
    CHECK(ds[0].bucket_reso_steps == 64);
    REQUIRE(ds[0].subsets.size() == 2);
    const data::SubsetConfig& a = ds[0].subsets[0];
    CHECK(a.image_dir == fs::path("/data/ünï code/img"));
    CHECK(a.num_repeats == 20);
    CHECK(a.caption.keep_tokens == 3);                    // subset
    CHECK(ds[0].subsets[1].caption.keep_tokens == 2);     // dataset
    CHECK(ds[1].subsets[0].caption.keep_tokens == 1);     // general
    CHECK(a.caption.shuffle_caption);
    CHECK(a.caption.caption_extension == ".txt");
    CHECK(a.class_tokens == "sks girl");
    CHECK(a.flip_aug);  // command line
    CHECK_FALSE(a.random_crop);
    CHECK_FALSE(a.is_reg);
    CHECK(ds[0].subsets[1].is_reg);
    CHECK(ds[0].subsets[1].caption.caption_dropout_rate == doctest::Approx(0.1));
    CHECK(ds[0].subsets[1].num_repeats == 1);
    CHECK(ds[1].subsets[0].caption.caption_extension == ".txt");
    CHECK(ds[1].subsets[0].caption.enable_wildcard);
    CHECK(ds[1].subsets[0].caption.token_warmup_min == 3);
    CHECK(ds[1].subsets[0].caption.token_warmup_step == 0.5);  // the dataset's, for its subsets
    CHECK_FALSE(a.caption.enable_wildcard);
    CHECK(a.caption.token_warmup_min == 1);  // kohya's defaults
    CHECK(a.caption.token_warmup_step == 0);
}

TEST_CASE("data config: refusals name the file, table and key") {
    auto err = [](const std::string& toml) {
        return gltest::error_of([&] { data::parse_dataset_config(toml, "c.toml"); });
    };
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\nflip = true\n") ==
          "c.toml [[datasets]] #1 subset #1: unknown key 'flip'");
    CHECK(err("[general]\ncustom_attributes = 1\n[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\n") ==
          "c.toml [general]: 'custom_attributes' is a kohya option that sdtrain does not support (only other "
          "families' trainers read it (Lumina's); kohya's SD1.x training ignores it)");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\ntoken_warmup_step = -2\n")
              .find("token_warmup_step must be a finite number >= 0") != std::string::npos);
    CHECK(err("[general]\nimage_dir = 'x'\n[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\n") ==
          "c.toml [general]: 'image_dir' belongs in a [[datasets.subsets]] table");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\nbatch_size = 2\n") ==
          "c.toml [[datasets]] #1 subset #1: 'batch_size' is a dataset setting, not a subset one");
    CHECK(err("[[datasets]]\nnum_repeats = 'ten'\n[[datasets.subsets]]\nimage_dir='x'\n") ==
          "c.toml [[datasets]] #1: 'num_repeats' must be an integer, got a string");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nnum_repeats = 2\n") ==
          "c.toml [[datasets]] #1 subset #1: 'image_dir' is required");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\ncaption_dropout_rate = 2.0\n")
              .find("caption_dropout_rate must be in [0, 1]") != std::string::npos);
    CHECK(err("[general]\n") == "c.toml: no [[datasets]]");
    CHECK(err("[[datasets]]\nresolution = [1, 2, 3]\n[[datasets.subsets]]\nimage_dir='x'\n") ==
          "c.toml [[datasets]] #1: 'resolution' must be an integer or [width, height], got an array of 3 integers");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir = { path = 'x' }\n") ==
          "c.toml [[datasets]] #1 subset #1: 'image_dir' must be a string, got a table");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\nclass_tokens = 1979-05-27\n") ==
          "c.toml [[datasets]] #1 subset #1: 'class_tokens' must be a string, got a date (1979-05-27)");
    CHECK(err("[[datasets]]\nresolution = []\n[[datasets.subsets]]\nimage_dir='x'\n") ==
          "c.toml [[datasets]] #1: 'resolution' must be an integer or [width, height], got an empty array");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\nflip_aug = [true, 1]\n") ==
          "c.toml [[datasets]] #1 subset #1: 'flip_aug' must be a boolean, got an array of 2 mixed values");
    CHECK(err("[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\nfrobnicate = { a = 1 }\n") ==
          "c.toml [[datasets]] #1 subset #1: unknown key 'frobnicate'");
    CHECK(err("[[datasets]\n").find("c.toml: invalid TOML: ") == 0);
    CHECK(err("[other]\n") == "c.toml: unknown top-level key 'other' (expected [general] and [[datasets]])");
}

TEST_CASE("data dataset: damaged and unreadable files are named and skipped in listing order") {
    Scratch s;
    s.image("t/2_mix/a.png");
    s.image("t/2_mix/b.jpg", "ok/rgb.jpg");
    s.image("t/2_mix/c.jpg", "bad/jpeg_corrupt_scan.jpg");
    s.image("t/2_mix/d.png", "bad/png_filter7.png");
    s.image("t/2_mix/e.bmp", "bad/bmp_7bpp.bmp");
    s.image("t/2_mix/f.webp", "bad/webp_vp8x_no_image.webp");
    REQUIRE(::mkfifo((s.root / "t/2_mix/g.png").c_str(), 0644) == 0);  // never opened for reading: no hang
    fs::create_directories(s.root / "t/2_mix/h.png");                   // a folder is not listed
    std::vector<std::string> w;
    const data::DatasetConfig cfg = data::folder_dataset_config(s.root / "t", std::nullopt, {}, w);
    const data::Dataset ds = data::build_dataset(cfg);
    REQUIRE(ds.images.size() == 2);
    CHECK(ds.images[0].path.filename() == "a.png");
    CHECK(ds.images[1].path.filename() == "b.jpg");
    CHECK(ds.num_train_images == 4);
    const fs::path dir = s.root / "t/2_mix";
    REQUIRE(ds.skipped.size() == 5);
    CHECK(ds.skipped[0].path == (dir / "c.jpg").string());
    CHECK(ds.skipped[0].reason.find("corrupt JPEG data (libjpeg: Corrupt JPEG data: ") == 0);
    CHECK(ds.skipped[1] == data::SkippedImage{(dir / "d.png").string(),
                                              "corrupt or truncated PNG data (libpng: bad adaptive filter value)"});
    CHECK(ds.skipped[2] ==
          data::SkippedImage{(dir / "e.bmp").string(), "unsupported BMP bit depth 7 (1, 4, 8, 16, 24 or 32)"});
    CHECK(ds.skipped[3].path == (dir / "f.webp").string());
    CHECK(ds.skipped[4] == data::SkippedImage{(dir / "g.png").string(), "is a FIFO (named pipe), not a regular file"});
    CHECK(ds.failed_formats.empty());  // every format has a readable file or only one file
    const std::string first = gltest::error_of([&] { data::build_dataset(cfg, data::BadImagePolicy::fail); });
    CHECK(first.find((dir / "c.jpg").string() + ": corrupt JPEG data") == 0);

    // The only image damaged: an error before anything else is read.
    s.image("only/1_x/x.png", "bad/png_short_idat.png");
    CHECK(gltest::error_of([&] {
              data::build_dataset(data::folder_dataset_config(s.root / "only", std::nullopt, {}, w));
          }).find("the dataset has no usable images (1 unreadable, first: ") == 0);
}

TEST_CASE("data dataset: a format none of whose files reads is one line, a reg folder of bad images an error") {
    Scratch s;
    s.image("t/1_a/ok.png");
    for (const char* n : {"p.jpg", "q.jpg", "r.jpg"}) s.image(fs::path("t/1_a") / n, "bad/jpeg_corrupt_scan.jpg");
    s.image("t/1_a/s.jpg", "bad/truncated.jpg");
    std::vector<std::string> w;
    const data::Dataset ds = data::build_dataset(data::folder_dataset_config(s.root / "t", std::nullopt, {}, w));
    REQUIRE(ds.failed_formats.size() == 1);
    CHECK(ds.failed_formats[0] == "every JPEG (4 files) failed: " + ds.skipped[0].reason + " (3 of them)");

    s.image("r/1_reg/x.png", "bad/png_filter7.png");
    s.image("r/1_reg/y.webp", "bad/truncated.webp");
    const std::string err = gltest::error_of(
        [&] { data::build_dataset(data::folder_dataset_config(s.root / "t", s.root / "r", {}, w)); });
    CHECK(err.find("regularisation folder " + (s.root / "r/1_reg").string() + ": none of its 2 images can be read (" +
                   (s.root / "r/1_reg/x.png").string() + ": corrupt or truncated PNG data") == 0);
    // An empty regularisation folder is what kohya warns about and trains without.
    fs::remove(s.root / "r/1_reg/x.png");
    fs::remove(s.root / "r/1_reg/y.webp");
    const data::Dataset no_reg = data::build_dataset(data::folder_dataset_config(s.root / "t", s.root / "r", {}, w));
    CHECK(no_reg.num_reg_images == 0);
}

TEST_CASE("data dataset: the skipped list grouped by reason, the largest group first, cut at a count") {
    const std::vector<data::SkippedImage> k = {
        {"a.png", "too small"}, {"b.jpg", "corrupt"}, {"c.jpg", "corrupt"}, {"d.bmp", "odd"}, {"e.jpg", "corrupt"}};
    CHECK(data::describe_skipped(k) ==
          "  corrupt: 3 files\n    b.jpg\n    c.jpg\n    e.jpg\n  a.png: too small\n  d.bmp: odd\n");
    CHECK(data::describe_skipped(k, 2, "> ") == "> corrupt: 3 files\n>   b.jpg\n>   c.jpg\n> ... and 3 more\n");
    CHECK(data::describe_skipped({}).empty());
    std::vector<data::SkippedImage> all = {{"a.png", "first stage"}};
    data::add_skipped(all, {{"a.png", "later stage"}, {"b.png", "later"}, {"b.png", "again"}});
    CHECK(all == std::vector<data::SkippedImage>{{"a.png", "first stage"}, {"b.png", "later"}});
}

TEST_CASE("data dataset: a subset with an image_dir an earlier subset registered is ignored, as kohya does") {
    Scratch s;
    s.image("a/x.png");
    s.image("a/y.png");
    s.image("b/z.png");
    fs::create_directories(s.root / "empty");
    const std::string a = (s.root / "a").string(), b = (s.root / "b").string(), e = (s.root / "empty").string();
    // An empty folder registers nothing: its second listing is not a duplicate but again empty.
    const std::string toml = "[[datasets]]\n"
                             "  [[datasets.subsets]]\n  image_dir = '" + e + "'\n"
                             "  [[datasets.subsets]]\n  image_dir = '" + a + "'\n  num_repeats = 2\n"
                             "  [[datasets.subsets]]\n  image_dir = '" + b + "'\n"
                             "  [[datasets.subsets]]\n  image_dir = '" + a + "'\n  num_repeats = 7\n"
                             "  [[datasets.subsets]]\n  image_dir = '" + a + "'\n  is_reg = true\n"
                             "  [[datasets.subsets]]\n  image_dir = '" + e + "'\n"
                             "  [[datasets.subsets]]\n  image_dir = '" + a + "/'\n";  // another string: kept
    const std::vector<data::DatasetConfig> cfg = data::parse_dataset_config(toml, "d.toml", {});
    REQUIRE(cfg.size() == 1);
    REQUIRE(cfg[0].subsets.size() == 7);
    const data::Dataset ds = data::build_dataset(cfg[0]);
    int dup = 0, empty = 0;
    for (const std::string& w : ds.warnings) {
        dup += w.find("the same image_dir (kohya uses the first one)") != std::string::npos;
        empty += w.find(": no images found") != std::string::npos;
    }
    CHECK(dup == 2);
    CHECK(empty == 2);
    REQUIRE(ds.images.size() == 5);  // a twice (subsets 1 and 6), b once; no reg
    int from[7] = {};
    for (const data::ImageEntry& im : ds.images) from[im.subset]++;
    CHECK(from[1] == 2);
    CHECK(from[2] == 1);
    CHECK(from[3] == 0);
    CHECK(from[4] == 0);
    CHECK(from[6] == 2);
    CHECK(ds.num_train_images == 2 * 2 + 1 + 2);
    CHECK(ds.num_reg_images == 0);
}
