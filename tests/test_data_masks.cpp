// kohya's masked loss from mask images (docs/masked_loss_README.md, its ControlNetDataset): a
// subset's conditioning_data_dir pairs every image with the mask of its name, both ways, each of
// its image's size; the loader gives the mask's red channel resized, cropped and flipped with its
// image; the dataset config takes the key in every subset of a dataset or none, never beside
// is_reg or alpha_mask.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "data/loader.h"
#include "data/png_file.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

struct MaskScratch {
    fs::path root = fs::temp_directory_path() / ("gl_masks_" + std::to_string(getpid()));
    MaskScratch() {
        fs::create_directories(root / "img");
        fs::create_directories(root / "mask");
    }
    ~MaskScratch() { fs::remove_all(root); }
    void image(const std::string& rel, const char* golden = "rgb.png") {
        fs::copy_file(gltest::golden_dir("dataset") + "images/ok/" + golden, root / rel,
                      fs::copy_options::overwrite_existing);
    }
    // A mask whose red channel is `red` and whose other channels are not (they must not count).
    void mask(const std::string& rel, int w, int h, uint8_t red) {
        data::Bitmap b{w, h, 3, {}};
        for (int i = 0; i < w * h; i++) b.pixels.insert(b.pixels.end(), {red, uint8_t(255 - red), 77});
        data::write_png((root / rel).string(), b);
    }
    std::string toml(const std::string& subset_extra = "") const {
        return gl::cat("[[datasets]]\nresolution = [24, 16]\n[[datasets.subsets]]\nimage_dir = '",
                           (root / "img").string(), "'\nconditioning_data_dir = '", (root / "mask").string(), "'\n",
                           subset_extra);
    }
};

data::DatasetConfig config_of(const std::string& toml) { return data::parse_dataset_config(toml, "m.toml").at(0); }

std::vector<data::Batch> drain(data::Loader& l) {
    std::vector<data::Batch> out;
    while (std::optional<data::Batch> b = l.next()) out.push_back(std::move(*b));
    return out;
}

}  // namespace

TEST_CASE("data masks: each image is paired with the mask of its name, missing and extra masks refused") {
    MaskScratch s;
    s.image("img/a.png");
    s.image("img/b.jpg", "rgb.jpg");
    s.mask("mask/a.png", 24, 16, 255);
    s.mask("mask/b.png", 24, 16, 0);
    const data::Dataset ds = data::build_dataset(config_of(s.toml()));
    REQUIRE(ds.images.size() == 2);
    CHECK(ds.images[0].mask == s.root / "mask" / "a.png");
    CHECK(ds.images[1].mask == s.root / "mask" / "b.png");  // by name, whatever the extension

    s.mask("mask/extra.png", 24, 16, 0);
    CHECK(gltest::error_of([&] { data::build_dataset(config_of(s.toml())); })
              .find("1 mask has no image in " + (s.root / "img").string() + ": extra.png") != std::string::npos);
    fs::remove(s.root / "mask" / "extra.png");
    fs::remove(s.root / "mask" / "b.png");
    CHECK(gltest::error_of([&] { data::build_dataset(config_of(s.toml())); })
              .find("no mask image for 1 image of " + (s.root / "img").string() + ": b.jpg") != std::string::npos);
    s.mask("mask/b.png", 16, 24, 0);
    CHECK(gltest::error_of([&] { data::build_dataset(config_of(s.toml())); })
              .find("16x24, its image " + (s.root / "img" / "b.jpg").string() + " is 24x16") != std::string::npos);
    fs::remove(s.root / "mask" / "b.png");
    std::ofstream(s.root / "mask" / "b.png") << "not a png";
    CHECK(gltest::error_of([&] { data::build_dataset(config_of(s.toml())); }).find("mask") != std::string::npos);
    fs::remove_all(s.root / "mask");
    CHECK(gltest::error_of([&] { data::build_dataset(config_of(s.toml())); })
              .find("conditioning_data_dir " + (s.root / "mask").string() + ": not a directory") != std::string::npos);
}

TEST_CASE("data masks: the config takes mask folders in every subset of a dataset or none, not with reg or alpha") {
    MaskScratch s;
    auto err = [](const std::string& toml) { return gltest::error_of([&] { config_of(toml); }); };
    CHECK(err(s.toml("[[datasets.subsets]]\nimage_dir = 'other'\n"))
              .find("m.toml [[datasets]] #1: conditioning_data_dir is set in 1 of its 2 subsets") == 0);
    CHECK(err(s.toml("is_reg = true\n")).find("conditioning_data_dir (mask images) with is_reg") != std::string::npos);
    CHECK(err(s.toml("alpha_mask = true\n")).find("conditioning_data_dir and alpha_mask") != std::string::npos);
    CHECK(err("[general]\nconditioning_data_dir = 'x'\n[[datasets]]\n[[datasets.subsets]]\nimage_dir='x'\n") ==
          "m.toml [general]: 'conditioning_data_dir' belongs in a [[datasets.subsets]] table");
    CHECK(config_of(s.toml()).subsets[0].conditioning_data_dir == s.root / "mask");
}

TEST_CASE("data masks: the loader gives the red channel, resized, cropped and flipped with its image") {
    MaskScratch s;
    s.image("img/a.png");
    s.image("mask/a.png");  // the image as its own mask: the mask must follow the pixels exactly
    s.image("img/b.png", "grey.png");
    s.mask("mask/b.png", 24, 16, 191);
    // A fixed 16x16 bucket: the 24x16 images are cropped at random, and flipped.
    data::DatasetConfig c = config_of(s.toml("flip_aug = true\nrandom_crop = true\nnum_repeats = 8\n"));
    c.width = 16;  // a 16x16 bucket: a 24x16 image is cropped
    c.height = 16;
    const data::Dataset ds = data::build_dataset(c);
    const data::BucketAssignment a = data::assign_buckets(ds);
    data::LoaderOptions o;
    o.epochs = 1;
    data::Loader l(ds, a, o);
    int flipped = 0, samples = 0;
    for (const data::Batch& b : drain(l))
        for (const data::Sample& smp : b.samples) {
            samples++;
            REQUIRE(smp.mask.size() == size_t(b.bucket.w * b.bucket.h));
            flipped += smp.flipped;
            if (smp.image == 0) {
                for (size_t p = 0; p < smp.mask.size(); p++)
                    REQUIRE(smp.mask[p] == doctest::Approx(smp.pixels[3 * p] * 0.5f + 0.5f).epsilon(1e-6));
            } else {
                for (float m : smp.mask) REQUIRE(m == doctest::Approx(191.0 / 255.0));
            }
        }
    CHECK(samples == 16);
    CHECK(flipped > 0);
    CHECK(flipped < 16);
}
