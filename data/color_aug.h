// kohya's color_aug (library/train_util.py's AugHelper.color_aug, its "weak color augmentation"):
// on a third of the draws (random() <= 0.33) either, half and half, a hue shift by
// uniform(-8, 8) of OpenCV's 8-bit HSV hue (0..179; a negative shift taken as 180 + shift, the
// sum mod 180 truncated to a byte), or a gamma: clip(x ** uniform(0.95, 1.05), 0, 255) truncated.
// kohya hands the RGB pixels to cv2.cvtColor as BGR (COLOR_BGR2HSV and back), so the first channel
// is OpenCV's blue here too. The HSV round trip is OpenCV 8-bit's: RGB2HSV_b in fixed point
// (hsv_shift 12, its rounded division tables), HSV2RGB_b in float (HSV2RGB_native, then
// saturate_cast of x * 255). kohya applies it after the crop and before the flip (both per pixel).
#pragma once
#include <cstdint>
#include <span>

#include "data/rng.h"

namespace data {

// The hue shift of kohya's branch on [n][3] bytes: shift already in [0, 188) (180 + a negative one).
// rgb: rows of `width` pixels.
void hue_shift(std::span<uint8_t> rgb, int width, double shift);
// The gamma branch: each byte x -> trunc(clip(x ** gamma, 0, 255)).
void gamma_aug(std::span<uint8_t> rgb, double gamma);
// One draw of kohya's color_aug (rng's uniform() for each of Python's random() calls, in order).
void color_aug(std::span<uint8_t> rgb, int width, Rng& rng);

}  // namespace data
