#include "train/run/save.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "ggml-lite/core/error.h"

namespace train {

namespace fs = std::filesystem;

namespace {
std::string base_name(const RunConfig& c, SaveKind k) {
    if (c.output_name) return *c.output_name;
    return k == SaveKind::step ? "at" : k == SaveKind::epoch ? "epoch" : "last";  // kohya's defaults
}

std::string numbered(const RunConfig& c, SaveKind k, int64_t n) {
    char buf[32];
    if (k == SaveKind::step) std::snprintf(buf, sizeof buf, "-step%08lld", (long long)n);
    else if (k == SaveKind::epoch) std::snprintf(buf, sizeof buf, "-%06lld", (long long)n);
    else buf[0] = '\0';
    return base_name(c, k) + buf;
}

std::string errno_text(int e) { return std::strerror(e); }
}  // namespace

std::string lora_file_name(const RunConfig& c, SaveKind k, int64_t number) {
    return numbered(c, k, number) + "." + c.save_model_as;
}

std::string state_dir_name(const RunConfig& c, SaveKind k, int64_t number) { return numbered(c, k, number) + "-state"; }

std::optional<int64_t> step_to_remove(const RunConfig& c, int64_t step, bool state) {
    const std::optional<int> n = state && c.save_last_n_steps_state ? c.save_last_n_steps_state : c.save_last_n_steps;
    if (!n || !c.save_every_n_steps) return std::nullopt;
    // The oldest save more than N steps back, on the save grid: kohya's step - N - 1, floored.
    int64_t r = step - *n - 1;
    if (r < 0) return std::nullopt;
    r -= r % *c.save_every_n_steps;
    if (r <= 0) return std::nullopt;
    return r;
}

std::optional<int64_t> epoch_to_remove(const RunConfig& c, int64_t epoch, bool state) {
    const std::optional<int> n =
        state && c.save_last_n_epochs_state ? c.save_last_n_epochs_state : c.save_last_n_epochs;
    if (!n || !c.save_every_n_epochs) return std::nullopt;
    const int64_t r = epoch - int64_t(*c.save_every_n_epochs) * *n;
    if (r <= 0) return std::nullopt;
    return r;
}

void check_output_dir(const fs::path& dir) {
    std::error_code ec;
    if (fs::exists(dir, ec)) {
        GL_CHECK(fs::is_directory(dir, ec), "--output_dir ", dir.string(), ": exists and is not a folder");
    } else {
        fs::create_directories(dir, ec);
        GL_CHECK(!ec, "--output_dir ", dir.string(), ": cannot be created (", ec.message(), ")");
    }
    const fs::path probe = dir / gl::cat(".sdtrain-probe-", ::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    GL_CHECK(fd >= 0, "--output_dir ", dir.string(), ": files cannot be created there (", errno_text(errno), ")");
    ::close(fd);
    ::unlink(probe.c_str());
}

void write_dir_atomically(const fs::path& dir, const std::function<void(const fs::path&)>& fill) {
    const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
    const fs::path tmp = parent / gl::cat(".", dir.filename().string(), ".tmp-", ::getpid());
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directory(tmp, ec);
    GL_CHECK(!ec, "saving ", dir.string(), ": cannot create ", tmp.string(), " (", ec.message(), ")");
    try {
        fill(tmp);
        // Each file inside was written and synced by its writer; the folder entry itself now.
        const int dfd = ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            ::fsync(dfd);
            ::close(dfd);
        }
        if (fs::exists(dir, ec)) {
            // Swap in one step where the kernel can (renameat2 RENAME_EXCHANGE), else two renames.
            if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
                const fs::path old = parent / gl::cat(".", dir.filename().string(), ".old-", ::getpid());
                fs::rename(dir, old);
                fs::rename(tmp, dir);
                fs::remove_all(old, ec);
                return;
            }
            fs::remove_all(tmp, ec);  // now the previous folder
        } else {
            fs::rename(tmp, dir);
        }
    } catch (const fs::filesystem_error& e) {
        fs::remove_all(tmp, ec);
        gl::fail("saving ", dir.string(), ": ", e.code().message());
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
}

void remove_save(const fs::path& p) {
    std::error_code ec;
    fs::remove_all(p, ec);
    GL_CHECK(!ec, "removing the old save ", p.string(), ": ", ec.message());
}

}  // namespace train
