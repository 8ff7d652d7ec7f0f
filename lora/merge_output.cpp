#include "lora/merge_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/paths.h"

namespace lora {

namespace fs = std::filesystem;

namespace {

const char* kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISREG(m)) return "a file";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "a device";
}

bool is_weight_file(const std::string& name) {
    for (const char* ext : {".safetensors", ".bin", ".ckpt", ".pt", ".pth"}) {
        const size_t n = std::strlen(ext);
        if (name.size() > n && name.compare(name.size() - n, n, ext) == 0) return true;
    }
    return false;
}

struct Walker {
    FolderCopy& plan;
    std::set<std::string> skip_weights_in;      // relative folders whose weight files are replaced
    std::vector<std::pair<dev_t, ino_t>> path;  // the folders being walked, for loop detection

    void walk(const fs::path& src, const fs::path& rel) {
        std::vector<std::string> names;
        std::error_code ec;
        for (fs::directory_iterator it(src, ec), end; !ec && it != end; it.increment(ec))
            names.push_back(it->path().filename().string());
        if (ec) gl::fail("lora merge: cannot list ", src.string(), ": ", ec.message());
        std::sort(names.begin(), names.end());
        for (const std::string& name : names) {
            const fs::path s = src / name, r = rel / name;
            struct stat st {};
            if (::stat(s.c_str(), &st) != 0) {
                struct stat lst {};
                const bool dangling = ::lstat(s.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
                gl::fail("lora merge: ", s.string(), dangling ? ": a symlink whose target is missing (an incomplete download?)"
                                                              : gl::cat(": cannot stat: ", std::strerror(errno)));
            }
            plan.parts.push_back(gl::io::resolved_path(s.string()));
            if (S_ISDIR(st.st_mode)) {
                if (name[0] == '.') continue;  // .git, .cache: version control and tool caches, not the model
                const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
                GL_CHECK(std::find(path.begin(), path.end(), id) == path.end(), "lora merge: ", s.string(),
                         " leads back to a folder above it (a symlink loop)");
                plan.dirs.push_back(r.string());
                path.push_back(id);
                walk(s, r);
                path.pop_back();
            } else if (S_ISREG(st.st_mode)) {
                if (skip_weights_in.count(rel.string()) && is_weight_file(name)) continue;
                plan.files.emplace_back(s.string(), r.string());
                plan.bytes += uint64_t(st.st_size);
            } else {
                gl::fail("lora merge: ", s.string(), " is ", kind_of(st.st_mode),
                         "; a model folder holds only files and folders, and it is not copied");
            }
        }
    }
};

}  // namespace

void check_merge_output(const std::string& base_path, const std::vector<std::string>& parts, bool base_is_folder,
                        const std::string& out, bool overwrite) {
    GL_CHECK(!out.empty(), "lora merge: the output path is empty");
    struct stat bst {};
    GL_CHECK(::stat(base_path.c_str(), &bst) == 0, "lora merge: cannot stat the base ", base_path, ": ",
             std::strerror(errno));
    struct stat lst {}, ost {};
    const bool exists = ::lstat(out.c_str(), &lst) == 0;
    const bool reaches = ::stat(out.c_str(), &ost) == 0;  // follows symlinks
    GL_CHECK(!gl::io::same_object(out, base_path), "lora merge: ", out, " is the base ", base_path,
             " itself; the base is never written, choose another output");
    const std::string out_real = gl::io::resolved_path(out);
    for (const std::string& part : parts) {
        if (const std::optional<std::string> rel = gl::io::path_below(out_real, part))
            gl::fail("lora merge: ", out, rel->empty() ? " is " : " lies inside ", part, ", part of the base ",
                     base_path, "; the base is never written, choose another output");
        GL_CHECK(!gl::io::path_within(part, out_real), "lora merge: ", out, " holds ", part, ", part of the base ",
                 base_path, "; replacing it would delete the base");
    }
    if (!exists) {
        const fs::path parent = fs::path(out).parent_path();
        std::error_code ec;
        GL_CHECK(parent.empty() || fs::is_directory(parent, ec), "lora merge: the folder ", parent.string(), " of ", out,
                 " does not exist");
        return;
    }
    GL_CHECK(overwrite, "lora merge: ", out, " exists; choose a new path, or allow replacing it (gl-merge --overwrite)");
    if (base_is_folder)
        GL_CHECK(reaches && S_ISDIR(ost.st_mode), "lora merge: ", out, " exists and is ",
                 reaches ? kind_of(ost.st_mode) : "a dangling symlink", "; a diffusers base is merged into a folder");
    else
        GL_CHECK(!reaches || S_ISREG(ost.st_mode), "lora merge: ", out, " exists and is ", kind_of(ost.st_mode),
                 "; a single-file base is merged into a .safetensors file");
}

