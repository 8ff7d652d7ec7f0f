// kohya's color_aug: OpenCV's 8-bit BGR <-> HSV round trip with a hue shift, or a gamma.
#include "data/color_aug.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace data {

namespace {

constexpr int kHsvShift = 12;
// Pixels per vector block of OpenCV's HSV2RGB_b in its AVX2 build (4 x 8 float lanes).
constexpr int kHsvBlock = 32;

// OpenCV's saturate_cast<int>(double): round half to even (cvRound).
int cv_round(double v) { return int(std::nearbyint(v)); }

struct Tables {
    std::array<int, 256> sdiv{}, hdiv180{};
    Tables() {
        for (int i = 1; i < 256; i++) {
            sdiv[size_t(i)] = cv_round(double(255 << kHsvShift) / (1.0 * i));
            hdiv180[size_t(i)] = cv_round(double(180 << kHsvShift) / (6.0 * i));
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

// RGB2HSV_b for one pixel (b, g, r as OpenCV names them): h in 0..179, s and v in 0..255.
std::array<int, 3> bgr_to_hsv(int b, int g, int r) {
    const Tables& t = tables();
    const int v = std::max({b, g, r}), vmin = std::min({b, g, r});
    const int diff = v - vmin;
    const int vr = v == r ? -1 : 0, vg = v == g ? -1 : 0;
    const int s = (diff * t.sdiv[size_t(v)] + (1 << (kHsvShift - 1))) >> kHsvShift;
    int h = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + ((~vg) & (r - g + 4 * diff))));
    h = (h * t.hdiv180[size_t(diff)] + (1 << (kHsvShift - 1))) >> kHsvShift;
    h += h < 0 ? 180 : 0;
    return {std::clamp(h, 0, 255), s, v};
}

// x * 255 to a byte: saturate_cast<uchar> (round half to even, clamped) on OpenCV's scalar path,
// v_trunc then saturating packs on its vector path.
uint8_t cv_byte(float v, bool vector_path) {
    return uint8_t(std::clamp(vector_path ? int(v) : int(std::nearbyint(v)), 0, 255));
}

// HSV2RGB_b for one pixel: h 0..179 (hscale 6 / 180), s and v bytes scaled by 1 / 255 in float.
// The vector path computes the same table in float (no fused multiply-add) and truncates.
std::array<uint8_t, 3> hsv_to_bgr(int hb, int sb, int vb, bool vector_path) {
    float h = float(hb), s = float(sb) * (1.0f / 255.0f), v = float(vb) * (1.0f / 255.0f);
    float b, g, r;
    if (s == 0) {
        b = g = r = v;
    } else {
        static constexpr int kSector[6][3] = {{1, 3, 0}, {1, 0, 2}, {3, 0, 1}, {0, 2, 1}, {0, 1, 3}, {2, 1, 0}};
        h *= 6.0f / 180.0f;
        h = std::fmod(h, 6.0f);
        int sector = int(std::floor(h));
        h -= float(sector);
        if (unsigned(sector) >= 6u) {
            sector = 0;
            h = 0.0f;
        }
        // The vector build's 1 - s * h is one fused multiply-add (GCC contracts the intrinsics).
        const float sh = vector_path ? std::fma(-s, h, 1.0f) : 1.0f - s * h;
        const float sh1 = vector_path ? std::fma(-s, 1.0f - h, 1.0f) : 1.0f - s * (1.0f - h);
        const float tab[4] = {v, v * (1.0f - s), v * sh, v * sh1};
        b = tab[kSector[sector][0]];
        g = tab[kSector[sector][1]];
        r = tab[kSector[sector][2]];
    }
    return {cv_byte(b * 255.0f, vector_path), cv_byte(g * 255.0f, vector_path), cv_byte(r * 255.0f, vector_path)};
}

}  // namespace

void hue_shift(std::span<uint8_t> rgb, int width, double shift) {
    GL_CHECK(width >= 1 && rgb.size() % (size_t(width) * 3) == 0, "color_aug: ", rgb.size(),
             " bytes are not rows of ", width, " RGB pixels");
    // cvtColor converts row by row; HSV2RGB_b's vector loop takes whole blocks of kHsvBlock
    // pixels from the row's start, its scalar loop the rest.
    const int vector_end = width / kHsvBlock * kHsvBlock;
    for (size_t p = 0, x = 0; p < rgb.size(); p += 3, x = (x + 1) % size_t(width)) {
        // kohya's image is RGB, handed to OpenCV as BGR: its first byte is OpenCV's blue.
        const std::array<int, 3> hsv = bgr_to_hsv(rgb[p], rgb[p + 1], rgb[p + 2]);
        const int h = int(std::fmod(double(hsv[0]) + shift, 180.0));  // numpy: float, % 180, cast to uint8
        const std::array<uint8_t, 3> out = hsv_to_bgr(h, hsv[1], hsv[2], int(x) < vector_end);
        rgb[p] = out[0];
        rgb[p + 1] = out[1];
        rgb[p + 2] = out[2];
    }
}

void gamma_aug(std::span<uint8_t> rgb, double gamma) {
    std::array<uint8_t, 256> lut{};
    for (int x = 0; x < 256; x++) lut[size_t(x)] = uint8_t(std::clamp(std::pow(double(x), gamma), 0.0, 255.0));
    for (uint8_t& x : rgb) x = lut[x];
}

void color_aug(std::span<uint8_t> rgb, int width, Rng& rng) {
    constexpr double kHueShiftLimit = 8;
    if (rng.uniform() <= 0.33) {
        if (rng.uniform() > 0.5) {
            double shift = -kHueShiftLimit + 2 * kHueShiftLimit * rng.uniform();
            if (shift < 0) shift = 180 + shift;
            hue_shift(rgb, width, shift);
        } else {
            gamma_aug(rgb, 0.95 + (1.05 - 0.95) * rng.uniform());  // Python: a + (b - a) * random()
        }
    }
}

}  // namespace data
