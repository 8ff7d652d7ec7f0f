// kohya's face crop (data/face_crop.h) against kohya's own crop_target and
// load_image_with_face_info run in the golden venv (tests/golden/make_kohya_face_crop.py): the
// face box of each name, the draws our plan asks for (kind and bounds, fed kohya's values back) and
// the output pixels byte for byte; then the option's rules: TOML and command-line values, the
// loader's face path, bucketing and cached latents (the crop skipped, as kohya does), images too
// small (kohya's assertion).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "data/config.h"
#include "data/face_crop.h"
#include "data/loader.h"
#include "test_util.h"
#include "tools/sdtrain/options.h"
#include "train/run/config_view.h"
#include "train/run/data_plan.h"
#include "train/run/option_table.h"

namespace fs = std::filesystem;

namespace {

const std::string kDir = gltest::golden_dir("kohya") + "face_crop/";

nlohmann::json golden() {
    std::ifstream in(kDir + "cases.json");
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}

// kohya's recorded draws, handed back in order; each call's kind and bounds must be kohya's.
struct Replay final : data::FaceCropDraws {
    std::vector<nlohmann::json> calls;
    size_t next = 0;
    int bad = 0;
    double uniform(double a, double b) override {
        const nlohmann::json& c = take("uniform");
        bad += std::fabs(a - c[1].get<double>()) > 1e-15 || std::fabs(b - c[2].get<double>()) > 1e-15;
        return c[3].get<double>();
    }
    int64_t randint(int64_t a, int64_t b) override {
        const nlohmann::json& c = take("randint");
        bad += a != c[1].get<int64_t>() || b != c[2].get<int64_t>();
        return c[3].get<int64_t>();
    }
    const nlohmann::json& take(const char* kind) {
        static const nlohmann::json none = {"none", 0, 0, 0};
        if (next >= calls.size()) {
            bad++;
            return none;
        }
        bad += calls[next][0].get<std::string>() != kind;
        return calls[next++];
    }
};

data::ImageEntry entry_of(const fs::path& p) {
    const data::Image img = data::load_image(p);
    data::ImageEntry e;
    e.path = p;
    e.width = img.width;
    e.height = img.height;
    return e;
}

std::vector<std::string> lines_with(const std::vector<std::string>& lines, const std::string& part) {
    std::vector<std::string> out;
    for (const std::string& l : lines)
        if (l.find(part) != std::string::npos) out.push_back(l);
    return out;
}

}  // namespace

TEST_CASE("data face crop: kohya's crop_target, its draws and pixels, for every golden case") {
    const nlohmann::json g = golden();
    REQUIRE(g["cases"].size() == 10);
    int moved = 0, drawn = 0;
    for (const nlohmann::json& c : g["cases"]) {
        const std::string name = c["case"];
        CAPTURE(name);
        const fs::path file = kDir + c["file"].get<std::string>();
        const std::optional<data::FaceBox> box = data::face_box_of_name(file);
        REQUIRE(box);
        CHECK(std::vector<int>{box->cx, box->cy, box->w, box->h} == c["box"].get<std::vector<int>>());
        const data::ImageEntry e = entry_of(file);
        const int tw = c["target"][0], th = c["target"][1];
        Replay draws;
        draws.calls = c["draws"].get<std::vector<nlohmann::json>>();
        const data::FaceCrop plan = data::plan_face_crop(e.width, e.height, tw, th, *box,
                                                         {c["range"][0].get<double>(), c["range"][1].get<double>()},
                                                         c["random_crop"].get<bool>(), draws, file.string());
        CHECK(draws.bad == 0);
        CHECK(draws.next == draws.calls.size());
        drawn += int(draws.calls.size());
        moved += plan.x > 0 && plan.y > 0;
        const data::PreparedImage out = data::prepare_face_crop(e, plan, tw, th, false, false);
        const data::Image want = data::load_image(kDir + name + ".out.png");
        REQUIRE(want.width == tw);
        REQUIRE(want.height == th);
        size_t differ = 0;
        for (size_t i = 0; i < want.rgb.size(); i++) differ += out.rgb[i] != want.rgb[i];
        CHECK(differ == 0);
    }
    CHECK(drawn >= 20);  // the random paths ran
    CHECK(moved >= 4);   // crops away from the corner: a wrong window shows
}

