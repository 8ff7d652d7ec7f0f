// TensorBoard event files (train/tensorboard.h) against tensorboard's own encoding of the same
// events (tests/golden/make_tensorboard_golden.py: its protobuf classes and RecordWriter, read back
// by its EventAccumulator).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <cstdio>
#include <iterator>
#include <set>

#include "test_util.h"
#include "train/tensorboard.h"

namespace {

std::string read_all(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C and TFRecord's mask") {
    CHECK(train::crc32c("123456789", 9) == 0xe3069283u);  // the check value of CRC-32C
    CHECK(train::crc32c("", 0) == 0u);
    const uint32_t c = train::crc32c("abc", 3);
    CHECK(train::masked_crc32c("abc", 3) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("tensorboard: the event file is byte for byte what tensorboard's own writer makes") {
    const std::string dir = gltest::golden_dir("tensorboard");
    const std::string golden = read_all(dir + "events.bin"), png = read_all(dir + "image.png");
    REQUIRE(golden.size() > 100);
    gltest::TempDir tmp;
    std::filesystem::path file;
    {
        train::TensorBoardWriter w(tmp.path / "logs" / "network_train", 1700000000.5);
        w.scalar("loss/current", 0.125, 1, 1700000001.25);
        w.scalar("loss/average", 0.125, 1, 1700000001.25);
        w.scalar("lr/unet", 1e-4, 1, 1700000001.25);
        w.scalar("loss/current", 0.0, 2, 1700000002.5);
        w.scalar("loss/current", -3.5e-7, 300, 1700000100.0);
        w.scalar("lr/textencoder", 5e-05, 0, 1700000000.75);
        w.image("sample/0", std::vector<uint8_t>(png.begin(), png.end()), 5, 3, 3, 100, 1700000003.0);
        w.flush();
        file = w.path();
    }
    // SummaryWriter's file name: events.out.tfevents.<seconds>.<host>.<pid>.<n>.
    CHECK(file.filename().string().rfind("events.out.tfevents.1700000000.", 0) == 0);
    CHECK(read_all(file) == golden);
    // A second writer in the same folder makes its own file.
    train::TensorBoardWriter again(tmp.path / "logs" / "network_train", 1700000000.5);
    CHECK(again.path() != file);
    CHECK_THROWS_AS(train::TensorBoardWriter(tmp.path / "logs" / "network_train" / file.filename(), 1.0), gl::Error);
    CHECK_THROWS_AS(again.image("x", {}, 0, 3, 3, 1, 1.0), gl::Error);
}

TEST_CASE("tensorboard: our reader gives back what the writer wrote, as tensorboard's reader reads it") {
    const std::string dir = gltest::golden_dir("tensorboard");
    const train::TbFile f = train::read_tensorboard_events(dir + "events.bin");
    CHECK(f.stopped.empty());
    REQUIRE(f.events.size() == 8);
    CHECK(f.events[0].file_version == "brain.Event:2");
    CHECK(f.events[0].wall_time == 1700000000.5);
    CHECK(f.events[1].tag == "loss/current");
    CHECK(f.events[1].step == 1);
    CHECK(*f.events[1].value == 0.125f);
    CHECK(f.events[5].step == 300);
    CHECK(*f.events[5].value == -3.5e-7f);
    CHECK(f.events[6].step == 0);  // proto3 leaves a step of 0 out; it reads back as 0
    const std::string png = read_all(dir + "image.png");
    CHECK(f.events[7].tag == "sample/0");
    CHECK(f.events[7].width == 5);
    CHECK(f.events[7].height == 3);
    CHECK(f.events[7].channels == 3);
    CHECK(f.events[7].png == std::vector<uint8_t>(png.begin(), png.end()));
}

TEST_CASE("tensorboard: a file cut at any byte keeps the records tensorboard's reader keeps") {
    // truncated.json: for every length of events.bin, the scalars and images EventAccumulator reads.
    const std::string dir = gltest::golden_dir("tensorboard");
    const std::string whole = read_all(dir + "events.bin"), cuts = read_all(dir + "truncated.json");
    std::set<size_t> record_ends{0};  // a cut there leaves whole records only
    for (size_t at = 0; at + 8 <= whole.size();) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= uint64_t(uint8_t(whole[at + size_t(i)])) << (8 * i);
        at += 16 + size_t(len);
        record_ends.insert(at);
    }
    CHECK(record_ends.size() == 9);
    CHECK(record_ends.count(whole.size()) == 1);
    gltest::TempDir tmp;
    size_t checked = 0;
    for (size_t at = cuts.find("{\"bytes\":"); at != std::string::npos; at = cuts.find("{\"bytes\":", at + 1)) {
        long n = 0, scalars = 0, images = 0;
        REQUIRE(std::sscanf(cuts.c_str() + at, "{\"bytes\":%ld,\"scalars\":%ld,\"images\":%ld}", &n, &scalars, &images) == 3);
        const std::filesystem::path p = tmp.path / "cut";
        std::ofstream(p, std::ios::binary).write(whole.data(), std::streamsize(n));
        const train::TbFile f = train::read_tensorboard_events(p);
        long got_scalars = 0, got_images = 0;
        for (const train::TbEvent& e : f.events) got_scalars += e.value ? 1 : 0, got_images += e.png.empty() ? 0 : 1;
        CAPTURE(n);
        CHECK(got_scalars == scalars);
        CHECK(got_images == images);
        CHECK(f.stopped.empty() == (record_ends.count(size_t(n)) == 1));
        checked++;
    }
    CHECK(checked == whole.size() + 1);
    // A damaged record ends the reading there, as tensorboard's reader stops.
    std::string bad = whole;
    bad[120] = char(bad[120] ^ 0xff);
    std::ofstream(tmp.path / "bad", std::ios::binary) << bad;
    const train::TbFile f = train::read_tensorboard_events(tmp.path / "bad");
    CHECK(f.stopped.find("CRC does not match") != std::string::npos);
    CHECK(f.events.size() < 8);
}
