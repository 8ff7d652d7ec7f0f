// The dataset's random numbers: one small seeded generator (SplitMix64 to seed, xoshiro256**),
// the same sequence on every platform and compiler, unlike std::uniform_*_distribution. Each
// consumer derives its own stream from (seed, purpose, epoch, ...) so that e.g. caption shuffles do
// not shift when flip draws change.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace data {

class Rng {
public:
    explicit Rng(uint64_t seed) {
        for (uint64_t& w : s_) w = splitmix(seed);
    }
    // A stream for (seed, keys...): e.g. Rng::derive(seed, {kCaptionStream, epoch, image}).
    static Rng derive(uint64_t seed, std::initializer_list<uint64_t> keys) {
        uint64_t h = seed;
        for (uint64_t k : keys) h = splitmix(h) ^ (k + 0x9e3779b97f4a7c15ull);
        return Rng(h);
    }
    uint64_t next() {
        const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return r;
    }
    // Uniform in [0, 1), 53 bits.
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }
    // Uniform integer in [0, n), n > 0, without modulo bias.
    uint64_t below(uint64_t n) {
        const uint64_t limit = -n % n;  // 2^64 mod n
        for (;;) {
            const uint64_t r = next();
            if (r >= limit) return r % n;
        }
    }
    template <class T>
    void shuffle(std::vector<T>& v) {
        for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[below(i)]);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    static uint64_t splitmix(uint64_t& x) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    uint64_t s_[4];
};

}  // namespace data
