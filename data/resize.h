// Resizing as kohya's sd-scripts does it (library/utils.py resize_image): OpenCV's INTER_AREA when
// the image shrinks on both axes, Pillow's LANCZOS otherwise. Both are reimplemented to give the
// same bytes as those libraries on 8-bit images (tests compare with cv2 / Pillow outputs):
// - INTER_AREA: integer factors average whole cells (2x2 rounds half up, other factors round the
//   float mean half to even); other factors weigh each source pixel by its overlap with the
//   destination cell, accumulated in float rows then columns, rounded half to even.
// - LANCZOS: Pillow's separable 3-lobe filter (support widened by the scale when shrinking),
//   coefficients normalised then fixed to 22 fractional bits, horizontal pass first into 8 bits
//   (Pillow <= 12 always; Pillow 13 starts with the vertical pass for some sizes, which moves a
//   few edge pixels by a few levels).
// kohya's resize_interpolation picks another filter for every resize (shrinking and enlarging):
// "lanczos" and "box" are Pillow's (the same fixed-point passes, box filter of support 1/2), "area"
// is OpenCV's INTER_AREA, reimplemented for shrinking only (OpenCV enlarges with its fixed-point
// bilinear path). OpenCV's INTER_LINEAR / INTER_CUBIC ("bilinear", "linear", "bicubic", "cubic")
// and INTER_NEAREST_EXACT ("nearest": cv2 5.0 sends some exact pixel-centre ties to the lower
// pixel, by a rule not reproduced here) are refused by name.
// Pixels are interleaved 8-bit with 1..4 channels, rows top to bottom.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace data {

// kohya's resize_interpolation; automatic is its None (area when shrinking on both axes, else Lanczos).
enum class Interpolation : uint8_t { automatic, lanczos, box, area };

// kohya's name for it ("" for automatic).
const char* interpolation_name(Interpolation how);
// Reads kohya's name (those of its validate_interpolation_fn). Throws gl::Error starting with
// `where` for a name kohya refuses and for the OpenCV filters not reimplemented, with the reason.
Interpolation parse_interpolation(const std::string& name, const std::string& where);
// False where resize_kohya cannot give kohya's bytes: "area" enlarging an axis.
bool can_resize(Interpolation how, int sw, int sh, int dw, int dh);

std::vector<uint8_t> resize_area(const uint8_t* src, int sw, int sh, int channels, int dw, int dh);
std::vector<uint8_t> resize_lanczos(const uint8_t* src, int sw, int sh, int channels, int dw, int dh);
std::vector<uint8_t> resize_box(const uint8_t* src, int sw, int sh, int channels, int dw, int dh);
// kohya's resize_image with its resize_interpolation; a copy when the size is kept.
std::vector<uint8_t> resize_kohya(const uint8_t* src, int sw, int sh, int channels, int dw, int dh,
                                  Interpolation how);
// kohya's choice: area when dw <= sw and dh <= sh, Lanczos otherwise; a copy when the size is kept.
std::vector<uint8_t> resize_like_kohya(const uint8_t* src, int sw, int sh, int channels, int dw, int dh);

// The window [x, x + cw) x [y, y + ch) of an image.
std::vector<uint8_t> crop(const uint8_t* src, int sw, int sh, int channels, int x, int y, int cw, int ch);
// Mirror left to right.
void flip_horizontal(uint8_t* pixels, int w, int h, int channels);

}  // namespace data