TEST_CASE("data face crop: a wrong draw moves the crop (the pixel comparison can fail)") {
    const nlohmann::json c = golden()["cases"][0];
    const fs::path file = kDir + c["file"].get<std::string>();
    const data::ImageEntry e = entry_of(file);
    const data::FaceBox box = *data::face_box_of_name(file);
    Replay draws;
    draws.calls = c["draws"].get<std::vector<nlohmann::json>>();
    draws.calls[1][3] = draws.calls[1][3].get<int>() - 1;  // the height jitter one pixel less
    const data::FaceCrop plan = data::plan_face_crop(e.width, e.height, 64, 48, box, {2.0, 4.0}, false, draws, "x");
    const data::Image want = data::load_image(kDir + "c00.out.png");
    CHECK(data::prepare_face_crop(e, plan, 64, 48, false, false).rgb != want.rgb);
}

TEST_CASE("data face crop: the face box of a name as kohya's load_image_with_face_info reads it") {
    const nlohmann::json names = golden()["names"];
    REQUIRE(names.size() >= 8);
    for (const auto& [name, want] : names.items()) {
        CAPTURE(name);
        if (want.is_string()) {
            CHECK(gltest::error_of([&] { data::face_box_of_name(name); }).find("is not an integer") !=
                  std::string::npos);
            continue;
        }
        const std::vector<int> w = want.get<std::vector<int>>();
        const std::optional<data::FaceBox> box = data::face_box_of_name(name);
        if (!box) {
            CHECK(w == std::vector<int>{0, 0, 0, 0});  // kohya's zeros: no face crop
            continue;
        }
        CHECK(std::vector<int>{box->cx, box->cy, box->w, box->h} == w);
    }
    CHECK(gltest::error_of([] { data::face_box_of_name("a_b_5_5_0_0.png"); }).find("width and height 0") !=
          std::string::npos);
    CHECK(gltest::error_of([] { data::face_box_of_name("a_b_5_5_99999999999_1.png"); }).find("out of range") !=
          std::string::npos);
}

TEST_CASE("data face crop: the draws stay in their bounds and the crop inside the image, an image too small is refused") {
    struct Bounds final : data::FaceCropDraws {
        data::Rng rng{3};
        data::RngFaceDraws own{rng};
        int bad = 0;
        double uniform(double a, double b) override {
            const double v = own.uniform(a, b);
            bad += !(v >= a && v <= b);
            return v;
        }
        int64_t randint(int64_t a, int64_t b) override {
            const int64_t v = own.randint(a, b);
            bad += v < a || v > b;
            return v;
        }
    } draws;
    for (int k = 0; k < 200; k++) {
        const data::FaceCrop p =
            data::plan_face_crop(300, 220, 64, 48, {150, 100, 60, 50}, {1.5, 4.0}, k % 2 == 1, draws, "x");
        CHECK(p.x >= 0);
        CHECK(p.y >= 0);
        CHECK(p.x + 64 <= p.resized_w);
        CHECK(p.y + 48 <= p.resized_h);
    }
    CHECK(draws.bad == 0);
    CHECK(gltest::error_of([&] {
              data::plan_face_crop(60, 100, 64, 48, {30, 50, 40, 40}, {2.0, 4.0}, false, draws, "small.png");
          }).find("small.png: 60x100 is smaller than the resolution 64x48") != std::string::npos);
}

