// The arithmetic here follows OpenCV's resizeArea / resizeAreaFast and Pillow's ImagingResample
// step by step (float vs double, rounding modes, accumulation order), because the point is the same
// bytes, not merely a similar picture. Compiled without floating-point contraction (CMake sets
// -ffp-contract=off for this file): a fused multiply-add would round differently from OpenCV.
#include "data/resize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "ggml-lite/core/error.h"

namespace data {
namespace {

void check_sizes(const char* what, int sw, int sh, int ch, int dw, int dh) {
    GL_CHECK(ch >= 1 && ch <= 4, what, ": channels must be 1..4, got ", ch);
    constexpr int kMax = 1 << 20;
    GL_CHECK(sw > 0 && sh > 0 && dw > 0 && dh > 0 && sw <= kMax && sh <= kMax && dw <= kMax && dh <= kMax, what,
             ": bad sizes ", sw, "x", sh, " -> ", dw, "x", dh);
    GL_CHECK(int64_t(dw) * dh * ch <= (int64_t(1) << 34), what, ": output ", dw, "x", dh, " too large");
}

uint8_t round_float_to_u8(float v) {
    const long r = std::lrintf(v);  // round half to even, as OpenCV's cvRound
    return uint8_t(std::clamp<long>(r, 0, 255));
}

// OpenCV's resizeAreaFast: whole cells of fx x fy source pixels.
std::vector<uint8_t> area_integer(const uint8_t* src, int sw, int ch, int dw, int dh, int fx, int fy) {
    std::vector<uint8_t> out(size_t(dw) * dh * ch);
    const bool two_by_two = fx == 2 && fy == 2 && ch != 2;  // OpenCV's vector path: (sum + 2) >> 2
    const float inv_area = 1.f / float(fx * fy);
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++)
            for (int c = 0; c < ch; c++) {
                int sum = 0;
                for (int j = 0; j < fy; j++) {
                    const uint8_t* row = src + (size_t(y) * fy + j) * sw * ch;
                    for (int i = 0; i < fx; i++) sum += row[(size_t(x) * fx + i) * ch + c];
                }
                out[(size_t(y) * dw + x) * ch + c] =
                    two_by_two ? uint8_t((sum + 2) >> 2) : round_float_to_u8(float(sum) * inv_area);
            }
    return out;
}

struct AreaTap {
    int di;  // destination index (pixel)
    int si;  // source index (pixel)
    float alpha;
};

// OpenCV's computeResizeAreaTab: the overlap of each source pixel with each destination cell.
std::vector<AreaTap> area_taps(int ssize, int dsize, double scale) {
    std::vector<AreaTap> tab;
    for (int dx = 0; dx < dsize; dx++) {
        const double fsx1 = dx * scale, fsx2 = fsx1 + scale;
        const double cell = std::min(scale, ssize - fsx1);
        int sx1 = int(std::ceil(fsx1)), sx2 = int(std::floor(fsx2));
        sx2 = std::min(sx2, ssize - 1);
        sx1 = std::min(sx1, sx2);
        if (sx1 - fsx1 > 1e-3) tab.push_back({dx, sx1 - 1, float((sx1 - fsx1) / cell)});
        for (int sx = sx1; sx < sx2; sx++) tab.push_back({dx, sx, float(1.0 / cell)});
        if (fsx2 - sx2 > 1e-3) tab.push_back({dx, sx2, float(std::min(std::min(fsx2 - sx2, 1.), cell) / cell)});
    }
    return tab;
}

// CH > 0: the channel count known at compile time (the loops unroll); 0: `ch` at run time. The
// arithmetic is the same either way.
template <int CH>
std::vector<uint8_t> area_fractional(const uint8_t* src, int sw, int sh, int ch_rt, int dw, int dh, double sx,
                                     double sy) {
    const int ch = CH > 0 ? CH : ch_rt;
    const std::vector<AreaTap> xtab = area_taps(sw, dw, sx), ytab = area_taps(sh, dh, sy);
    const size_t row = size_t(dw) * ch;
    std::vector<uint8_t> out(row * dh);
    std::vector<float> buf(row), sum(row, 0.f);
    int prev = ytab.front().di;
    for (const AreaTap& yt : ytab) {
        const uint8_t* s = src + size_t(yt.si) * sw * ch;
        std::fill(buf.begin(), buf.end(), 0.f);
        for (const AreaTap& xt : xtab) {
            float* b = &buf[size_t(xt.di) * ch];
            const uint8_t* p = s + size_t(xt.si) * ch;
            for (int c = 0; c < ch; c++) b[c] += float(p[c]) * xt.alpha;
        }
        if (yt.di != prev) {
            uint8_t* d = out.data() + size_t(prev) * row;
            for (size_t i = 0; i < row; i++) {
                d[i] = round_float_to_u8(sum[i]);
                sum[i] = yt.alpha * buf[i];
            }
            prev = yt.di;
        } else {
            for (size_t i = 0; i < row; i++) sum[i] += yt.alpha * buf[i];
        }
    }
    uint8_t* d = out.data() + size_t(prev) * row;
    for (size_t i = 0; i < row; i++) d[i] = round_float_to_u8(sum[i]);
    return out;
}

// Pillow's Lanczos filter and its coefficient table for one axis.
double sinc(double x) {
    if (x == 0.0) return 1.0;
    x *= M_PI;
    return std::sin(x) / x;
}
double lanczos3(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0; }
double box(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

struct PillowFilter {
    double (*f)(double);
    double support;
};
constexpr PillowFilter kLanczos{lanczos3, 3.0}, kBox{box, 0.5};

constexpr int kPrecisionBits = 32 - 8 - 2;

struct Taps {
    int ksize = 0;
    std::vector<int> first, count;  // per output pixel
    std::vector<int32_t> k;         // [out][ksize], fixed point
};

Taps pillow_taps(int in_size, int out_size, PillowFilter filter) {
    const float in0 = 0.f, in1 = float(in_size);
    const double scale = double(in1 - in0) / out_size;
    const double filterscale = std::max(scale, 1.0);
    const double support = filter.support * filterscale;
    Taps t;
    t.ksize = int(std::ceil(support)) * 2 + 1;
    t.first.resize(size_t(out_size));
    t.count.resize(size_t(out_size));
    t.k.assign(size_t(out_size) * t.ksize, 0);
    std::vector<double> w(size_t(t.ksize));
    for (int xx = 0; xx < out_size; xx++) {
        const double center = in0 + (xx + 0.5) * scale;
        const double ss = 1.0 / filterscale;
        int xmin = int(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = int(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            w[size_t(x)] = filter.f((x + xmin - center + 0.5) * ss);
            ww += w[size_t(x)];
        }
        for (int x = 0; x < xmax; x++) {
            const double v = ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)];
            t.k[size_t(xx) * t.ksize + x] =
                int32_t(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
        }
        t.first[size_t(xx)] = xmin;
        t.count[size_t(xx)] = xmax;
    }
    return t;
}

uint8_t clip8(int32_t v) { return uint8_t(std::clamp(v >> kPrecisionBits, 0, 255)); }

// Pillow's horizontal pass over every row (CH as in area_fractional).
template <int CH>
void lanczos_rows(const uint8_t* src, uint8_t* dst, int sw, int sh, int ch_rt, int dw, const Taps& t) {
    const int ch = CH > 0 ? CH : ch_rt;
    const int32_t half = 1 << (kPrecisionBits - 1);
    for (int y = 0; y < sh; y++) {
        const uint8_t* s = src + size_t(y) * sw * ch;
        uint8_t* d = dst + size_t(y) * dw * ch;
        for (int x = 0; x < dw; x++) {
            const int32_t* k = &t.k[size_t(x) * t.ksize];
            const uint8_t* p = s + size_t(t.first[size_t(x)]) * ch;
            int32_t acc[4] = {half, half, half, half};
            for (int i = 0; i < t.count[size_t(x)]; i++)
                for (int c = 0; c < ch; c++) acc[c] += int32_t(p[size_t(i) * ch + c]) * k[i];
            for (int c = 0; c < ch; c++) d[size_t(x) * ch + c] = clip8(acc[c]);
        }
    }
}

}  // namespace

std::vector<uint8_t> resize_area(const uint8_t* src, int sw, int sh, int ch, int dw, int dh) {
    check_sizes("resize_area", sw, sh, ch, dw, dh);
    GL_CHECK(dw <= sw && dh <= sh, "resize_area shrinks only: ", sw, "x", sh, " -> ", dw, "x", dh);
    if (dw == sw && dh == sh) return {src, src + size_t(sw) * sh * ch};
    const double scale_x = 1. / (double(dw) / sw), scale_y = 1. / (double(dh) / sh);  // as OpenCV derives them
    const int ix = int(std::lround(scale_x)), iy = int(std::lround(scale_y));
    if (std::fabs(scale_x - ix) < DBL_EPSILON && std::fabs(scale_y - iy) < DBL_EPSILON)
        return area_integer(src, sw, ch, dw, dh, ix, iy);
    if (ch == 3) return area_fractional<3>(src, sw, sh, ch, dw, dh, scale_x, scale_y);
    if (ch == 1) return area_fractional<1>(src, sw, sh, ch, dw, dh, scale_x, scale_y);
    return area_fractional<0>(src, sw, sh, ch, dw, dh, scale_x, scale_y);
}

namespace {

std::vector<uint8_t> resize_pillow(const uint8_t* src, int sw, int sh, int ch, int dw, int dh, PillowFilter filter) {
    std::vector<uint8_t> cur(src, src + size_t(sw) * sh * ch);
    if (dw != sw) {  // horizontal pass first, into 8 bits, as Pillow
        const Taps t = pillow_taps(sw, dw, filter);
        std::vector<uint8_t> out(size_t(dw) * sh * ch);
        if (ch == 3) lanczos_rows<3>(cur.data(), out.data(), sw, sh, ch, dw, t);
        else if (ch == 1) lanczos_rows<1>(cur.data(), out.data(), sw, sh, ch, dw, t);
        else lanczos_rows<0>(cur.data(), out.data(), sw, sh, ch, dw, t);
        cur.swap(out);
    }
    if (dh != sh) {
        const Taps t = pillow_taps(sh, dh, filter);
        const size_t row = size_t(dw) * ch;
        std::vector<uint8_t> out(row * dh);
        std::vector<int32_t> acc(row);
        for (int y = 0; y < dh; y++) {
            std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
            const int32_t* k = &t.k[size_t(y) * t.ksize];
            for (int i = 0; i < t.count[size_t(y)]; i++) {
                const uint8_t* s = cur.data() + size_t(t.first[size_t(y)] + i) * row;
                for (size_t j = 0; j < row; j++) acc[j] += int32_t(s[j]) * k[i];
            }
            for (size_t j = 0; j < row; j++) out[size_t(y) * row + j] = clip8(acc[j]);
        }
        cur.swap(out);
    }
    return cur;
}

}  // namespace

std::vector<uint8_t> resize_lanczos(const uint8_t* src, int sw, int sh, int ch, int dw, int dh) {
    check_sizes("resize_lanczos", sw, sh, ch, dw, dh);
    return resize_pillow(src, sw, sh, ch, dw, dh, kLanczos);
}

std::vector<uint8_t> resize_box(const uint8_t* src, int sw, int sh, int ch, int dw, int dh) {
    check_sizes("resize_box", sw, sh, ch, dw, dh);
    return resize_pillow(src, sw, sh, ch, dw, dh, kBox);
}

const char* interpolation_name(Interpolation how) {
    switch (how) {
        case Interpolation::automatic: return "";
        case Interpolation::lanczos: return "lanczos";
        case Interpolation::box: return "box";
        case Interpolation::area: return "area";
    }
    return "?";
}

Interpolation parse_interpolation(const std::string& name, const std::string& where) {
    for (Interpolation how : {Interpolation::lanczos, Interpolation::box, Interpolation::area})
        if (name == interpolation_name(how)) return how;
    if (name == "bilinear" || name == "linear" || name == "bicubic" || name == "cubic")
        gl::fail(where, ": resize_interpolation '", name, "' is not supported by sdtrain: kohya resizes with OpenCV's ",
                 name == "bilinear" || name == "linear" ? "INTER_LINEAR" : "INTER_CUBIC",
                 " (fixed-point 8-bit arithmetic), which is not reimplemented; lanczos, box and area are");
    if (name == "nearest")
        gl::fail(where, ": resize_interpolation 'nearest' is not supported by sdtrain: kohya resizes with OpenCV's "
                        "INTER_NEAREST_EXACT, whose choice at exact pixel-centre ties is not reproduced; lanczos, box "
                        "and area are");
    gl::fail(where, ": resize_interpolation '", name,
             "' is not one kohya accepts (lanczos, nearest, bilinear, linear, bicubic, cubic, area, box)");
}

bool can_resize(Interpolation how, int sw, int sh, int dw, int dh) {
    return how != Interpolation::area || (dw <= sw && dh <= sh);
}

std::vector<uint8_t> resize_kohya(const uint8_t* src, int sw, int sh, int ch, int dw, int dh, Interpolation how) {
    check_sizes("resize", sw, sh, ch, dw, dh);
    if (dw == sw && dh == sh) return {src, src + size_t(sw) * sh * ch};  // cv2 and Pillow copy
    if (how == Interpolation::automatic) how = dw <= sw && dh <= sh ? Interpolation::area : Interpolation::lanczos;
    switch (how) {
        case Interpolation::area:
            GL_CHECK(dw <= sw && dh <= sh, "resize_interpolation 'area' enlarges ", sw, "x", sh, " to ", dw, "x", dh,
                     ": OpenCV's INTER_AREA enlarges with its bilinear path, which is not reimplemented");
            return resize_area(src, sw, sh, ch, dw, dh);
        case Interpolation::box: return resize_box(src, sw, sh, ch, dw, dh);
        default: return resize_lanczos(src, sw, sh, ch, dw, dh);
    }
}

std::vector<uint8_t> resize_like_kohya(const uint8_t* src, int sw, int sh, int ch, int dw, int dh) {
    return resize_kohya(src, sw, sh, ch, dw, dh, Interpolation::automatic);
}

std::vector<uint8_t> crop(const uint8_t* src, int sw, int sh, int ch, int x, int y, int cw, int cht) {
    GL_CHECK(x >= 0 && y >= 0 && cw > 0 && cht > 0 && int64_t(x) + cw <= sw && int64_t(y) + cht <= sh, "crop: window ",
             cw, "x", cht, " at (", x, ", ", y, ") outside ", sw, "x", sh);
    std::vector<uint8_t> out(size_t(cw) * cht * ch);
    for (int r = 0; r < cht; r++)
        std::memcpy(&out[size_t(r) * cw * ch], src + (size_t(y + r) * sw + x) * ch, size_t(cw) * ch);
    return out;
}

void flip_horizontal(uint8_t* px, int w, int h, int ch) {
    for (int y = 0; y < h; y++) {
        uint8_t* row = px + size_t(y) * w * ch;
        for (int l = 0, r = w - 1; l < r; l++, r--)
            for (int c = 0; c < ch; c++) std::swap(row[size_t(l) * ch + c], row[size_t(r) * ch + c]);
    }
}

}  // namespace data
