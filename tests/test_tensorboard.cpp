// TensorBoard event files (train/tensorboard.h) against tensorboard's own encoding of the same
// events (tests/golden/make_tensorboard_golden.py: its protobuf classes and RecordWriter, read back
// by its EventAccumulator).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

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
