// The sdtrain binary run in the background by a test, stdout and stderr in a log file; killed (and
// reaped) when the test leaves it running. Include only where GL_SDTRAIN_BIN is defined.
#pragma once
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace gltest {

struct SdtrainChild {
    pid_t pid = -1;
    std::filesystem::path log;

    SdtrainChild(const std::vector<std::string>& args, const std::filesystem::path& log_file) : log(log_file) {
        std::vector<std::string> all{GL_SDTRAIN_BIN};
        all.insert(all.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (std::string& a : all) argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        REQUIRE(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0);
        posix_spawn_file_actions_destroy(&fa);
    }
    SdtrainChild(const SdtrainChild&) = delete;
    SdtrainChild& operator=(const SdtrainChild&) = delete;
    ~SdtrainChild() {
        if (pid > 0) {  // a test that failed midway: leave no process behind
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    }
    // The wait status, or nullopt after `seconds` (the destructor then kills it).
    std::optional<int> wait(double seconds) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        int status = 0;
        while (std::chrono::steady_clock::now() < end) {
            if (::waitpid(pid, &status, WNOHANG) == pid) {
                pid = -1;
                return status;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return std::nullopt;
    }
    std::string text() const { return slurp(log); }
};

}  // namespace gltest
