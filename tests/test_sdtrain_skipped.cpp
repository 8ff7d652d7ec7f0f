// Images a run skips are named, never only counted: a tiny-model run over a dataset with
// undecodable files of several formats and reasons (damaged data, a FIFO, too small for a bucket,
// one damaged after the dataset was read) names each with its reason in the plan, the end
// summary, the report and skipped_images.txt; the plan cuts a long list at 20 and says where the
// rest is; a dataset with no readable image is refused by prepare(), and a run whose every image
// fails to cache is an error, not an untrained LoRA.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "sdtrain_fixtures.h"
#include "tools/sdtrain/console.h"
#include "train/run/recording.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

fs::path bad_image(const std::string& name) { return gltest::golden_dir("dataset") + "images/bad/" + name; }

}  // namespace

TEST_CASE("sdtrain run: every skipped file is named with its reason in the plan, the summary, the report and a file") {
    Scratch s("skipped");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), dir = data / "1_tiny";
    const fs::path out = s.root / "out";
    const std::map<std::string, std::string> damaged = {
        {"scan1.jpg", "jpeg_corrupt_scan.jpg"}, {"scan2.jpg", "jpeg_corrupt_scan.jpg"},
        {"filter.png", "png_filter7.png"},      {"crc.png", "png_bad_idat_crc.png"},
        {"seven.bmp", "bmp_7bpp.bmp"},          {"canvas.webp", "webp_vp8x_no_image.webp"}};
    for (const auto& [name, golden] : damaged) fs::copy_file(bad_image(golden), dir / name);
    REQUIRE(::mkfifo((dir / "pipe.png").c_str(), 0644) == 0);
    write_bmp(dir / "speck.bmp", 4, 4, 7);  // reads well, too small for a bucket
    train::RunConfig c = tiny_config(model, data, out);
    c.max_train_steps = 2;

    std::string screen;
    gl::cli::ProgressOptions po;
    po.tty = false;
    sdtrain::Console con(gl::cli::Progress(po, [&](std::string_view w) { screen += w; }, [] { return 120; },
                                           [] { return 0.0; }));
    train::Session session(c, &con);
    const train::RunPlan& plan = session.prepare();
    const std::string plan_text = plan.text();
    CAPTURE(plan_text);
    CHECK(plan_text.find("  skipped: 8 images\n") != std::string::npos);
    CHECK(plan_text.find("    every JPEG (2 files) failed: corrupt JPEG data (libjpeg: Corrupt JPEG data: ") !=
          std::string::npos);
    CHECK(plan_text.find("    every PNG (3 files) failed, each for its own reason\n") != std::string::npos);
    const std::string scan1_path = (dir / "scan1.jpg").string();
    const auto scan1 = std::find_if(plan.skipped.begin(), plan.skipped.end(),
                                    [&](const data::SkippedImage& k) { return k.path == scan1_path; });
    REQUIRE(scan1 != plan.skipped.end());
    const std::string jpeg_reason = scan1->reason;
    CHECK(plan_text.find("    " + jpeg_reason + ": 2 files\n      " + (dir / "scan1.jpg").string() + "\n      " +
                         (dir / "scan2.jpg").string() + "\n") != std::string::npos);
    const std::vector<std::pair<std::string, std::string>> named = {
        {"filter.png", "corrupt or truncated PNG data (libpng: bad adaptive filter value)"},
        {"crc.png", "corrupt or truncated PNG data (libpng: IDAT: CRC error)"},
        {"seven.bmp", "unsupported BMP bit depth 7 (1, 4, 8, 16, 24 or 32)"},
        {"canvas.webp", "corrupt or truncated WebP data (libwebp: "},
        {"pipe.png", "is a FIFO (named pipe), not a regular file"},
        {"speck.bmp", "4x4 is too small for bucket_reso_steps 8"}};
    for (const auto& [name, why] : named)
        CHECK_MESSAGE(plan_text.find("    " + (dir / name).string() + ": " + why) != std::string::npos, name);
    CHECK(plan.skipped.size() == 8);

    // Damaged after the dataset was read: the cache finds it (once, with the cache's reason,
    // though the loader then misses its latent at every use).
    write_text(dir / "img5.bmp", "BM, not any more");
    const train::RunSummary sum = session.run();
    CHECK(sum.steps == 2);
    REQUIRE(sum.skipped_images.size() == 9);
    CHECK(std::vector<data::SkippedImage>(sum.skipped_images.begin(), sum.skipped_images.begin() + 8) == plan.skipped);
    CHECK(sum.skipped_images[8].path == (dir / "img5.bmp").string());
    CHECK(sum.skipped_images[8].reason.find("corrupt or truncated BMP header") == 0);

    CAPTURE(screen);
    const size_t end = screen.find("9 images skipped (reading the dataset, buckets, caching, loading):\n");
    REQUIRE(end != std::string::npos);
    const std::string listed = screen.substr(end);
    for (const data::SkippedImage& k : sum.skipped_images)
        CHECK_MESSAGE(listed.find(k.path) != std::string::npos, k.path);
    CHECK(listed.find(jpeg_reason + ": 2 files") != std::string::npos);

    const std::string file = gltest::slurp(out / "skipped_images.txt");
    const std::string html = gltest::slurp(out / "report.html");
    CHECK(file.rfind("images sdtrain skipped: 9 files, grouped by reason:\n", 0) == 0);
    CHECK(html.find("Images skipped") != std::string::npos);
    for (const data::SkippedImage& k : sum.skipped_images) {
        CHECK_MESSAGE(file.find(k.path) != std::string::npos, k.path);
        CHECK_MESSAGE(html.find(k.path) != std::string::npos, k.path);
    }
    for (const fs::directory_entry& e : fs::directory_iterator(out))
        CHECK_MESSAGE(e.path().filename().string().find(".tmp-") == std::string::npos, e.path());
}