TEST_CASE("data face crop: face_crop_aug_range in a dataset config and on the command line") {
    const auto subset_of = [](const std::string& value, const std::string& where = "subset") {
        const std::string text = where == "general"
                                     ? "[general]\nface_crop_aug_range = " + value +
                                           "\n[[datasets]]\n[[datasets.subsets]]\nimage_dir = 'x'\n"
                                     : "[[datasets]]\n[[datasets.subsets]]\nimage_dir = 'x'\nface_crop_aug_range = " +
                                           value + "\n";
        return data::parse_dataset_config(text, "d.toml")[0].subsets[0];
    };
    CHECK(subset_of("[2.0, 4.0]").face_crop_aug_range == std::array<double, 2>{2.0, 4.0});
    CHECK(subset_of("[2, 3.5]").face_crop_aug_range == std::array<double, 2>{2.0, 3.5});
    CHECK(subset_of("[3, 3]", "general").face_crop_aug_range == std::array<double, 2>{3.0, 3.0});
    CHECK_FALSE(data::parse_dataset_config("[[datasets]]\n[[datasets.subsets]]\nimage_dir = 'x'\n", "d.toml")[0]
                    .subsets[0]
                    .face_crop_aug_range);
    CHECK(gltest::error_of([&] { subset_of("[4.0, 2.0]"); }).find("'face_crop_aug_range' must be [low, high] with "
                                                                  "0 < low <= high") != std::string::npos);
    CHECK(gltest::error_of([&] { subset_of("[0, 2.0]"); }).find("0 < low <= high") != std::string::npos);
    CHECK(gltest::error_of([&] { subset_of("'2,4'"); }).find("'face_crop_aug_range' must be [low, high] (two "
                                                            "numbers), got a string") != std::string::npos);
    CHECK(gltest::error_of([&] { subset_of("[1.0, 2.0, 3.0]"); }).find("face_crop_aug_range") != std::string::npos);

    const std::vector<std::string> base = {"--pretrained_model_name_or_path", "m.safetensors", "--train_data_dir",
                                           "data", "--output_dir", "out", "--network_module", "networks.lora",
                                           "--resolution", "512"};
    const auto parse = [&](const std::string& v) {
        std::vector<std::string> a = base;
        a.insert(a.end(), {"--face_crop_aug_range", v});
        return sdtrain::parse_command_line(a).config;
    };
    const train::RunConfig c = parse("2.0, 4");
    CHECK(c.face_crop_aug_range == std::array<double, 2>{2.0, 4.0});
    const data::ConfigLevel l = train::dataset_command_line(c);
    CHECK((std::get<std::array<double, 2>>(l.at("face_crop_aug_range")) == std::array<double, 2>{2.0, 4.0}));
    CHECK(train::find_option("face_crop_aug_range")->python(c) == "(2.0, 4.0)");  // kohya's str() of its tuple
    CHECK(train::find_option("face_crop_aug_range")->python(train::RunConfig{}) == "None");
    CHECK(train::find_option("face_crop_aug_range")->group.rfind("Data", 0) == 0);  // in --help, not refused
    for (const char* bad : {"4,2", "2", "2,3,4", "a,b", "0,2", "-1,2", "2,inf"}) {
        CAPTURE(bad);
        std::string e;
        try {
            parse(bad);
        } catch (const std::exception& x) {
            e = x.what();
        }
        CHECK(e.find("--face_crop_aug_range") != std::string::npos);
    }
}

namespace {

struct FaceDataset {
    gltest::TempDir tmp;
    fs::path dir = tmp.path / "1_face";
    FaceDataset() {
        fs::create_directories(dir);
        for (const char* f : {"face00_100_70_50_60.png", "face05_190_5_48_40.png", "face08_70_40_80_70.png"})
            fs::copy_file(kDir + f, dir / f);
        fs::copy_file(kDir + "c00.out.png", dir / "noface.png");  // 64x48, no box: the plain path
    }
    data::Dataset build(const std::string& range, bool bucket = false, bool random_crop = false) {
        const std::string toml = "[general]\nresolution = [64, 48]\nenable_bucket = " + std::string(bucket ? "true" : "false") +
                                 "\nmin_bucket_reso = 32\nmax_bucket_reso = 256\nbucket_reso_steps = 16\n"
                                 "[[datasets]]\n[[datasets.subsets]]\nimage_dir = '" + dir.string() +
                                 "'\nface_crop_aug_range = " + range + "\nrandom_crop = " +
                                 (random_crop ? "true" : "false") + "\n";
        return data::build_dataset(data::parse_dataset_config(toml, "d.toml")[0]);
    }
};

std::vector<data::Sample> samples(const data::Dataset& ds, const data::BucketAssignment& a, uint64_t seed, int epochs) {
    data::LoaderOptions o;
    o.seed = seed;
    o.epochs = epochs;
    data::Loader l(ds, a, o);
    std::vector<data::Sample> out;
    while (std::optional<data::Batch> b = l.next())
        for (data::Sample& s : b->samples) out.push_back(std::move(s));
    return out;
}

std::vector<float> unit(const std::vector<uint8_t>& rgb) {
    std::vector<float> v(rgb.size());
    data::to_unit_range(rgb, v.data());
    return v;
}

}  // namespace

