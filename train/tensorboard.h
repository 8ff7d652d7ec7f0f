// TensorBoard event files, written without TensorFlow or protobuf: what kohya's --log_with
// tensorboard gives (through accelerate's tracker: torch's SummaryWriter), readable by TensorBoard
// and its event readers.
//
// A file is a sequence of TFRecords — u64 length, u32 masked CRC-32C of the length, the bytes, u32
// masked CRC-32C of the bytes (little-endian; mask: rotate right 15, add 0xa282ead8) — each holding
// one serialized tensorflow.Event: wall_time (1, double), step (2, int64), then file_version (3,
// "brain.Event:2", the first record, with source_metadata (10) naming the writer) or a summary (5):
// Summary.value (1) of Value {tag (1), simple_value (2, float) | image (4) {height (1), width (2),
// colorspace (3), encoded_image_string (4)}}. Scalars are written as simple values (torch's
// add_scalar default), images as encoded PNGs (add_image).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace train {

// CRC-32C (Castagnoli), and TFRecord's masked form of it.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t n);

// The serialized Events (exposed for tests).
std::string tb_file_version_event(double wall_time, const std::string& writer);
std::string tb_scalar_event(const std::string& tag, float value, int64_t step, double wall_time);
std::string tb_image_event(const std::string& tag, const std::vector<uint8_t>& png, int width, int height,
                           int channels, int64_t step, double wall_time);
// One TFRecord around a serialized event.
std::string tb_record(const std::string& event);

class TensorBoardWriter {
public:
    // Creates `dir` (and its parents) and events.out.tfevents.<seconds>.<host>.<pid>.<n> in it
    // (SummaryWriter's name), whose first record is the file version. Throws gl::Error naming
    // the path when it cannot.
    TensorBoardWriter(const std::filesystem::path& dir, double wall_time);
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    void scalar(const std::string& tag, double value, int64_t step, double wall_time);
    // png: an encoded PNG of width x height with `channels` (1 grey, 3 RGB, 4 RGBA).
    void image(const std::string& tag, const std::vector<uint8_t>& png, int width, int height, int channels,
               int64_t step, double wall_time);
    // Every record reaches the file with its own write() (no buffer in the process: a kill -9
    // loses nothing written); flush() also syncs the file to the disk.
    void flush();
    const std::filesystem::path& path() const { return path_; }

private:
    void append(const std::string& event);
    std::filesystem::path path_;
    int fd_ = -1;
};

// One event of a file as a reader sees it: the file version, a scalar or an image.
struct TbEvent {
    double wall_time = 0;
    int64_t step = 0;
    std::string file_version;  // the first event's
    std::string tag;           // a summary value's
    std::optional<float> value;
    std::vector<uint8_t> png;  // an image's encoded bytes
    int width = 0, height = 0, channels = 0;
};

struct TbFile {
    std::vector<TbEvent> events;
    // Where reading stopped before the end: a record cut short (a writer killed mid-record, a
    // file still being written) or damaged (a CRC that does not match); "" when the file was
    // read to its end. TensorBoard's reader stops at the same place and keeps what came before.
    std::string stopped;
};

// Reads an event file as TensorBoard's event loader does. Throws gl::Error naming the file when
// it cannot be opened or a record's bytes are not an Event.
TbFile read_tensorboard_events(const std::filesystem::path& file);

}  // namespace train
