// kohya's fine-tuning metadata (--in_json, metadata_file; data/fine_tuning.h): the images, captions,
// repeats and buckets kohya's own FineTuningDataset builds for the same files
// (tests/golden/make_kohya_metadata.py's finetune_* cases, run through config_util and
// train_util), and the rules read from its code: the image path of a key, the extension search,
// caption and tag joining, JSON / JSONL, the schema of a fine-tuning subset, and the errors.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/config.h"
#include "data/dataset.h"
#include "data/fine_tuning.h"
#include "data/png_file.h"
#include "test_util.h"
#include "tools/sdtrain/options.h"
#include "train/run/data_plan.h"

namespace {

namespace fs = std::filesystem;
using gltest::error_of;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
}

void png(const fs::path& p, int w, int h) {
    fs::create_directories(p.parent_path());
    data::Bitmap img{w, h, 3, {}};
    img.pixels.assign(size_t(w) * size_t(h) * 3, 100);
    data::write_png(p.string(), img);
}

void text(const fs::path& p, const std::string& t) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << t;
}

data::SubsetConfig subset(const fs::path& meta, const fs::path& dir = {}) {
    data::SubsetConfig s;
    s.metadata_file = meta;
    s.image_dir = dir;
    return s;
}

// The golden cases' files, as tests/test_kohya_run_metadata.cpp writes them.
void write_case_files(const fs::path& root, const nlohmann::json& c) {
    for (const nlohmann::json& im : c.at("files").at("images")) {
        const fs::path p = root / fs::u8path(im[0].get<std::string>());
        png(p, im[1].get<int>(), im[2].get<int>());
        if (!im[3].is_null()) std::ofstream(fs::path(p).replace_extension(".txt")) << im[3].get<std::string>() << "\n";
    }
    for (const auto& [name, t] : c.at("files").at("texts").items())
        text(root / name, replace_all(t.get<std::string>(), "{root}", root.string()));
    std::ofstream(root / "model.safetensors") << "x";
}

}  // namespace

TEST_CASE("fine-tuning metadata: images, captions, repeats and buckets are kohya's FineTuningDataset's") {
    std::ifstream f(gltest::golden_dir("kohya") + "run_metadata.json");
    REQUIRE(f.good());
    int cases = 0;
    for (const nlohmann::json& c : nlohmann::json::parse(f)) {
        if (!c.contains("fine_tuning_images")) continue;
        cases++;
        const std::string name = c.at("name").get<std::string>();
        gltest::TempDir dir;
        write_case_files(dir.path, c);
        std::vector<std::string> argv;
        for (const nlohmann::json& a : c.at("argv"))
            argv.push_back(replace_all(a.get<std::string>(), "{root}", dir.path.string()));
        train::RunConfig cfg = sdtrain::parse_command_line(argv).config;
        cfg.validate();
        const train::RunData d = train::load_run_data(cfg, 1);
        std::vector<const data::BucketedDataset*> fine_tuning;
        for (const data::BucketedDataset& p : d.parts)
            if (p.dataset.config.subsets.front().metadata_file) fine_tuning.push_back(&p);
        const nlohmann::json& theirs = c.at("fine_tuning_images");
        REQUIRE_MESSAGE(fine_tuning.size() == theirs.size(), name);
        for (size_t i = 0; i < fine_tuning.size(); i++) {
            const data::BucketedDataset& p = *fine_tuning[i];
            REQUIRE_MESSAGE(p.dataset.images.size() == theirs[i].size(), name);
            for (size_t j = 0; j < theirs[i].size(); j++) {
                const nlohmann::json& t = theirs[i][j];
                const data::ImageEntry& e = p.dataset.images[j];
                const std::string where = gl::cat(name, " dataset ", i, " image ", j, " (", t[0].get<std::string>(), ")");
                CHECK_MESSAGE(e.path.string() == replace_all(t[1].get<std::string>(), "{root}", dir.path.string()), where);
                CHECK_MESSAGE(e.caption == t[2].get<std::string>(), where);
                CHECK_MESSAGE(e.num_repeats == t[3].get<int>(), where);
                CHECK_MESSAGE(p.buckets.choice[j].bucket.w == t[4][0].get<int>(), where);
                CHECK_MESSAGE(p.buckets.choice[j].bucket.h == t[4][1].get<int>(), where);
                CHECK_FALSE(e.is_reg);
            }
        }
        // The plan names the metadata subset with its counts.
        const std::string summary = train::dataset_summary(d);
        CHECK_MESSAGE(has(summary, ".json"), summary);
    }
    CHECK(cases == 2);
}

