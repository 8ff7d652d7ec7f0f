#include "train/run/save.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

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

void remove_created_dirs(const std::vector<fs::path>& created) {
    for (auto it = created.rbegin(); it != created.rend(); ++it)
        if (::rmdir(it->c_str()) != 0) return;  // not empty: the run left something worth keeping
}

std::vector<fs::path> check_output_dir(const fs::path& dir) {
    std::error_code ec;
    std::vector<fs::path> created;
    if (fs::exists(dir, ec)) {
        GL_CHECK(fs::is_directory(dir, ec), "--output_dir ", dir.string(), ": exists and is not a folder");
    } else {
        for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && !fs::exists(p, ec);
             p = p.parent_path()) {
            created.insert(created.begin(), p);
            if (p == p.parent_path()) break;
        }
        fs::create_directories(dir, ec);
        if (ec) {
            remove_created_dirs(created);  // those a partial success made
            gl::fail("--output_dir ", dir.string(), ": cannot be created (", ec.message(), ")");
        }
    }
    std::string probe = gl::io::temp_file_pattern((dir / ".sdtrain-probe").string());
    const int fd = ::mkstemp(probe.data());
    if (fd < 0) {
        const int e = errno;
        remove_created_dirs(created);
        gl::fail("--output_dir ", dir.string(), ": files cannot be created there (", errno_text(e), ")");
    }
    ::close(fd);
    ::unlink(probe.c_str());
    return created;
}

std::vector<std::string> remove_run_leftovers(const fs::path& dir) {
    std::vector<std::string> removed = gl::io::remove_stale_temps_in(dir.string());
    for (const char* sub : {"sample", "latent_cache", "text_encoder_cache"})
        for (std::string& r : gl::io::remove_stale_temps_in((dir / sub).string())) removed.push_back(std::move(r));
    // Earlier builds named a state folder's temporaries ".<name>.tmp-<pid>" and ".<name>.old-<pid>",
    // without the host: those are taken as this host's.
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        const size_t dash = name.rfind('-');
        if (name[0] != '.' || dash == std::string::npos || dash + 1 == name.size() || dash < 5) continue;
        const std::string kind = name.substr(dash - 4, 4), digits = name.substr(dash + 1);
        if ((kind != ".tmp" && kind != ".old") || digits.size() > 9 ||
            digits.find_first_not_of("0123456789") != std::string::npos || !it->is_directory(ec) ||
            it->is_symlink(ec) || gl::io::process_alive(std::stol(digits)))
            continue;
        std::error_code rm;
        fs::remove_all(it->path(), rm);
        if (!rm) removed.push_back(it->path().string());
    }
    return removed;
}

void write_dir_atomically(const fs::path& dir, const std::function<void(const fs::path&)>& fill) {
    const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
    const std::string hidden = (parent / gl::cat(".", dir.filename().string())).string();  // built out of sight
    const fs::path tmp = gl::io::partial_dir_name(hidden);
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
            // Swap in one step where the kernel can (renameat2 RENAME_EXCHANGE), else two renames
            // with the old folder set aside under a temporary name (removed by the next run should
            // this one be killed in between).
            if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
                std::string old = gl::io::temp_file_pattern(hidden);
                GL_CHECK(::mkdtemp(old.data()), "saving ", dir.string(), ": cannot create ", old, " (",
                         errno_text(errno), ")");
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
