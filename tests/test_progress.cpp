// The progress line on a fake terminal and a fake clock: one redrawn line (carriage return, erase,
// one write per redraw, redraws held back to the interval, the last state drawn on finish, a final
// newline), messages above it, fields dropped to fit the width; plain lines by steps and by time.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tools/common/progress.h"

using gl::cli::Progress;
using gl::cli::ProgressOptions;
using train::StepMetrics;

namespace {

StepMetrics state(int64_t step) {
    StepMetrics m;
    m.step = step;
    m.total_steps = 200;
    m.epoch = 1 + step / 50;
    m.total_epochs = 4;
    m.loss = 0.125;
    m.loss_mean = 0.1375;
    m.lr = {{"unet", 1e-4}};
    m.it_per_s = 3.21;
    m.images_per_s = 12.84;
    m.eta_s = 151;
    m.elapsed_s = 41;
    m.mem_used = size_t(1.25 * double(size_t(1) << 30));
    m.mem_plan = size_t(3) << 29;
    return m;
}

struct Screen {
    std::vector<std::string> writes;
    std::string all() const {
        std::string s;
        for (const std::string& w : writes) s += w;
        return s;
    }
};

}  // namespace

TEST_CASE("progress: terminal line fields and width") {
    const StepMetrics m = state(50);
    const std::string wide = Progress::terminal_line(m, 200);
    CHECK(wide ==
          "step 50/200 [#######.......................] 25% | ep 2/4 | loss 0.1375 | lr 1.0e-04 | 3.21 it/s | "
          "12.8 img/s | mem 1.25/1.50 GiB | ETA 2:31");
    // Narrower terminals drop memory, then images/s, epoch, lr, it/s, in that order; never wrap.
    for (int w = 12; w <= 200; w++) CHECK(int(Progress::terminal_line(m, w).size()) <= w - 1);
    const std::string narrow = Progress::terminal_line(m, 60);
    CHECK(narrow.find("mem") == std::string::npos);
    CHECK(narrow.find("img/s") == std::string::npos);
    CHECK(narrow.find("loss 0.1375") != std::string::npos);
    CHECK(narrow.find("ETA 2:31") != std::string::npos);
    CHECK(Progress::terminal_line(m, 30) == "step 50/200 | loss 0.1375");
    // Unknown rates and no total: no bar, no ETA.
    StepMetrics open = state(7);
    open.total_steps = 0;
    open.total_epochs = 0;
    open.it_per_s = open.images_per_s = open.eta_s = train::kUnknown;
    open.mem_used = open.mem_plan = 0;
    open.lr = {{"unet", 1e-4}, {"text_encoder", 5e-5}};
    CHECK(Progress::terminal_line(open, 120) == "step 7 | ep 1 | loss 0.1375 | lr 1.0e-04,5.0e-05 | -- it/s | -- img/s");
}

TEST_CASE("progress: plain line") {
    StepMetrics m = state(200);
    m.lr = {{"unet", 1e-4}, {"text_encoder", 5e-5}};
    m.mem_used = 300 << 20;
    m.mem_plan = 512 << 20;
    m.applied = false;
    CHECK(Progress::plain_line(m) ==
          "step 200/200 (100%)  epoch 5/4  loss 0.1375 (last 0.125)  lr unet 1.00e-04 text_encoder 5.00e-05  3.21 it/s  "
          "12.8 images/s  mem 300/512 MiB  elapsed 0:41  ETA 2:31  (update skipped)");
    CHECK(gl::cli::format_duration(3725) == "1:02:05");
    CHECK(gl::cli::format_duration(59.6) == "1:00");
    CHECK(gl::cli::format_duration(-1) == "--:--");
}