TEST_CASE("fine-tuning metadata: a key's image: joined to image_dir or absolute, the extension searched as kohya's") {
    gltest::TempDir dir;
    const fs::path imgs = dir.path / "imgs";
    png(imgs / "stem.jpg", 8, 8);  // a PNG named .jpg: found by name; its check is the dataset's
    png(imgs / "stem.png", 8, 8);
    png(imgs / "Upper.PNG", 8, 8);
    png(imgs / "a.gif.png", 8, 8);
    png(imgs / "sub" / "deep.webp", 8, 8);
    png(imgs / "with.ext.png", 8, 8);
    png(dir.path / "abs" / "z.bmp", 8, 8);
    const std::string abs_stem = (dir.path / "abs" / "z").string();
    text(dir.path / "m.json", "{\"stem\": {\"caption\": \"s\"}, \"Upper\": {}, \"a.gif\": {}, \"sub/deep\": {},"
                              " \"with.ext.png\": {}, \"" + abs_stem + "\": {\"tags\": \"t\"}}");
    const std::vector<data::MetadataImage> m = data::read_fine_tuning_metadata(subset(dir.path / "m.json", imgs));
    REQUIRE(m.size() == 6);
    std::map<std::string, fs::path> path;
    for (const data::MetadataImage& e : m) path[e.key] = e.path;
    CHECK(path["stem"] == imgs / "stem.jpg");  // sorted: .jpg before .png
    CHECK(path["Upper"] == imgs / "Upper.PNG");
    CHECK(path["a.gif"] == imgs / "a.gif.png");  // a key whose file is missing: its name + an extension
    CHECK(path["sub/deep"] == imgs / "sub" / "deep.webp");
    CHECK(path["with.ext.png"] == imgs / "with.ext.png");
    CHECK(path[abs_stem] == dir.path / "abs" / "z.bmp");
    // Longest key first, ties in file order.
    CHECK(m.front().key == abs_stem);
    CHECK(m[1].key == "with.ext.png");
    CHECK(m[2].key == "sub/deep");
    CHECK(m.back().key == "stem");

    text(dir.path / "missing.json", "{\"nothere\": {\"caption\": \"x\"}}");
    const std::string e = error_of([&] { data::read_fine_tuning_metadata(subset(dir.path / "missing.json", imgs)); });
    CHECK(has(e, "missing.json"));
    CHECK(has(e, "'nothere'"));
    CHECK(has(e, "no image"));
    // kohya's assertion: a relative key needs image_dir.
    text(dir.path / "rel.json", "{\"stem.png\": {}}");
    CHECK(has(error_of([&] { data::read_fine_tuning_metadata(subset(dir.path / "rel.json")); }),
              "image_dir is required when image paths are relative"));
}

