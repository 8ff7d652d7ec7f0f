#include "data/validation_split.h"

#include <cmath>

#include "ggml-lite/core/error.h"

namespace data {

namespace fs = std::filesystem;

namespace {
constexpr int kN = 624, kM = 397;
constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu;

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v); }
}  // namespace

PythonRandom::PythonRandom(uint64_t n) {
    // The key: the seed's 32-bit words, least significant first, at least one.
    std::vector<uint32_t> key{uint32_t(n)};
    if (n >> 32) key.push_back(uint32_t(n >> 32));
    mt_[0] = 19650218u;
    for (int i = 1; i < kN; i++) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + uint32_t(i);
    int i = 1;
    size_t j = 0;
    for (size_t k = std::max<size_t>(kN, key.size()); k; k--) {
        mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + uint32_t(j);
        i++, j++;
        if (i >= kN) mt_[0] = mt_[kN - 1], i = 1;
        if (j >= key.size()) j = 0;
    }
    for (int k = kN - 1; k; k--) {
        mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - uint32_t(i);
        if (++i >= kN) mt_[0] = mt_[kN - 1], i = 1;
    }
    mt_[0] = 0x80000000u;
    index_ = kN;
}

uint32_t PythonRandom::next_u32() {
    if (index_ >= kN) {
        for (int k = 0; k < kN; k++) {
            const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
            mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        index_ = 0;
    }
    uint32_t y = mt_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint32_t PythonRandom::getrandbits(int k) {
    GL_CHECK(k >= 1 && k <= 32, "PythonRandom: getrandbits(", k, ") takes 1..32 bits");
    return next_u32() >> (32 - k);
}

uint64_t PythonRandom::randbelow(uint64_t n) {
    GL_CHECK(n >= 1 && n <= 0xffffffffull, "PythonRandom: randbelow(", n, ")");
    int k = 0;
    while (k < 64 && (n >> k)) k++;  // n.bit_length()
    uint64_t r = getrandbits(k);
    while (r >= n) r = getrandbits(k);
    return r;
}

std::vector<fs::path> split_train_val(std::vector<fs::path> paths, bool training, double validation_split,
                                      PythonRandom& rng) {
    rng.shuffle(paths);
    const double n = double(paths.size());
    if (training) {
        const size_t keep = size_t(std::ceil(n * (1.0 - validation_split)));
        paths.resize(std::min(keep, paths.size()));
        return paths;
    }
    const size_t from = paths.size() - std::min(paths.size(), size_t(std::nearbyint(n * validation_split)));
    return {paths.begin() + std::ptrdiff_t(from), paths.end()};
}

std::vector<std::vector<fs::path>> split_listings(std::vector<std::vector<fs::path>> listings,
                                                  const DatasetConfig& config, const DatasetSplit& split) {
    GL_CHECK(listings.size() == config.subsets.size(), "split_listings: ", listings.size(), " listings for ",
             config.subsets.size(), " subsets");
    const double share = config.validation_split;
    if (split.part == DatasetPart::whole) return listings;
    const bool training = split.part == DatasetPart::training;
    if (share <= 0.0) return training ? listings : std::vector<std::vector<fs::path>>(listings.size());
    auto trained = [&](size_t i) { return config.subsets[i].num_repeats >= 1 && !listings[i].empty(); };
    PythonRandom global(split.run_seed);
    // Without a validation seed the validation dataset's shuffles follow the training dataset's
    // on the global stream: replay those first.
    if (!training && !config.validation_seed)
        for (size_t i = 0; i < listings.size(); i++)
            if (!config.subsets[i].is_reg && trained(i)) split_train_val(listings[i], true, share, global);
    for (size_t i = 0; i < listings.size(); i++) {
        if (listings[i].empty() || (training && !trained(i))) continue;
        if (config.subsets[i].is_reg) {
            if (!training) listings[i].clear();
            continue;
        }
        if (config.validation_seed) {
            PythonRandom own(magnitude(*config.validation_seed));
            listings[i] = split_train_val(std::move(listings[i]), training, share, own);
        } else {
            listings[i] = split_train_val(std::move(listings[i]), training, share, global);
        }
    }
    return listings;
}

}  // namespace data
