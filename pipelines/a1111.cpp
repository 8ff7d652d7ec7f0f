#include "pipelines/a1111.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "ggml-lite/core/error.h"

namespace sd {

namespace {

std::string fmt_number(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

// A1111's quote(): values holding ',', '\n', ':' or '"' become a JSON string (non-ASCII kept).
std::string quote(const std::string& v) {
    if (v.find_first_of(",\n:\"") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) {
        if (c == '"' || c == '\\') q += '\\', q += c;
        else if (c == '\n') q += "\\n";
        else if (c == '\r') q += "\\r";
        else if (c == '\t') q += "\\t";
        else if ((unsigned char)c < 0x20) {
            char u[8];
            std::snprintf(u, sizeof u, "\\u%04x", unsigned(c));
            q += u;
        } else {
            q += c;
        }
    }
    return q + "\"";
}

}  // namespace

std::string a1111_infotext(const GenerationParams& p, uint64_t seed, const InfotextFields& f) {
    std::string s = p.prompt;
    for (const auto& [name, mult] : f.loras) s += gl::cat(s.empty() ? "" : " ", "<lora:", name, ":", fmt_number(mult), ">");
    if (!p.negative.empty()) s += "\nNegative prompt: " + p.negative;
    s += gl::cat("\nSteps: ", p.steps, ", Sampler: ", diffusion::a1111_sampler_name(p.sampler.kind, p.sampler.karras),
                 ", CFG scale: ", fmt_number(p.cfg_scale), ", Seed: ", seed, ", Size: ", p.width, "x", p.height);
    if (!f.model_name.empty()) s += ", Model: " + quote(f.model_name);
    const std::string_view eta_key = p.sampler.kind.def().a1111_eta_key;
    if (!eta_key.empty() && p.sampler.eta > 0) s += gl::cat(", ", eta_key, ": ", fmt_number(p.sampler.eta));
    if (f.clip_skip > 1) s += gl::cat(", Clip skip: ", f.clip_skip);
    if (!f.version.empty()) s += ", Version: " + quote(f.version);
    return s;
}

data::Bitmap make_grid(const std::vector<data::Bitmap>& images, int cols) {
    GL_CHECK(!images.empty(), "image grid: no images");
    const int n = int(images.size());
    if (cols <= 0) {  // A1111's default layout: round(sqrt(n)) rows
        const int rows = int(std::lround(std::sqrt(double(n))));
        cols = (n + rows - 1) / rows;
    }
    cols = std::min(cols, n);
    const int rows = (n + cols - 1) / cols;
    int cw = 0, ch = 0;
    for (const data::Bitmap& im : images) {
        GL_CHECK(im.channels == images.front().channels, "image grid: images with ", images.front().channels, " and ",
                 im.channels, " channels");
        GL_CHECK(im.pixels.size() == size_t(im.width) * size_t(im.height) * size_t(im.channels),
                 "image grid: an image's pixel count does not match its size");
        cw = std::max(cw, im.width);
        ch = std::max(ch, im.height);
    }
    data::Bitmap g;
    g.channels = images.front().channels;
    GL_CHECK(int64_t(cw) * cols <= 65535 && int64_t(ch) * rows <= 65535, "image grid: ", cols, "x", rows, " cells of ",
             cw, "x", ch, " exceed 65535 pixels on a side");
    g.width = cw * cols;
    g.height = ch * rows;
    g.pixels.assign(size_t(g.width) * size_t(g.height) * size_t(g.channels), 0);
    for (int i = 0; i < n; i++) {
        const data::Bitmap& im = images[size_t(i)];
        const size_t x0 = size_t(i % cols) * size_t(cw) + size_t(cw - im.width) / 2,
                     y0 = size_t(i / cols) * size_t(ch) + size_t(ch - im.height) / 2, c = size_t(g.channels);
        for (size_t y = 0; y < size_t(im.height); y++)
            std::memcpy(&g.pixels[((y0 + y) * size_t(g.width) + x0) * c], &im.pixels[y * size_t(im.width) * c],
                        size_t(im.width) * c);
    }
    return g;
}

}  // namespace sd