TEST_CASE("fine-tuning metadata: caption and tags joined as kohya's, with and without wildcards") {
    gltest::TempDir dir;
    png(dir.path / "a.png", 8, 8);
    png(dir.path / "b.png", 8, 8);
    png(dir.path / "c.png", 8, 8);
    png(dir.path / "d.png", 8, 8);
    png(dir.path / "e.png", 8, 8);
    text(dir.path / "m.json",
         "{\"a.png\": {\"caption\": \"cap\", \"tags\": \"t1, t2\"}, \"b.png\": {\"caption\": null, \"tags\": \"t\"},"
         " \"c.png\": {\"caption\": \"only\", \"tags\": \"\"}, \"d.png\": {\"caption\": \"l1\\n \\nl2\", \"tags\": \"x\\ny\"},"
         " \"e.png\": {}}");
    data::SubsetConfig s = subset(dir.path / "m.json", dir.path);
    s.caption.caption_separator = "|";
    std::map<std::string, data::MetadataImage> m;
    for (data::MetadataImage& e : data::read_fine_tuning_metadata(s)) m[e.key] = e;
    CHECK(m["a.png"].caption == "cap|t1, t2");
    CHECK(m["a.png"].tags == "t1, t2");
    CHECK(m["b.png"].caption == "t");
    CHECK(m["c.png"].caption == "only");
    CHECK_FALSE(m["c.png"].tags);  // empty tags are not counted
    CHECK(m["d.png"].caption == "l1\n \nl2|x\ny");  // as is, newlines and all (the first line is drawn)
    CHECK(m["e.png"].caption.empty());
    CHECK_FALSE(m["e.png"].tags);
    s.caption.enable_wildcard = true;
    m.clear();
    for (data::MetadataImage& e : data::read_fine_tuning_metadata(s)) m[e.key] = e;
    CHECK(m["d.png"].caption == "l1|x|y\nl2|x|y");  // the tags on every non-blank line
    CHECK(m["d.png"].tags == "x|y");
    CHECK(m["b.png"].caption.empty());  // no caption line to put the tags on (kohya's loop)
    CHECK(m["b.png"].tags == "t");
    CHECK(m["c.png"].caption == "only|");
    CHECK(m["c.png"].tags == "");
}

TEST_CASE("fine-tuning metadata: JSON and JSONL as kohya reads them, a key twice keeps its place and its last value") {
    gltest::TempDir dir;
    png(dir.path / "a.png", 8, 8);
    png(dir.path / "bb.png", 8, 8);
    text(dir.path / "m.json", "{\"a.png\": {\"caption\": \"first\"}, \"bb.png\": {\"caption\": \"b\"}, "
                              "\"a.png\": {\"caption\": \"last\"}}");
    std::vector<data::MetadataImage> m = data::read_fine_tuning_metadata(subset(dir.path / "m.json", dir.path));
    REQUIRE(m.size() == 2);
    CHECK(m[0].key == "bb.png");
    CHECK(m[1].caption == "last");
    text(dir.path / "m.jsonl", "{\"image_path\": \"a.png\", \"caption\": \"x\", \"tags\": \"t\", \"width\": 8, "
                               "\"height\": 8}\r\n{\"image_path\": \"bb.png\"}\n{\"image_path\": \"a.png\", \"caption\": \"y\"}\n");
    m = data::read_fine_tuning_metadata(subset(dir.path / "m.jsonl", dir.path));
    REQUIRE(m.size() == 2);
    CHECK(m[0].key == "bb.png");
    CHECK(m[0].caption.empty());  // kohya's default ""
    CHECK(m[1].caption == "y");   // the later line replaced the whole entry
    CHECK_FALSE(m[1].tags);
    text(dir.path / "sized.jsonl", "{\"image_path\": \"a.png\", \"width\": 8, \"height\": 6}\n");
    m = data::read_fine_tuning_metadata(subset(dir.path / "sized.jsonl", dir.path));
    CHECK(m[0].image_size == std::array<int64_t, 2>{8, 6});
}