FolderCopy plan_folder_copy(const std::string& base_dir, const std::vector<std::string>& merged) {
    FolderCopy plan;
    Walker w{plan, {}, {}};
    for (const std::string& m : merged) w.skip_weights_in.insert(fs::path(m).parent_path().string());
    struct stat st {};
    GL_CHECK(::stat(base_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "lora merge: ", base_dir, " is not a folder");
    w.path.push_back({st.st_dev, st.st_ino});
    plan.parts.push_back(gl::io::resolved_path(base_dir));
    w.walk(fs::path(base_dir), fs::path());
    return plan;
}

void copy_folder(const FolderCopy& plan, const std::string& to) {
    GL_CHECK(::mkdir(to.c_str(), 0755) == 0, "lora merge: cannot create ", to, ": ", std::strerror(errno));
    for (const std::string& d : plan.dirs) {
        const std::string p = (fs::path(to) / d).string();
        GL_CHECK(::mkdir(p.c_str(), 0755) == 0, "lora merge: cannot create ", p, ": ", std::strerror(errno));
    }
    for (const auto& [src, rel] : plan.files) gl::io::copy_file_contents(src, (fs::path(to) / rel).string());
}

void publish_folder(const std::string& partial, const std::string& out, bool replace) {
    // renameat2 makes both cases one atomic step: RENAME_NOREPLACE fails when out appeared in the
    // meantime, RENAME_EXCHANGE swaps the old folder out (left under the partial name, removed next).
    const unsigned flags = replace ? RENAME_EXCHANGE : RENAME_NOREPLACE;
    if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, out.c_str(), flags) == 0) {
        std::error_code ec;
        if (replace) fs::remove_all(partial, ec);
        return;
    }
    const int e = errno;
    GL_CHECK(e == EINVAL || e == ENOSYS, "lora merge: cannot rename ", partial, " to ", out, ": ", std::strerror(e));
    // File systems without renameat2 flags: the old folder is moved aside under a temporary name
    // (removed by the next run should this one be killed in between).
    if (replace) {
        std::string aside = gl::io::temp_file_pattern(out);
        GL_CHECK(::mkdtemp(aside.data()), "lora merge: cannot create ", aside, ": ", std::strerror(errno));
        GL_CHECK(::rename(out.c_str(), aside.c_str()) == 0, "lora merge: cannot move ", out, " aside: ", std::strerror(errno));
        GL_CHECK(::rename(partial.c_str(), out.c_str()) == 0, "lora merge: cannot rename ", partial, " to ", out, ": ",
                 std::strerror(errno), " (the previous ", out, " is in ", aside, ")");
        std::error_code ec;
        fs::remove_all(aside, ec);
        return;
    }
    std::error_code ec;
    GL_CHECK(!fs::exists(fs::symlink_status(out, ec)), "lora merge: ", out, " appeared while merging; it was left as it is");
    GL_CHECK(::rename(partial.c_str(), out.c_str()) == 0, "lora merge: cannot rename ", partial, " to ", out, ": ",
             std::strerror(errno));
}

}  // namespace lora
