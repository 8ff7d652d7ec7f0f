#include "data/face_crop.h"

#include <algorithm>
#include <vector>

#include "data/image.h"
#include "data/resize.h"
#include "ggml-lite/core/error.h"

namespace data {
namespace {

constexpr int64_t kLimit = int64_t(1) << 30;

// Python's int() of a decimal string: spaces around, one optional sign, at least one digit.
std::optional<int64_t> python_int(const std::string& s) {
    size_t b = 0, e = s.size();
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    while (b < e && space(s[b])) b++;
    while (e > b && space(s[e - 1])) e--;
    bool negative = false;
    if (b < e && (s[b] == '+' || s[b] == '-')) negative = s[b++] == '-';
    if (b == e) return std::nullopt;
    int64_t v = 0;
    for (size_t i = b; i < e; i++) {
        if (s[i] < '0' || s[i] > '9') return std::nullopt;
        v = std::min<int64_t>(v * 10 + (s[i] - '0'), kLimit + 1);  // saturates: refused below
    }
    return negative ? -v : v;
}

// Python's a // b for b > 0.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

std::optional<FaceBox> face_box_of_name(const std::filesystem::path& image) {
    const std::string stem = image.stem().string();
    std::vector<std::string> parts;
    size_t start = 0;
    for (;;) {
        const size_t at = stem.find('_', start);
        parts.push_back(stem.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos) break;
        start = at + 1;
    }
    if (parts.size() < 5) return std::nullopt;
    int v[4];
    for (size_t i = 0; i < 4; i++) {
        const std::string& p = parts[parts.size() - 4 + i];
        const std::optional<int64_t> x = python_int(p);
        GL_CHECK(x, image.string(), ": face_crop_aug_range reads the face box from the name's last four '_' parts "
                 "(<name>_<cx>_<cy>_<w>_<h>), and '", p, "' is not an integer (kohya's int() stops the run there); "
                 "rename the file or move it to a subset without face_crop_aug_range");
        GL_CHECK(*x >= -kLimit && *x <= kLimit, image.string(), ": face box value ", p, " out of range");
        v[i] = int(*x);
    }
    const FaceBox box{v[0], v[1], v[2], v[3]};
    GL_CHECK(box.cx <= 0 || std::max(box.w, box.h) != 0, image.string(),
             ": the face box of the name has width and height 0 (kohya divides by the face size)");
    return box;
}

FaceCrop plan_face_crop(int width, int height, int target_w, int target_h, const FaceBox& face,
                        std::array<double, 2> range, bool random_crop, FaceCropDraws& draws, const std::string& name) {
    GL_CHECK(width > 0 && height > 0 && target_w > 0 && target_h > 0, name, ": face crop of a ", width, "x", height,
             " image to ", target_w, "x", target_h);
    GL_CHECK(range[0] > 0 && range[0] <= range[1], name, ": face_crop_aug_range must be 0 < low <= high, got ",
             range[0], ",", range[1]);
    FaceCrop c;
    if (width == target_w && height == target_h) {
        c.keep = true;
        c.resized_w = width;
        c.resized_h = height;
        return c;
    }
    // kohya's arithmetic, in doubles and Python's integer rules.
    const int64_t face_size = std::max(face.w, face.h);
    const int64_t size = std::min(target_w, target_h);
    double min_scale = std::max(double(target_h) / height, double(target_w) / width);
    min_scale = std::min(1.0, std::max(min_scale, double(size) / (double(face_size) * range[1])));
    const double max_scale = std::min(1.0, std::max(min_scale, double(size) / (double(face_size) * range[0])));
    c.scale = min_scale >= max_scale ? min_scale : draws.uniform(min_scale, max_scale);
    const int64_t nh = int64_t(height * c.scale + 0.5), nw = int64_t(width * c.scale + 0.5);
    GL_CHECK(nh >= target_h && nw >= target_w, name, ": ", width, "x", height, " is smaller than the resolution ",
             target_w, "x", target_h, " on a side; kohya's face crop only shrinks (its assertion: internal error, "
             "small scale ", c.scale, "); use a larger image or bucketing");
    c.resized_w = int(nw);
    c.resized_h = int(nh);
    const int64_t face_p[2] = {int64_t(face.cy * c.scale + 0.5), int64_t(face.cx * c.scale + 0.5)};
    const int64_t target[2] = {target_h, target_w}, length[2] = {nh, nw};
    int64_t at[2];
    for (int axis = 0; axis < 2; axis++) {
        int64_t p1 = face_p[axis] - target[axis] / 2;
        if (random_crop) {
            const int64_t r = std::max(length[axis] - face_p[axis], face_p[axis]);
            const int64_t a = draws.randint(0, r);
            p1 = p1 + (a + draws.randint(0, r)) - r;
        } else if (range[0] != range[1] && face_size > size / 10 && face_size >= 40) {
            p1 = p1 + draws.randint(floor_div(-face_size, 20), face_size / 20);
        }
        at[axis] = std::max<int64_t>(0, std::min(p1, length[axis] - target[axis]));
    }
    c.y = int(at[0]);
    c.x = int(at[1]);
    return c;
}

PreparedImage prepare_face_crop(const ImageEntry& e, const FaceCrop& plan, int target_w, int target_h, bool flip,
                                bool keep_alpha) {
    DecodeOptions dopt;
    dopt.alpha = keep_alpha ? AlphaMode::mask : AlphaMode::white;
    Image img = load_image(e.path, dopt);
    if (img.width != e.width || img.height != e.height)
        throw ImageError(e.path.string(), gl::cat("decoded as ", img.width, "x", img.height, ", listed as ", e.width,
                                                  "x", e.height, " (the file changed during the run)"));
    if (!plan.keep) {
        img.rgb = resize_kohya(img.rgb.data(), img.width, img.height, 3, plan.resized_w, plan.resized_h, e.resize);
        if (keep_alpha)
            img.alpha = resize_kohya(img.alpha.data(), img.width, img.height, 1, plan.resized_w, plan.resized_h, e.resize);
        img.width = plan.resized_w;
        img.height = plan.resized_h;
    }
    PreparedImage p;
    p.width = target_w;
    p.height = target_h;
    p.rgb = crop(img.rgb.data(), img.width, img.height, 3, plan.x, plan.y, target_w, target_h);
    if (flip) flip_horizontal(p.rgb.data(), target_w, target_h, 3);
    if (keep_alpha) {
        p.alpha = crop(img.alpha.data(), img.width, img.height, 1, plan.x, plan.y, target_w, target_h);
        if (flip) flip_horizontal(p.alpha.data(), target_w, target_h, 1);
    }
    return p;
}

}  // namespace data