TEST_CASE("fine-tuning metadata: a bad file is an error naming it (missing, folder, FIFO, not JSON, wrong types)") {
    gltest::TempDir dir;
    png(dir.path / "a.png", 8, 8);
    auto error = [&](const std::string& name, const std::string& content) {
        text(dir.path / name, content);
        return error_of([&] { data::read_fine_tuning_metadata(subset(dir.path / name, dir.path)); });
    };
    const std::string missing = error_of([&] { data::read_fine_tuning_metadata(subset(dir.path / "none.json", dir.path)); });
    CHECK(has(missing, "none.json"));
    CHECK(has(missing, "no metadata"));
    fs::create_directories(dir.path / "folder.json");
    CHECK(has(error_of([&] { data::read_fine_tuning_metadata(subset(dir.path / "folder.json", dir.path)); }), "folder.json"));
    REQUIRE(::mkfifo((dir.path / "fifo.json").c_str(), 0600) == 0);
    CHECK(has(error_of([&] { data::read_fine_tuning_metadata(subset(dir.path / "fifo.json", dir.path)); }), "fifo.json"));
    CHECK(has(error("bad.json", "{\"a.png\": {"), "bad.json: not valid JSON"));
    CHECK(has(error("list.json", "[1, 2]"), "must be a JSON object"));
    CHECK(has(error("entry.json", "{\"a.png\": \"a caption\"}"), "the entry of 'a.png' must be an object"));
    CHECK(has(error("type.json", "{\"a.png\": {\"caption\": 5}}"), "'caption' must be a string"));
    CHECK(has(error("tags.json", "{\"a.png\": {\"tags\": [\"x\"]}}"), "'tags' must be a string"));
    CHECK(has(error("size.json", "{\"a.png\": {\"image_size\": [8]}}"), "'image_size' must be [width, height]"));
    CHECK(has(error("bom.json", "\xEF\xBB\xBF{}"), "byte order mark"));
    CHECK(has(error("line.jsonl", "{\"image_path\": \"a.png\"}\n\n"), "line.jsonl line 2: not valid JSON"));
    CHECK(has(error("path.jsonl", "{\"caption\": \"x\"}\n"), "line 1: needs \"image_path\""));
    CHECK(error("empty.json", "{}") == "(no error)");
    CHECK(data::read_fine_tuning_metadata(subset(dir.path / "empty.json", dir.path)).empty());
}

TEST_CASE("fine-tuning metadata: the dataset: repeats, ignored subsets, tags kept, image_size checked") {
    gltest::TempDir dir;
    png(dir.path / "a.png", 16, 8);
    png(dir.path / "b.png", 8, 8);
    text(dir.path / "m.json", "{\"a.png\": {\"caption\": \"x\", \"tags\": \"T\", \"image_size\": [8, 16]}, "
                              "\"b.png\": {\"caption\": \"y\"}}");
    text(dir.path / "empty.json", "{}");
    data::DatasetConfig c;
    c.subsets = {subset(dir.path / "m.json", dir.path), subset(dir.path / "m.json", dir.path),
                 subset(dir.path / "empty.json", dir.path)};
    c.subsets[0].num_repeats = 3;
    const data::Dataset ds = data::build_dataset(c);
    REQUIRE(ds.images.size() == 2);
    CHECK(ds.num_train_images == 6);
    CHECK(ds.images[0].path == dir.path / "a.png");
    CHECK(ds.images[0].caption == "x,T");
    CHECK(ds.images[0].tags == "T");
    CHECK(ds.images[0].width == 16);  // the file's size
    std::string w;
    for (const std::string& s : ds.warnings) w += s + "\n";
    CHECK(has(w, "the same metadata_file"));
    CHECK(has(w, "empty.json: no image entries found"));
    CHECK(has(w, "1 image is not of the image_size their metadata gives"));
    c.subsets.resize(1);
    c.subsets[0].num_repeats = 0;  // kohya ignores the subset
    CHECK(has(error_of([&] { data::build_dataset(c); }), "no usable images"));
}