TEST_CASE("data face crop: the loader crops around the face without bucketing, and only there") {
    FaceDataset f;
    {  // one scale, no random_crop: no draw, the crop is fixed; the image without a box takes the plain path
        const data::Dataset ds = f.build("[3.0, 3.0]");
        CHECK(lines_with(ds.warnings, "1 of its 4 images have no face box in their name").size() == 1);
        const data::BucketAssignment a = data::assign_buckets(ds);
        const std::vector<data::Sample> s = samples(ds, a, 1, 1);
        REQUIRE(s.size() == 4);
        int faces = 0;
        for (const data::Sample& smp : s) {
            const data::ImageEntry& e = ds.images[size_t(smp.image)];
            CAPTURE(e.path);
            REQUIRE(smp.pixels.size() == size_t(64 * 48 * 3));
            if (!e.face) {
                CHECK(smp.pixels == unit(data::prepare_image(e, a.choice[size_t(smp.image)], false, false).rgb));
                continue;
            }
            faces++;
            data::Rng unused(0);
            data::RngFaceDraws draws(unused);
            const data::FaceCrop plan =
                data::plan_face_crop(e.width, e.height, 64, 48, *e.face, {3.0, 3.0}, false, draws, "");
            CHECK(smp.pixels == unit(data::prepare_face_crop(e, plan, 64, 48, false, false).rgb));
            // and not the plain resize and centre crop
            CHECK(smp.pixels != unit(data::prepare_image(e, a.choice[size_t(smp.image)], false, false).rgb));
        }
        CHECK(faces == 3);
    }
    {  // a range of scales: the crop changes from epoch to epoch, the same under one seed
        const data::Dataset ds = f.build("[2.0, 4.0]", false, true);
        const data::BucketAssignment a = data::assign_buckets(ds);
        const std::vector<data::Sample> s = samples(ds, a, 7, 4), again = samples(ds, a, 7, 4);
        REQUIRE(s.size() == 16);
        std::map<int, std::set<std::vector<float>>> seen;
        for (size_t i = 0; i < s.size(); i++) {
            CHECK(s[i].pixels == again[i].pixels);
            seen[s[i].image].insert(s[i].pixels);
        }
        for (const auto& [image, crops] : seen)
            if (ds.images[size_t(image)].face) CHECK(crops.size() >= 2);
    }
    {  // bucketing: kohya ignores the boxes (warned); the plain bucket path
        const data::Dataset ds = f.build("[2.0, 4.0]", true);
        CHECK(lines_with(ds.warnings, "face_crop_aug_range is ignored with enable_bucket").size() == 1);
        const data::BucketAssignment a = data::assign_buckets(ds);
        for (const data::Sample& smp : samples(ds, a, 1, 1)) {
            const data::ImageEntry& e = ds.images[size_t(smp.image)];
            CHECK(smp.pixels == unit(data::prepare_image(e, a.choice[size_t(smp.image)], false, false).rgb));
        }
    }
}

TEST_CASE("data face crop: an image with a box smaller than the resolution, or a name kohya's int() refuses") {
    FaceDataset f;
    fs::copy_file(kDir + "c01.out.png", f.dir / "exact_5_5_10_10.png");  // 64x48: kept as it is
    CHECK_NOTHROW(f.build("[2.0, 4.0]"));
    fs::copy_file(kDir + "c08.out.png", f.dir / "small_10_10_20_20.png");  // 48x64
    const std::string e = gltest::error_of([&] { f.build("[2.0, 4.0]"); });
    CHECK(e.find("small_10_10_20_20.png: 48x64 is smaller than the resolution 64x48") != std::string::npos);
    CHECK(e.find("kohya's assertion") != std::string::npos);
    CHECK_NOTHROW(f.build("[2.0, 4.0]", true));  // bucketing ignores the box
    fs::remove(f.dir / "small_10_10_20_20.png");
    // kohya reads the box whenever the subset has the range (with bucketing too), and its int() stops the run
    fs::copy_file(kDir + "face03_60_90_20_16.png", f.dir / "IMG_2023_01_01_photo.png");
    for (bool bucket : {false, true}) {
        CAPTURE(bucket);
        const std::string b = gltest::error_of([&] { f.build("[2.0, 4.0]", bucket); });
        CHECK(b.find("IMG_2023_01_01_photo.png: face_crop_aug_range reads the face box") != std::string::npos);
        CHECK(b.find("'photo' is not an integer") != std::string::npos);
    }
}

TEST_CASE("data face crop: with --cache_latents the latents are cached without the crop, warned (kohya skips it)") {
    FaceDataset f;
    const fs::path toml = f.tmp.path / "d.toml";
    std::ofstream(toml) << "[general]\nresolution = [64, 48]\n[[datasets]]\n[[datasets.subsets]]\nimage_dir = '"
                        << f.dir.string() << "'\nface_crop_aug_range = [2.0, 4.0]\n";
    train::RunConfig c;
    c.dataset_config = toml.string();
    c.cache_latents = true;
    const train::RunData d = train::load_run_data(c, 1);
    CHECK(lines_with(d.warnings, "face_crop_aug_range with --cache_latents: the latents are cached without the "
                                 "face crop").size() == 1);
    c.cache_latents = false;
    CHECK(lines_with(train::load_run_data(c, 1).warnings, "--cache_latents").empty());
}