TEST_CASE("sdtrain run: the plan lists the first 20 skipped files and the count, a run with none leaves no list") {
    train::RunData d;
    for (int i = 0; i < 25; i++)
        d.dataset.skipped.push_back({gl::cat("f", 100 + i, ".png"), gl::cat("reason ", i % 2)});
    const std::string text = train::dataset_summary(d);
    CAPTURE(text);
    CHECK(text.find("  skipped: 25 images (the first 20 here; all of them in the report, skipped_images.txt and "
                    "the end of the run)\n    reason 0: 13 files\n      f100.png\n") != std::string::npos);
    CHECK(text.find("f138.png") == std::string::npos);
    CHECK(text.find("    ... and 5 more\n") != std::string::npos);

    Scratch s("noskip");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    write_text(out / "skipped_images.txt", "an earlier run's list\n");
    train::RunConfig c = tiny_config(model, data, out);
    c.max_train_steps = 1;
    train::RunRecording rec;
    train::Session(c, &rec).run();
    CHECK_FALSE(fs::exists(out / "skipped_images.txt"));  // it no longer describes the images
    CHECK(gltest::slurp(out / "report.html").find("Images skipped") == std::string::npos);
}

TEST_CASE("sdtrain run: no readable image is an error before the weights, none cached one before training") {
    Scratch s("uncached");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    fs::create_directories(s.root / "damaged" / "1_x");
    fs::copy_file(bad_image("png_short_idat.png"), s.root / "damaged" / "1_x" / "a.png");
    CHECK(gltest::error_of([&] { train::Session(tiny_config(model, s.root / "damaged", out)).prepare(); })
              .find("the dataset has no usable images (1 unreadable, first: ") == 0);

    train::Session session(tiny_config(model, data, out));
    session.prepare();
    for (int i = 0; i < 6; i++) write_text(data / "1_tiny" / ("img" + std::to_string(i) + ".bmp"), "BM, gone");
    const std::string err = gltest::error_of([&] { session.run(); });
    CHECK(err.find("no image could be cached: all 6 failed:\n  corrupt or truncated BMP header (stb_image: ") == 0);
    CHECK(err.find("): 6 files\n    " + (data / "1_tiny" / "img0.bmp").string() + "\n") != std::string::npos);
    CHECK_FALSE(fs::exists(out / "tiny.safetensors"));
}
