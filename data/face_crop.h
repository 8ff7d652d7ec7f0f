// kohya's face crop augmentation (face_crop_aug_range; library/train_util.py
// load_image_with_face_info and BaseDataset.crop_target): an image named
// <anything>_<cx>_<cy>_<w>_<h>.<ext> carries a face box (centre cx, cy and size w, h in its pixels).
// Without bucketing, such an image is shrunk by a random scale that makes the face's larger side
// between resolution / range[1] and resolution / range[0] of the shorter side of the resolution
// (never below the scale that covers the resolution, never above 1), then cut to the resolution
// around the face: exactly centred, jittered by up to a twentieth of the face where the range is
// not one value and the face is large enough, or (random_crop) moved by the sum of two uniform draws
// so that the background shows too. kohya's rules kept as they are:
// - the box is read only when the subset has face_crop_aug_range; fewer than five '_' parts: no
//   box; a cx of 0 or less: no face crop for that image (the plain path);
// - with bucketing the box is ignored; cached latents are encoded without the face crop (kohya's
//   cache encodes the plain resize and centre crop); an image of exactly the resolution is kept;
// - the random draws are Python's random.uniform(a, b) and random.randint(a, b) (both ends
//   included), in kohya's order: the scale (when the range of scales is not one value), then per
//   axis (height, then width) the jitter or the two random_crop draws.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "data/latent_cache.h"
#include "data/rng.h"

namespace data {

// kohya's load_image_with_face_info on the file name (FaceBox: data/dataset.h): the last four '_' parts of the stem as
// integers (Python's int(): optional spaces and sign, decimal digits). Nullopt for fewer than five
// parts. Throws gl::Error naming the file for parts that are not integers (kohya's int() raises
// there and stops the run), for values outside [-2^30, 2^30], and for a face of cx > 0 whose w and h
// are both 0 (kohya divides by the face size).
std::optional<FaceBox> face_box_of_name(const std::filesystem::path& image);

// The random draws, as Python's random module makes them (an interface, so that tests can feed the
// values kohya drew).
class FaceCropDraws {
public:
    virtual ~FaceCropDraws() = default;
    virtual double uniform(double a, double b) = 0;       // in [a, b]
    virtual int64_t randint(int64_t a, int64_t b) = 0;    // in [a, b], b >= a
};

// The loader's: uniform a + (b - a) u, randint a + below(b - a + 1), from the image's stream.
class RngFaceDraws final : public FaceCropDraws {
public:
    explicit RngFaceDraws(Rng& rng) : rng_(rng) {}
    double uniform(double a, double b) override { return a + (b - a) * rng_.uniform(); }
    int64_t randint(int64_t a, int64_t b) override { return a + int64_t(rng_.below(uint64_t(b - a) + 1)); }

private:
    Rng& rng_;
};

// What crop_target does to one image: resize width x height to resized_w x resized_h (scale), then
// take the target window at (x, y). keep: the image is already the target size (kohya returns it
// as it is, drawing nothing).
struct FaceCrop {
    bool keep = false;
    double scale = 1.0;
    int resized_w = 0, resized_h = 0;
    int x = 0, y = 0;
};

// kohya's crop_target for an image of width x height, the resolution target_w x target_h, the
// subset's range (range[0] <= range[1], both > 0) and random_crop. Throws gl::Error naming `name`
// where kohya's assertion fails: the image smaller than the resolution on a side (the face crop
// never enlarges).
FaceCrop plan_face_crop(int width, int height, int target_w, int target_h, const FaceBox& face,
                        std::array<double, 2> range, bool random_crop, FaceCropDraws& draws, const std::string& name);

// The image (or its mask image) decoded, resized with its subset's filter as kohya's resize_image
// (area when shrinking), cut by the plan, then flipped. Throws ImageError for a file that fails to
// decode and for one whose size is not the one the plan was made for.
PreparedImage prepare_face_crop(const ImageEntry& e, const FaceCrop& plan, int target_w, int target_h, bool flip,
                                bool keep_alpha);

}  // namespace data
