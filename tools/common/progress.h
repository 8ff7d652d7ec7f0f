// The training progress line. On a terminal: one line redrawn in place (carriage return, erase to
// the end of the line, a single write each time, at most every redraw_seconds), fitted to the
// terminal's width by dropping the least important fields, ended with a newline by finish().
// Elsewhere (a log file, a pipe): a plain line every `every_steps` steps or `every_seconds`
// seconds, and for the first and the last step. It shows a train::StepMetrics: step / total,
// epoch, it/s, images/s, the running mean loss, the learning rate, device memory in use against
// the plan, ETA. The clock and the output are injectable, so tests drive it without a terminal.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "train/metrics.h"

namespace gl::cli {

struct ProgressOptions {
    bool tty = false;             // redraw one line instead of printing lines
    int every_steps = 0;          // plain lines: every N steps (0: by time only)
    double every_seconds = 10;    // plain lines: at least this often (<= 0: by steps only)
    double redraw_seconds = 0.1;  // terminal: the shortest time between redraws (the last step always draws)
};

class Progress {
public:
    using Sink = std::function<void(std::string_view)>;  // gets whole writes, never split
    using Columns = std::function<int()>;               // the terminal's width now

    Progress(const ProgressOptions& o, Sink sink, Columns columns = [] { return 80; },
             train::Clock clock = train::monotonic_seconds);
    // Progress on a file descriptor (the standard output or error): a terminal when isatty(fd)
    // (width from the terminal, else $COLUMNS, else 80), plain lines otherwise.
    static Progress on_fd(int fd, int every_steps = 0, double every_seconds = 10);
    ~Progress();
    Progress(Progress&& o) noexcept;
    Progress& operator=(Progress&&) = delete;

    void update(const train::StepMetrics& m);
    // A message line (a save, a sample, a warning). On a terminal the progress line is cleared
    // first and drawn again below the message.
    void print(std::string_view line);
    // Ends the progress line (terminal; the last state is drawn first if a redraw was held back).
    // Idempotent; the destructor calls it.
    void finish();

    // For a SIGINT / SIGTERM handler: ends an open progress line of an on_fd() progress with a
    // newline, so the shell's prompt or the next message starts on its own line. Async-signal-safe;
    // does nothing when no such line is open.
    static void end_line_from_signal();

    // The lines themselves: the terminal's (at most `width` - 1 characters, so the terminal never
    // wraps it) and the plain one.
    static std::string terminal_line(const train::StepMetrics& m, int width);
    static std::string plain_line(const train::StepMetrics& m);

private:
    void draw(const train::StepMetrics& m);
    ProgressOptions o_;
    Sink sink_;
    Columns columns_;
    train::Clock clock_;
    std::optional<train::StepMetrics> last_;  // the latest state
    bool open_ = false;                       // terminal: a progress line is on screen
    bool held_ = false;                       // terminal: last_ not drawn yet (redraw limit)
    int fd_ = -1;                             // on_fd()'s descriptor, for end_line_from_signal
    double last_draw_ = -1e300;
};

// "1:02:03", "2:03"; "--:--" when not finite or negative.
std::string format_duration(double seconds);

}  // namespace gl::cli
