// kohya's validation split (library/train_util.py split_train_val, DreamBoothDataset): with a
// dataset's validation_split > 0, every training subset's image listing (sorted paths, as kohya's
// glob_images) is shuffled by Python's `random` and cut: the training set keeps the first
// ceil(n * (1 - split)) images, the validation set the images from n - round(n * split) on (round
// half to even, as Python's; the two can share an image or leave one out, as kohya's do).
// Regularisation subsets stay whole in the training set and give nothing to the validation set.
//
// The shuffle: with a validation_seed, `random` is seeded with it for each subset (every subset of
// a length gets the same order); without one, kohya shuffles with the global stream its set_seed
// (--seed) started, the training dataset's subsets first, then the validation dataset's, so the
// two parts are cut from different orders. Both are reproduced: PythonRandom is CPython's
// Mersenne Twister with its seeding (init_by_array of the seed's 32-bit words) and shuffle.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "data/config.h"

namespace data {

class PythonRandom {
public:
    // random.seed(n) for an int n of this magnitude (Python seeds with abs(n)).
    explicit PythonRandom(uint64_t magnitude);
    uint32_t next_u32();                  // genrand_uint32
    uint32_t getrandbits(int k);          // 1 <= k <= 32
    uint64_t randbelow(uint64_t n);       // _randbelow_with_getrandbits, n < 2^32
    template <class T>
    void shuffle(std::vector<T>& x) {
        for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[size_t(randbelow(i + 1))]);
    }

private:
    uint32_t mt_[624];
    int index_ = 624;
};

enum class DatasetPart : uint8_t { whole, training, validation };

// What build_dataset takes of each subset's listing (part whole: everything; else kohya's split
// with the dataset's validation_split and validation_seed, run_seed standing in for --seed).
struct DatasetSplit {
    DatasetPart part = DatasetPart::whole;
    uint64_t run_seed = 0;
};

// The images of one subset's listing in `part` after kohya's shuffle with rng.
std::vector<std::filesystem::path> split_train_val(std::vector<std::filesystem::path> paths, bool training,
                                                   double validation_split, PythonRandom& rng);

// Every subset's listing of `config` (listings[i]: subset i's sorted files) cut for split.part
// with the dataset's validation_split and validation_seed, the shuffles in kohya's order. The
// validation part takes every subset with one repeat (kohya's validation set ignores num_repeats,
// so a subset of num_repeats 0 still gives it images), the training part skips subsets kohya skips.
std::vector<std::vector<std::filesystem::path>> split_listings(std::vector<std::vector<std::filesystem::path>> listings,
                                                               const DatasetConfig& config, const DatasetSplit& split);

}  // namespace data