TEST_CASE("progress: a terminal redraws one line, held back to the interval") {
    Screen scr;
    double now = 0;
    int cols = 100;
    {
        Progress p({.tty = true, .redraw_seconds = 0.5}, [&](std::string_view s) { scr.writes.emplace_back(s); },
                   [&] { return cols; }, [&] { return now; });
        p.update(state(1));  // the first state always draws
        REQUIRE(scr.writes.size() == 1);
        CHECK(scr.writes[0].starts_with("\rstep 1/200 ["));
        CHECK(scr.writes[0].ends_with("\x1b[K"));
        now = 0.2;
        p.update(state(2));  // held back
        CHECK(scr.writes.size() == 1);
        now = 0.6;
        cols = 40;  // the terminal was resized: the next line fits the new width
        p.update(state(3));
        REQUIRE(scr.writes.size() == 2);
        CHECK(scr.writes[1] == "\r" + Progress::terminal_line(state(3), 40) + "\x1b[K");
        now = 0.7;
        p.update(state(4));  // held back, then a message: the line is cleared, the message printed, redrawn
        p.print("saved step 4");
        REQUIRE(scr.writes.size() == 4);
        CHECK(scr.writes[2] == "\r\x1b[Ksaved step 4\n");
        CHECK(scr.writes[3].starts_with("\rstep 4/200"));
        now = 0.8;
        p.update(state(5));  // held back; finish draws it and ends the line
        p.finish();
        REQUIRE(scr.writes.size() == 6);
        CHECK(scr.writes[4].starts_with("\rstep 5/200"));
        CHECK(scr.writes[5] == "\n");
        p.finish();  // idempotent, and the destructor adds nothing
    }
    CHECK(scr.writes.size() == 6);
    // No write ever holds a newline except messages and the end: the line never scrolls.
    for (size_t i = 0; i < scr.writes.size(); i++)
        if (i != 2 && i != 5) CHECK(scr.writes[i].find('\n') == std::string::npos);
}

TEST_CASE("progress: the last step draws at once, and the destructor ends the line") {
    Screen scr;
    double now = 0;
    {
        Progress p({.tty = true, .redraw_seconds = 10}, [&](std::string_view s) { scr.writes.emplace_back(s); },
                   [] { return 80; }, [&] { return now; });
        p.update(state(199));
        p.update(state(200));
        CHECK(scr.writes.size() == 2);
    }
    CHECK(scr.all().ends_with("\x1b[K\n"));
}

TEST_CASE("progress: plain lines by steps and by time") {
    Screen scr;
    double now = 0;
    Progress p({.tty = false, .every_steps = 50, .every_seconds = 30}, [&](std::string_view s) { scr.writes.emplace_back(s); },
               [] { return 80; }, [&] { return now; });
    std::vector<int64_t> printed;
    for (int64_t s = 1; s <= 200; s++) {
        now = double(s);  // one step per second
        const size_t before = scr.writes.size();
        p.update(state(s));
        if (scr.writes.size() > before) printed.push_back(s);
    }
    // The first, every 30 s since the last line, every 50th step, the last.
    CHECK(printed == std::vector<int64_t>{1, 31, 50, 80, 100, 130, 150, 180, 200});
    for (const std::string& w : scr.writes) {
        CHECK(w.ends_with("\n"));
        CHECK(w.find('\r') == std::string::npos);
        CHECK(w.find('\x1b') == std::string::npos);
    }
    p.print("note");
    CHECK(scr.writes.back() == "note\n");
    const size_t n = scr.writes.size();
    p.finish();
    CHECK(scr.writes.size() == n);  // no progress line is open in plain mode
}

TEST_CASE("progress: on a pseudo-terminal, its width, and the line ended from a signal handler") {
    const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
    REQUIRE(master >= 0);
    REQUIRE(::grantpt(master) == 0);
    REQUIRE(::unlockpt(master) == 0);
    const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
    REQUIRE(slave >= 0);
    winsize ws{};
    ws.ws_col = 50;
    ws.ws_row = 20;
    REQUIRE(::ioctl(slave, TIOCSWINSZ, &ws) == 0);
    auto read_all = [&] {
        std::string got;
        char buf[512];
        ::fcntl(master, F_SETFL, O_NONBLOCK);
        for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
        return got;
    };
    {
        Progress p = Progress::on_fd(slave);
        p.update(state(10));
        const std::string line = read_all();
        CHECK(line == "\r" + Progress::terminal_line(state(10), 50) + "\x1b[K");
        Progress::end_line_from_signal();
        CHECK(read_all().find('\n') != std::string::npos);  // the terminal may turn it into "\r\n"
        Progress::end_line_from_signal();                    // only once
        CHECK(read_all().empty());
    }
    ::close(slave);
    ::close(master);

    // A pipe is not a terminal: plain lines, and nothing for a signal handler to end.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    {
        Progress p = Progress::on_fd(fds[1]);
        p.update(state(1));
        Progress::end_line_from_signal();
    }
    ::close(fds[1]);
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
    ::close(fds[0]);
    CHECK(got == Progress::plain_line(state(1)) + "\n");
}