TEST_CASE("fine-tuning metadata: the dataset config's schema for fine-tuning subsets is kohya's") {
    auto parse = [](const std::string& toml) { return data::parse_dataset_config(toml, "d.toml"); };
    const std::vector<data::DatasetConfig> ok = parse(
        "[general]\ncaption_extension = \".txt\"\nclass_tokens = \"unused\"\n[[datasets]]\nshuffle_caption = true\n"
        "[[datasets.subsets]]\nmetadata_file = \"m.json\"\n[[datasets.subsets]]\nmetadata_file = \"n.json\"\n"
        "image_dir = \"imgs\"\nnum_repeats = 2\n");
    REQUIRE(ok[0].subsets.size() == 2);
    CHECK(ok[0].subsets[0].metadata_file == fs::path("m.json"));
    CHECK(ok[0].subsets[0].image_dir.empty());
    CHECK_FALSE(ok[0].subsets[0].class_tokens);  // [general]'s DreamBooth keys do not reach it
    CHECK(ok[0].subsets[0].caption.shuffle_caption);
    CHECK(ok[0].subsets[1].image_dir == fs::path("imgs"));
    CHECK(ok[0].subsets[1].num_repeats == 2);
    CHECK(has(error_of([&] {
                  parse("[[datasets]]\n[[datasets.subsets]]\nmetadata_file = \"m.json\"\n[[datasets.subsets]]\n"
                        "image_dir = \"x\"\n");
              }),
              "cannot mix DreamBooth subsets and fine-tuning subsets"));
    for (const char* key : {"is_reg = true", "class_tokens = \"sks\"", "caption_extension = \".txt\"", "cache_info = true"}) {
        const std::string e = error_of([&] { parse(gl::cat("[[datasets]]\n[[datasets.subsets]]\nmetadata_file = \"m.json\"\n", key, "\n")); });
        CHECK_MESSAGE(has(e, "is not a key of a fine-tuning dataset"), e);
    }
    CHECK(has(error_of([&] { parse("[[datasets]]\ncaption_extension = \".txt\"\n[[datasets.subsets]]\nmetadata_file = \"m\"\n"); }),
              "[[datasets]] #1: 'caption_extension' is not a key of a fine-tuning dataset"));
    CHECK(has(error_of([&] { parse("[general]\nmetadata_file = \"m\"\n[[datasets]]\n[[datasets.subsets]]\nimage_dir = \"x\"\n"); }),
              "belongs in a [[datasets.subsets]] table"));
    CHECK(has(error_of([&] { parse("[[datasets]]\nvalidation_split = 0.1\n[[datasets.subsets]]\nmetadata_file = \"m\"\n"); }),
              "does not split its images"));
    // --dataset_repeats is the command line's num_repeats: a subset without its own takes it.
    const std::vector<data::DatasetConfig> rep = data::parse_dataset_config(
        "[[datasets]]\n[[datasets.subsets]]\nimage_dir = \"x\"\n", "d.toml", {{"num_repeats", int64_t(4)}});
    CHECK(rep[0].subsets[0].num_repeats == 4);
}

TEST_CASE("fine-tuning metadata: --in_json and --dataset_repeats on the command line") {
    const std::vector<std::string> base = {"--pretrained_model_name_or_path", "m.safetensors", "--output_dir", "out",
                                           "--network_module", "networks.lora", "--resolution", "256"};
    auto config = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = base;
        a.insert(a.end(), extra.begin(), extra.end());
        return sdtrain::parse_command_line(a).config;
    };
    train::RunConfig c = config({"--in_json", "meta.json", "--dataset_repeats", "5"});
    c.validate();  // no --train_data_dir: absolute keys need none
    CHECK(std::get<int64_t>(train::dataset_command_line(c).at("num_repeats")) == 5);
    CHECK(has(error_of([&] { config({"--in_json", "m.json", "--dataset_config", "d.toml"}).validate(); }),
              "--dataset_config and --in_json"));
    CHECK(has(error_of([&] { config({"--in_json", "m.json", "--train_data_dir", "t", "--reg_data_dir", "r"}).validate(); }),
              "--reg_data_dir with --in_json"));
    // kohya's FineTuningDataset does not split: a validation split is refused, not ignored.
    CHECK(has(error_of([&] {
                  data::metadata_dataset_config("m.json", std::nullopt,
                                                train::dataset_command_line(config({"--in_json", "m.json", "--validation_split", "0.1"})));
              }),
              "--validation_split 0.1 with --in_json"));
    const data::DatasetConfig d = data::metadata_dataset_config("meta.json", fs::path("imgs"), train::dataset_command_line(c));
    REQUIRE(d.subsets.size() == 1);
    CHECK(d.subsets[0].metadata_file == fs::path("meta.json"));
    CHECK(d.subsets[0].image_dir == fs::path("imgs"));
    CHECK(d.subsets[0].num_repeats == 5);
    CHECK(d.width == 256);
    // The metadata file is read before any model loads: a missing one is named.
    gltest::TempDir dir;
    train::RunConfig m = config({"--in_json", dir / "none.json"});
    CHECK(has(error_of([&] { train::load_run_data(m, 1); }), "none.json"));
}
