// The file system as users hand it over: FIFOs, devices and folders where files belong (refused
// at once, never blocking), a full disk (named as such, nothing left behind), and writers killed
// with SIGKILL mid-write (their temporaries carry the pid and the next run removes them).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "ggml-lite/io/torch_ckpt.h"
#include "ggml-lite/io/atomic_file.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/paths.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/io/sources.h"
#include "models/sd15/model_files.h"
#include "models/sd15/tokenizer.h"
#include "test_util.h"

using namespace gl;
namespace fs = std::filesystem;
using gltest::error_of;
using gltest::TempDir;

namespace {

std::vector<std::string> listing(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// The message f throws, run with a watchdog: should f block in open() on the FIFO (the defect this
// guards against), the FIFO is opened for writing, which releases it, and the test fails.
std::string error_without_blocking(const std::string& fifo, const std::function<void()>& f) {
    auto result = std::async(std::launch::async, [&] { return error_of(f); });
    if (result.wait_for(std::chrono::seconds(10)) == std::future_status::ready) return result.get();
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    std::string e = result.get();
    if (fd >= 0) ::close(fd);
    return "BLOCKED on the FIFO, then: " + e;
}

int g_fault_errno = 0, g_fault_after = 0;
int fault(size_t) { return g_fault_after-- > 0 ? 0 : g_fault_errno; }

struct FaultScope {  // makes write_fully fail with `err` after `after` writes, for this scope
    FaultScope(int err, int after) {
        g_fault_errno = err;
        g_fault_after = after;
        io::set_write_fault(fault);
    }
    ~FaultScope() { io::set_write_fault(nullptr); }
};

// The pid of a process that has exited (and been reaped): no process runs under it.
// The temporary name of an atomic write to path by process pid of this host, "XXXXXX" filled.
std::string temp_name(const std::string& path, long pid, const std::string& fill) {
    std::string p = io::temp_file_pattern(path, pid);
    return p.replace(p.size() - 6, 6, fill);
}

pid_t dead_pid() {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    ::waitpid(p, nullptr, 0);
    return p;
}

}  // namespace

TEST_CASE("files: a FIFO, a device or a folder given as a file is refused at once, by every reader") {
    TempDir dir;
    const std::string fifo = dir / "model.safetensors";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    const std::vector<std::pair<const char*, std::function<void()>>> readers = {
        {"SafetensorsFile", [&] { io::SafetensorsFile f(fifo); }},
        {"CkptFile", [&] { io::CkptFile f(fifo); }},
        {"open_checkpoint", [&] { io::open_checkpoint(fifo); }},
        {"read_small_file", [&] { io::read_small_file(fifo); }},
        {"open_sd15", [&] { sd::open_sd15(fifo); }},
        {"ClipTokenizer::from_files", [&] { sd::ClipTokenizer::from_files(fifo, fifo); }},
    };
    for (const auto& [name, f] : readers) {
        const std::string e = error_without_blocking(fifo, f);
        CHECK_MESSAGE(e.rfind(fifo + ": is a FIFO (named pipe), not a regular file", 0) == 0, name, ": ", e);
    }
    CHECK(error_of([&] { io::SafetensorsFile f(dir.path.string()); }).find(": is a directory, not a regular file") !=
          std::string::npos);
    CHECK(error_of([] { io::open_checkpoint("/dev/null"); }) == "/dev/null: is a character device, not a regular file");
    CHECK(error_of([] { io::open_checkpoint(""); }) == "an empty path was given where a file belongs");

    // Inside a diffusers folder: a FIFO config or weights file is named, not taken for a missing one.
    const fs::path model = dir.path / "model";
    fs::create_directories(model / "unet");
    fs::create_directories(model / "text_encoder");
    fs::create_directories(model / "vae");
    const std::string config = (model / "unet" / "config.json").string();
    REQUIRE(::mkfifo(config.c_str(), 0644) == 0);
    const std::string e = error_without_blocking(config, [&] { sd::open_sd15(model.string()); });
    CHECK_MESSAGE(e.rfind(config + ": is a FIFO", 0) == 0, e);
}

TEST_CASE("files: a full disk is named with the bytes still to write, and leaves the target as it was") {
    TempDir dir;
    const std::string path = dir / "out.safetensors";
    std::vector<float> x(1000, 1.0f);
    io::write_safetensors(path, {{"old", DType::f32, {2}, x.data()}});
    const std::vector<std::string> before = listing(dir.path);
    {
        FaultScope full(ENOSPC, 2);  // the length and the header go through, the data does not
        const std::string e = error_of([&] { io::write_safetensors(path, {{"x", DType::f32, {1000}, x.data()}}); });
        CHECK_MESSAGE(e.find(path + ": no space left on the device: 4000 bytes (0.0 MiB) still to write") == 0, e);
    }
    CHECK(listing(dir.path) == before);  // no temporary left, the old file untouched
    CHECK(io::SafetensorsFile(path).has("old"));
    {
        FaultScope quota(EDQUOT, 0);
        CHECK(error_of([&] { io::write_safetensors(path, {{"x", DType::f32, {1}, x.data()}}); })
                  .find("no space left on the device (disk quota exceeded)") != std::string::npos);
    }
    {
        FaultScope broken(EIO, 0);
        CHECK(error_of([&] { io::copy_file_contents(path, dir / "copy"); }) ==
              dir / "copy" + ": write failed: Input/output error");
    }
    CHECK(listing(dir.path) == before);  // the failed copy is removed

    // The real thing, where the system has /dev/full: ENOSPC from the kernel.
    const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (full >= 0) {
        CHECK(error_of([&] { io::write_fully(full, x.data(), 400, "/dev/full", 400); })
                  .find("/dev/full: no space left on the device: 400 bytes") == 0);
        ::close(full);
    }
    // Free-space check before writing anything.
    CHECK(error_of([&] { io::check_free_space(dir.path.string(), UINT64_MAX / 2, "the merge"); })
              .find("the merge needs 9223372036854775807 bytes") == 0);
    CHECK(error_of([&] { io::write_safetensors("", {}); }).find("names no file") != std::string::npos);
    CHECK(error_of([&] { io::write_safetensors(dir.path.string(), {}); }).find("is a directory") != std::string::npos);
}

TEST_CASE("files: a writer killed mid-write leaves a temporary with its pid, and the next write removes it") {
    TempDir dir;
    const std::string path = dir / "out.safetensors";
    std::vector<float> x(1 << 16, 2.0f);
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    if (child == 0) {  // writes, and stops for good inside its second write
        ::close(ready[0]);
        static int signal_fd;
        signal_fd = ready[1];
        io::set_write_fault([](size_t) {
            static int calls = 0;
            if (++calls == 2) {
                const char c = 1;
                (void)!::write(signal_fd, &c, 1);
                for (;;) ::pause();
            }
            return 0;
        });
        io::write_safetensors(path, {{"x", DType::f32, {1 << 16}, x.data()}});
        ::_exit(1);
    }
    ::close(ready[1]);
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    const std::vector<std::string> left = listing(dir.path);
    REQUIRE(left.size() == 1);
    CHECK(dir / left[0] == temp_name(path, child, left[0].substr(left[0].size() - 6)));

    // Leftovers of a live process (this one) or of another host, other names and symlinks stay.
    const std::string live = temp_name(path, getpid(), "abcdef");
    std::ofstream(live) << "live";
    const std::string other_host = dir / ("out.safetensors.tmp-elsewhere-" + std::to_string(dead_pid()) + "-abcdef");
    std::ofstream(other_host) << "other host";
    std::ofstream(dir / "out.safetensors.tmp-other") << "other";
    const std::string target = dir / "target";
    std::ofstream(target) << "keep";
    const std::string link = temp_name(path, dead_pid(), "zzzzzz");
    fs::create_symlink(target, link);
    const std::string partial = io::partial_dir_name(path, dead_pid());
    fs::create_directories(fs::path(partial) / "unet");
    fs::create_symlink(target, fs::path(partial) / "unet" / "link");

    const std::vector<std::string> removed = io::remove_stale_temps(path);
    REQUIRE(removed.size() == 2);
    CHECK(std::count(removed.begin(), removed.end(), dir / left[0]) == 1);
    CHECK(std::count(removed.begin(), removed.end(), partial) == 1);
    CHECK(fs::exists(live));
    CHECK(fs::exists(other_host));
    CHECK(fs::exists(dir / "out.safetensors.tmp-other"));
    CHECK(fs::is_symlink(link));
    CHECK(io::read_small_file(target) == "keep");  // a link inside a removed folder is not followed

    // write_safetensors cleans up after a killed writer of its own path by itself.
    const std::string stale = temp_name(path, dead_pid(), "qwerty");
    std::ofstream(stale) << "stale";
    io::write_safetensors(path, {{"x", DType::f32, {4}, x.data()}});
    CHECK(!fs::exists(stale));
    CHECK(io::SafetensorsFile(path).has("x"));
}

TEST_CASE("files: write_file_atomic (PNG, SVG, safetensors) names a full disk and removes a killed writer's leftovers") {
    TempDir dir;
    const std::string path = dir / "grid.png";
    io::write_file_atomic(path, std::string_view("old"));
    const std::string stale = temp_name(path, dead_pid(), "qwerty");
    std::ofstream(stale) << "stale";
    {
        FaultScope full(ENOSPC, 0);
        const std::string e = error_of([&] { io::write_file_atomic(path, std::string_view("new!")); });
        CHECK_MESSAGE(e.find(path + ": no space left on the device: 4 bytes") == 0, e);
    }
    CHECK(listing(dir.path) == std::vector<std::string>{"grid.png"});  // stale one removed, no new one left
    CHECK(io::read_small_file(path) == "old");
    const std::string parts[] = {"he", "", "llo"};
    const io::ByteRange ranges[] = {{parts[0].data(), 2}, {parts[1].data(), 0}, {parts[2].data(), 3}};
    io::write_file_atomic(path, ranges);
    CHECK(io::read_small_file(path) == "hello");
    CHECK((fs::status(path).permissions() & fs::perms::others_read) != fs::perms::none);
    CHECK(error_of([&] { io::write_file_atomic(dir.path.string(), std::string_view("x")); }) ==
          dir.path.string() + ": is a directory");
}

TEST_CASE("files: remove_stale_temps_in removes every dead writer's temporaries of a folder, files and folders alike") {
    TempDir dir;
    const long dead = dead_pid();
    const std::string a = temp_name(dir / "a.safetensors", dead, "abcdef"), b = temp_name(dir / "report.html", dead, "123456");
    const std::string folder = io::partial_dir_name(dir / ".last-state", dead);
    std::ofstream(a) << "a";
    std::ofstream(b) << "b";
    fs::create_directories(fs::path(folder) / "inner");
    std::ofstream(fs::path(folder) / "inner" / "lora.safetensors") << "partial";
    // A temporary folder made by mkdtemp (a folder set aside), a live writer's, another host's.
    const std::string aside = temp_name(dir / ".last-state", dead, "QWERTY");
    fs::create_directories(aside);
    const std::string live = temp_name(dir / "b.safetensors", ::getpid(), "abcdef");
    std::ofstream(live) << "live";
    std::ofstream(dir / ("c.tmp-elsewhere-" + std::to_string(dead) + "-abcdef")) << "theirs";
    std::ofstream(dir / (".tmp-" + std::to_string(dead))) << "no base name";
    std::vector<std::string> removed = io::remove_stale_temps_in(dir.path.string());
    std::sort(removed.begin(), removed.end());
    std::vector<std::string> want = {a, b, folder, aside};
    std::sort(want.begin(), want.end());
    CHECK(removed == want);
    CHECK(listing(dir.path).size() == 3);
    CHECK(io::remove_stale_temps_in((dir.path / "missing").string()).empty());
    CHECK(!io::process_alive(dead));
    CHECK(io::process_alive(::getpid()));
    CHECK(!io::process_alive(0));
    CHECK(!io::process_alive(-1));
    CHECK(!io::process_alive(long(1) << 40));
}

TEST_CASE("files: the messages of a place where nothing can be created name it: read-only, no permission, no folder") {
    CHECK(io::cannot_create("OUT", EROFS) == "OUT: read-only file system");
    CHECK(io::cannot_create("OUT", EACCES) == "OUT: permission denied");
    CHECK(io::cannot_create("OUT", ENOENT) == "OUT: its folder does not exist");
    CHECK(io::cannot_create("OUT", ENOSPC) == "OUT: no space left on the device");
    CHECK(io::cannot_create("OUT", EIO).find("OUT: cannot be created (") == 0);
    TempDir dir;
    CHECK(error_of([&] { io::check_can_create(dir.path.string(), dir / "x"); }) == "(no error)");
    // procfs takes no new files, even from root.
    CHECK(error_of([&] { io::check_can_create("/proc/self", "/proc/self/merged.safetensors"); }) ==
          "/proc/self/merged.safetensors: permission denied");
    CHECK(error_of([&] { io::check_can_create(dir / "missing", dir / "missing/x"); }) == dir / "missing/x" + ": its folder does not exist");
    CHECK(error_of([&] { io::write_file_atomic("/proc/self/x.png", std::string_view("x")); }).find("/proc/self/x.png: ") == 0);
}

TEST_CASE("files: paths compare by where they really are: symlinks, '.', '..', trailing slashes, objects") {
    TempDir dir;
    fs::create_directories(dir.path / "a" / "b");
    fs::create_directories(dir.path / "ab");
    fs::create_directory_symlink(dir.path / "a" / "b", dir.path / "link");
    std::ofstream(dir.path / "a" / "f") << "f";
    fs::create_hard_link(dir.path / "a" / "f", dir.path / "hard");
    const std::string a = dir / "a";
    CHECK(io::path_below(a, a) == "");
    CHECK(io::path_below(a + "/", a) == "");
    CHECK(io::path_below(dir / "a/./b/../b", a) == "b");
    CHECK(io::path_below(dir / "link/new/deeper", a) == "b/new/deeper");  // the tail need not exist
    CHECK(io::path_below(dir / "ab", a) == std::nullopt);                  // a prefix of the name is no parent
    CHECK(io::path_below(a, dir / "a/b") == std::nullopt);
    CHECK(io::path_below(dir / "hard", dir / "a/f") == "");                 // the same file by inode
    CHECK(io::same_object(dir / "hard", dir / "a/f"));
    CHECK(!io::same_object(dir / "a", dir / "ab"));
    CHECK(io::resolved_path(dir / "link/") == io::resolved_path(dir / "a/b"));
    CHECK(io::path_within("/", "/"));
    CHECK(io::path_within(a, "/"));
}
