// libFuzzer target for the dataset's readers of untrusted input (coverage-guided; the bounded
// cases CI runs are in tests/test_data_fuzz.cpp). The first input byte picks the reader: image
// decoding (PNG / JPEG / BMP / WebP, EXIF) and the dataset's integrity check of the same bytes,
// caption rules, dataset TOML. Every input must end in a result or in gl::Error (ImageError for
// images), under ASan and UBSan, and the check must refuse exactly what decoding refuses, with the
// same reason (a disagreement traps, which libFuzzer reports as a crash).
// Build and seed corpus: tests/fuzz/CMakeLists.txt.
#include <cstdint>
#include <string>
#include <vector>

#include "data/caption.h"
#include "data/config.h"
#include "data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t* body = data + 1;
    const size_t n = size - 1;
    try {
        switch (data[0] % 3) {
            case 0: {
                data::DecodeOptions opt;
                opt.max_pixels = 1 << 22;
                opt.alpha = n % 2 ? data::AlphaMode::mask : data::AlphaMode::white;
                data::jpeg_exif_orientation(body, n);
                std::string verified, decoded;
                try {
                    data::verify_image(body, n, "fuzz", opt);
                } catch (const data::ImageError& e) {
                    verified = e.reason();
                }
                try {
                    data::decode_image(body, n, "fuzz", opt);
                } catch (const data::ImageError& e) {
                    decoded = e.reason();
                }
                if (verified != decoded) __builtin_trap();
                break;
            }
            case 1: {
                data::CaptionOptions o;
                o.shuffle_caption = true;
                o.keep_tokens = 1;
                o.keep_tokens_separator = "|||";
                o.caption_tag_dropout_rate = 0.5;
                o.secondary_separator = ";";
                data::Rng rng(n);
                data::process_caption(o, std::string(reinterpret_cast<const char*>(body), n), 2, rng);
                break;
            }
            case 2:
                data::parse_dataset_config(std::string(reinterpret_cast<const char*>(body), n), "fuzz");
                break;
        }
    } catch (const gl::Error&) {
    }
    return 0;
}
