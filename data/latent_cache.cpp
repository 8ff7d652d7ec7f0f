#include "data/latent_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <set>

#include "data/resize.h"
#include "data/workers.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/atomic_file.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/sha256.h"

namespace data {
namespace fs = std::filesystem;

namespace {

// The image decoded and resized to choice.resized (not cropped yet).
Image decode_resized(const std::vector<uint8_t>& bytes, const ImageEntry& e, const BucketChoice& ch, bool keep_alpha) {
    DecodeOptions dopt;
    dopt.alpha = keep_alpha ? AlphaMode::mask : AlphaMode::white;
    Image img = decode_image(bytes.data(), bytes.size(), e.path.string(), dopt);
    const Reso r = ch.resized, b = ch.bucket;
    GL_CHECK(r.w >= b.w && r.h >= b.h, e.path.string(), ": resized size ", r.w, "x", r.h, " does not cover bucket ",
             b.w, "x", b.h);
    Image out;
    out.width = r.w;
    out.height = r.h;
    out.rgb = resize_kohya(img.rgb.data(), img.width, img.height, 3, r.w, r.h, e.resize);
    if (keep_alpha) out.alpha = resize_kohya(img.alpha.data(), img.width, img.height, 1, r.w, r.h, e.resize);
    return out;
}

std::array<int, 2> centre_crop(const BucketChoice& ch) {
    return {(ch.resized.w - ch.bucket.w) / 2, (ch.resized.h - ch.bucket.h) / 2};
}

PreparedImage prepare_bytes(const std::vector<uint8_t>& bytes, const ImageEntry& e, const BucketChoice& ch,
                            bool flip, bool keep_alpha, std::optional<std::array<int, 2>> crop_at) {
    const Image img = decode_resized(bytes, e, ch, keep_alpha);
    const Reso r = ch.resized, b = ch.bucket;
    const auto [cx, cy] = crop_at ? *crop_at : centre_crop(ch);
    PreparedImage p;
    p.width = b.w;
    p.height = b.h;
    p.rgb = crop(img.rgb.data(), r.w, r.h, 3, cx, cy, b.w, b.h);
    if (flip) flip_horizontal(p.rgb.data(), b.w, b.h, 3);
    if (keep_alpha) {
        p.alpha = crop(img.alpha.data(), r.w, r.h, 1, cx, cy, b.w, b.h);
        if (flip) flip_horizontal(p.alpha.data(), b.w, b.h, 1);
    }
    return p;
}

constexpr char kMagic[8] = {'G', 'L', 'L', 'A', 'T', 'N', 'T', '1'};

std::vector<float> normal_noise(const std::string& key, uint64_t seed, size_t n) {
    uint64_t k = 0;
    for (size_t i = 0; i < 16 && i < key.size(); i++) k = k * 16 + uint64_t(key[i] <= '9' ? key[i] - '0' : key[i] - 'a' + 10);
    Rng rng = Rng::derive(seed, {0x6e6f697365ull /* "noise" */, k});
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i += 2) {  // Box-Muller
        const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
        const double r = std::sqrt(-2.0 * std::log(u1));
        out[i] = float(r * std::cos(2 * M_PI * u2));
        if (i + 1 < n) out[i + 1] = float(r * std::sin(2 * M_PI * u2));
    }
    return out;
}

}  // namespace

PreparedImage prepare_image(const ImageEntry& e, const BucketChoice& ch, bool flip, bool keep_alpha,
                            std::optional<std::array<int, 2>> crop_at) {
    return prepare_bytes(read_file_bytes(e.path), e, ch, flip, keep_alpha, crop_at);
}

void to_unit_range(const std::vector<uint8_t>& rgb, float* out) {
    for (size_t i = 0; i < rgb.size(); i++) out[i] = (float(rgb[i]) / 255.f - 0.5f) / 0.5f;
}

std::string latent_key(const std::string& image_sha256, const BucketChoice& c, std::array<int, 2> crop, bool flip,
                       const std::string& encoder_identity, Interpolation resize) {
    const std::string filter =
        resize == Interpolation::automatic ? std::string() : gl::cat("|resize ", interpolation_name(resize));
    return gl::io::sha256_hex(gl::cat("latent v1|", image_sha256, "|bucket ", c.bucket.w, "x", c.bucket.h, "|resized ",
                                      c.resized.w, "x", c.resized.h, "|crop ", crop[0], ",", crop[1], "|flip ",
                                      int(flip), "|encoder ", encoder_identity, filter));
}

LatentCache::LatentCache(std::optional<fs::path> dir) : dir_(std::move(dir)) {
    if (!dir_) return;
    fs::create_directories(*dir_);
    // Entries are written through temporaries named "<key>.latent.tmp-<host>-<pid>-XXXXXX": one
    // look at the folder finds the entries that have any, and remove_stale_temps removes those of
    // writers that no longer run.
    std::set<std::string> written;
    for (const fs::directory_entry& d : fs::directory_iterator(*dir_)) {
        const std::string name = d.path().filename().string();
        const size_t at = name.find(".latent.tmp-");
        if (at != std::string::npos) written.insert(name.substr(0, at + 7));
    }
    for (const std::string& entry : written)
        for (std::string& removed : gl::io::remove_stale_temps((*dir_ / entry).string()))
            stale_removed_.push_back(std::move(removed));
}

std::optional<fs::path> LatentCache::file_of(const std::string& key) const {
    if (!dir_) return std::nullopt;
    return *dir_ / (key + ".latent");
}

size_t LatentCache::ram_entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ram_.size();
}

namespace {

// The entry file: magic, height, width, channels, two zero uint16, then the floats.
std::optional<Latent> read_entry(const fs::path& path) {
    uint64_t size = 0;
    int fd = -1;
    try {
        fd = gl::io::open_regular(path.string(), &size);
    } catch (const gl::Error&) {
        return std::nullopt;  // missing, or not a regular file: not an entry
    }
    auto read_all = [fd](void* p, size_t n) {
        for (char* c = static_cast<char*>(p); n > 0;) {
            const ssize_t r = ::read(fd, c, n);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return false;
            c += r;
            n -= size_t(r);
        }
        return true;
    };
    std::optional<Latent> out;
    char head[16];
    if (size >= 16 && read_all(head, 16) && std::memcmp(head, kMagic, 8) == 0) {
        uint16_t dims[3];
        std::memcpy(dims, head + 8, 6);
        Latent l{dims[0], dims[1], dims[2], {}};
        const size_t n = size_t(l.height) * l.width * l.channels;
        if (n > 0 && size == 16 + uint64_t(n) * 4) {
            l.data.resize(n);
            if (read_all(l.data.data(), n * 4)) out = std::move(l);
        }
    }
    ::close(fd);
    return out;
}

}  // namespace

std::optional<Latent> LatentCache::get(const std::string& key) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = ram_.find(key);
        if (it != ram_.end()) return it->second;
    }
    if (!dir_) return std::nullopt;
    std::optional<Latent> l = read_entry(*file_of(key));
    if (!l) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    return ram_.emplace(key, std::move(*l)).first->second;
}

void LatentCache::put(const std::string& key, Latent l) {
    GL_CHECK(l.data.size() == size_t(l.height) * l.width * l.channels && l.height < 65536 && l.width < 65536 &&
                 l.channels < 65536,
             "latent cache: bad entry ", l.height, "x", l.width, "x", l.channels);
    if (dir_) {
        std::vector<char> bytes(16 + l.data.size() * 4);
        const uint16_t dims[4] = {uint16_t(l.height), uint16_t(l.width), uint16_t(l.channels), 0};
        std::memcpy(bytes.data(), kMagic, 8);
        std::memcpy(bytes.data() + 8, dims, 8);
        std::memcpy(bytes.data() + 16, l.data.data(), l.data.size() * 4);
        gl::io::write_file_atomic(file_of(key)->string(), bytes.data(), bytes.size());
    }
    std::lock_guard<std::mutex> lock(mu_);
    ram_[key] = std::move(l);
}

void LatentCache::put_ram(const std::string& key, Latent l) {
    GL_CHECK(l.data.size() == size_t(l.height) * l.width * l.channels, "latent cache: bad entry ", l.height, "x",
             l.width, "x", l.channels);
    std::lock_guard<std::mutex> lock(mu_);
    ram_[key] = std::move(l);
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What the scan found for one image: its hash, its keys ("" for a flip its subset does not use)
// and which of them are cached already; or why it could not be read.
struct Scan {
    std::string sha;
    std::array<std::string, 2> keys;
    std::array<bool, 2> hit{};
    std::optional<SkippedImage> skipped;
    size_t kohya_reused = 0;
    std::string kohya_ignored;  // "<npz>: <why>"
};

// The entries of `s` not cached yet, from kohya's npz beside the image when there is one and it
// matches (read_kohya_npz), or why it was not used. Images whose pixels kohya reads otherwise
// than we do are not reused: an EXIF orientation (kohya ignores it) or alpha (kohya drops it, we
// composite over white).
void reuse_kohya_npz(const std::vector<uint8_t>& bytes, const ImageEntry& e, const SubsetConfig& subset,
                     const BucketChoice& ch, const LatentSpec& spec, LatentCache& cache, Scan& s) {
    ImageHeader h;
    try {
        h = read_image_header(bytes.data(), bytes.size(), e.path.string());
    } catch (const ImageError&) {
        return;  // the decode reports the image
    }
    const bool turned = h.orientation >= 5;
    const fs::path npz = kohya_npz_path(e.path, turned ? h.height : h.width, turned ? h.width : h.height);
    std::error_code ec;
    if (!fs::exists(npz, ec)) return;
    std::string why;
    std::optional<KohyaLatents> k;
    if (h.orientation != 1) why = gl::cat("the image has EXIF orientation ", h.orientation, ", which kohya ignores");
    else if (h.has_alpha) why = "the image has alpha, which kohya drops where we composite it over white";
    else k = read_kohya_npz(npz, {ch.bucket, h.width, h.height, subset.flip_aug, subset.alpha_mask}, spec, &why);
    if (!k) {
        const std::string prefix = npz.string() + ": ";
        if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
        s.kohya_ignored = prefix + why;
        return;
    }
    for (size_t f = 0; f < 2; f++) {
        if (s.keys[f].empty() || s.hit[f]) continue;
        cache.put_ram(s.keys[f], f == 0 ? std::move(k->latents) : std::move(*k->flipped));
        s.hit[f] = true;
        s.kohya_reused++;
    }
}

using Clock = std::chrono::steady_clock;

// One (image, flip) entry to encode, and its place: batch and position in it.
struct Item {
    int image = 0;
    bool flip = false;
    std::string key;
    size_t batch = 0;
    int slot = 0;
};
// The items of one image (one or both flips), decoded and resized once.
struct Job {
    int image = 0;
    size_t first = 0, count = 0;
    std::string sha;
};
struct VaeBatch {
    EncoderShape shape;
    size_t first = 0;  // items [first, first + shape.batch)
};
struct Prepared {
    std::optional<SkippedImage> skipped;
    double busy = 0;  // seconds the worker spent on it
};

// The encoder's input of each batch, filled place by place by the workers and taken whole by the
// encoder's thread; buffers are reused.
class Staging {
public:
    struct Buffer {
        std::unique_ptr<uint8_t[]> data;
        size_t bytes = 0;
    };
    uint8_t* batch(size_t index, size_t bytes) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = live_.find(index);
            if (it != live_.end()) return it->second.data.get();
        }
        Buffer b = reuse(bytes);
        if (!b.data) b = {std::make_unique_for_overwrite<uint8_t[]>(bytes), bytes};
        std::lock_guard<std::mutex> lock(mu_);
        auto [it, fresh] = live_.emplace(index, std::move(b));
        if (!fresh) spare_.push_back(std::move(b));  // another worker made it meanwhile
        return it->second.data.get();
    }
    // nullopt when no worker wrote to it (every image of the batch failed).
    std::optional<Buffer> take(size_t index) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(index);
        if (it == live_.end()) return std::nullopt;
        Buffer b = std::move(it->second);
        live_.erase(it);
        return b;
    }
    void recycle(Buffer b) {
        std::lock_guard<std::mutex> lock(mu_);
        spare_.push_back(std::move(b));
    }

private:
    Buffer reuse(size_t bytes) {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t i = 0; i < spare_.size(); i++)
            if (spare_[i].bytes >= bytes) {
                Buffer b = std::move(spare_[i]);
                spare_.erase(spare_.begin() + long(i));
                return b;
            }
        if (spare_.size() > 4) spare_.erase(spare_.begin());  // sizes that no longer come
        return {};
    }
    std::mutex mu_;
    std::map<size_t, Buffer> live_;
    std::vector<Buffer> spare_;
};

// Bytes -> the encoder's input values exactly as to_unit_range computes them, rounded once to the
// input dtype (what a cast node on the device would give), cropped and flipped on the way.
class InputValues {
public:
    explicit InputValues(gl::DType t) : dtype_(t) {
        GL_CHECK(t == gl::DType::f32 || t == gl::DType::bf16 || t == gl::DType::f16,
                 "latent cache: the encoder takes ", gl::dtype_name(t), " input; f32, bf16 or f16 expected");
        for (int v = 0; v < 256; v++) {
            const float f = (float(v) / 255.f - 0.5f) / 0.5f;
            f32_[size_t(v)] = f;
            half_[size_t(v)] = t == gl::DType::bf16 ? gl::f32_to_bf16(f) : gl::f32_to_f16(f);
        }
    }
    gl::DType dtype() const { return dtype_; }
    size_t bytes_per_value() const { return dtype_ == gl::DType::f32 ? 4 : 2; }
    // The window (cx, cy, w, h) of an image `stride` pixels wide, mirrored when flip, into out.
    void write(const uint8_t* rgb, int stride, int cx, int cy, int w, int h, bool flip, uint8_t* out) const {
        if (dtype_ == gl::DType::f32) fill(f32_, rgb, stride, cx, cy, w, h, flip, reinterpret_cast<float*>(out));
        else fill(half_, rgb, stride, cx, cy, w, h, flip, reinterpret_cast<uint16_t*>(out));
    }

private:
    template <class T>
    static void fill(const std::array<T, 256>& lut, const uint8_t* rgb, int stride, int cx, int cy, int w, int h,
                     bool flip, T* out) {
        for (int y = 0; y < h; y++) {
            const uint8_t* row = rgb + (size_t(cy + y) * size_t(stride) + size_t(cx)) * 3;
            T* dst = out + size_t(y) * size_t(w) * 3;
            for (int x = 0; x < w; x++) {
                const uint8_t* px = row + size_t(flip ? w - 1 - x : x) * 3;
                dst[size_t(x) * 3] = lut[px[0]];
                dst[size_t(x) * 3 + 1] = lut[px[1]];
                dst[size_t(x) * 3 + 2] = lut[px[2]];
            }
        }
    }
    gl::DType dtype_;
    std::array<float, 256> f32_{};
    std::array<uint16_t, 256> half_{};
};

}  // namespace

CacheReport cache_latents(const Dataset& ds, const BucketAssignment& a, LatentCache& cache, ImageEncoder& enc,
                          const CacheOptions& opt) {
    for (const SubsetConfig& s : ds.config.subsets)
        GL_CHECK(!s.random_crop && !s.color_aug, "latents cannot be cached for ", s.label(),
                 ": random_crop / color_aug change the image every step");
    GL_CHECK(opt.vae_batch_size >= 1, "vae_batch_size must be >= 1");
    GL_CHECK(opt.threads >= 0, "latent caching threads must be >= 0 (0: one per hardware thread)");
    const auto t_start = Clock::now();
    const LatentSpec spec = enc.latent_spec();
    GL_CHECK(spec.channels >= 1 && spec.downscale >= 1, "latent cache: the encoder's latents have ", spec.channels,
             " channels at 1/", spec.downscale, " of the image size");
    const std::string identity = enc.identity();
    const InputValues values(enc.input_dtype());
    const int threads = opt.threads > 0 ? opt.threads : default_worker_threads();
    CacheReport rep;
    rep.keys.assign(ds.images.size() * 2, "");

    // Every image of the buckets once, bucket by bucket, in index order.
    std::vector<int> order, bucket_of(ds.images.size(), -1);
    for (size_t b = 0; b < a.buckets.size(); b++) {
        std::vector<int> distinct(a.buckets[b].images);
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        for (int i : distinct) bucket_of[size_t(i)] = int(b);
        order.insert(order.end(), distinct.begin(), distinct.end());
    }
    std::vector<Item> items;
    std::vector<Job> jobs;
    std::vector<VaeBatch> batches;
    Staging staging, noise_staging;  // each batch's input images and its unit noise
    std::deque<std::future<void>> writes;
    Workers pool(threads);  // declared after everything its tasks use, so it joins before they go
    auto finish = [&] {
        const auto t0 = Clock::now();
        for (std::future<void>& w : writes) w.get();
        rep.times.wait_write = seconds_since(t0);
        rep.times.total = seconds_since(t_start);
        return rep;
    };

    // 1. Read and hash every image: its keys, and which entries are cached already.
    {
        const auto t0 = Clock::now();
        Prefetch<Scan> scans(pool, order.size(), size_t(threads) * 4, [&](size_t k) {
            const int i = order[k];
            const ImageEntry& e = ds.images[size_t(i)];
            Scan s;
            std::vector<uint8_t> bytes;
            try {
                bytes = read_file_bytes(e.path);
            } catch (const ImageError& err) {
                s.skipped = SkippedImage{err.path(), err.reason()};
                return s;
            }
            s.sha = gl::io::sha256_hex(bytes.data(), bytes.size());
            const BucketChoice& ch = a.choice[size_t(i)];
            for (int f = 0; f < 2; f++) {
                if (f == 1 && !ds.config.subsets[size_t(e.subset)].flip_aug) continue;
                s.keys[size_t(f)] = latent_key(s.sha, ch, centre_crop(ch), f == 1, identity, e.resize);
                s.hit[size_t(f)] = cache.get(s.keys[size_t(f)]).has_value();
            }
            const bool missing = (!s.keys[0].empty() && !s.hit[0]) || (!s.keys[1].empty() && !s.hit[1]);
            if (opt.kohya_npz && spec.downscale == 8 && missing)
                reuse_kohya_npz(bytes, e, ds.config.subsets[size_t(e.subset)], ch, spec, cache, s);
            return s;
        });
        for (size_t k = 0; k < order.size(); k++) {
            if (opt.stop && opt.stop->load()) {
                rep.interrupted = true;
                break;
            }
            Scan s = *scans.next();
            const int i = order[k];
            if (s.skipped) {
                rep.skipped.push_back(std::move(*s.skipped));
                continue;
            }
            rep.kohya_reused += s.kohya_reused;
            if (!s.kohya_ignored.empty()) rep.kohya_ignored.push_back(std::move(s.kohya_ignored));
            Job job{i, items.size(), 0, s.sha};
            for (size_t f = 0; f < 2; f++) {
                if (s.keys[f].empty()) continue;
                rep.keys[size_t(i) * 2 + f] = s.keys[f];
                rep.total++;
                if (s.hit[f]) rep.hits++;
                else items.push_back({i, f == 1, s.keys[f]});
            }
            job.count = items.size() - job.first;
            if (job.count) jobs.push_back(std::move(job));
        }
        rep.times.scan = seconds_since(t0);
    }
    if (rep.interrupted) return finish();

    // 2. Each bucket's misses in batches of vae_batch_size (the last may be smaller).
    const size_t per_call = size_t(opt.vae_batch_size);
    std::set<EncoderShape> shapes;
    for (size_t at = 0; at < items.size();) {
        const int bucket = bucket_of[size_t(items[at].image)];
        const Reso r = a.buckets[size_t(bucket)].reso;
        size_t end = at;
        while (end < items.size() && bucket_of[size_t(items[end].image)] == bucket) end++;
        for (size_t first = at; first < end; first += per_call) {
            const int n = int(std::min(per_call, end - first));
            for (int k = 0; k < n; k++) items[first + size_t(k)].batch = batches.size(), items[first + size_t(k)].slot = k;
            batches.push_back({EncoderShape{n, r.h, r.w}, first});
            shapes.insert(batches.back().shape);
        }
        at = end;
    }
    auto place_bytes = [&](const EncoderShape& s) {
        return size_t(s.height) * size_t(s.width) * 3 * values.bytes_per_value();
    };
    auto latent_values = [&](const EncoderShape& s) {
        return size_t(s.height / spec.downscale) * size_t(s.width / spec.downscale) * size_t(spec.channels);
    };

    // 3. The workers decode, resize and convert the images into their batch's input and draw each
    // entry's noise, a window ahead of the encoder (starting while it plans and loads its weights),
    // and write each batch's entries once its latents are back.
    Prefetch<Prepared> prepared(pool, jobs.size(), std::max(size_t(threads) * 2, per_call * 2), [&](size_t j) {
        const Job& job = jobs[j];
        const ImageEntry& e = ds.images[size_t(job.image)];
        const BucketChoice& ch = a.choice[size_t(job.image)];
        Prepared out;
        const auto t0 = Clock::now();
        try {
            const std::vector<uint8_t> bytes = read_file_bytes(e.path);
            if (gl::io::sha256_hex(bytes.data(), bytes.size()) != job.sha)
                throw ImageError(e.path.string(), "changed while caching (run again to cache its new content)");
            const Image img = decode_resized(bytes, e, ch, false);
            const auto [cx, cy] = centre_crop(ch);
            for (size_t k = job.first; k < job.first + job.count; k++) {
                const Item& it = items[k];
                const EncoderShape& s = batches[it.batch].shape;
                uint8_t* dst = staging.batch(it.batch, place_bytes(s) * size_t(s.batch)) + place_bytes(s) * size_t(it.slot);
                values.write(img.rgb.data(), img.width, cx, cy, s.width, s.height, it.flip, dst);
                const size_t n = latent_values(s);
                const std::vector<float> noise = normal_noise(it.key, opt.seed, n);
                std::memcpy(noise_staging.batch(it.batch, n * 4 * size_t(s.batch)) + n * 4 * size_t(it.slot),
                            noise.data(), n * 4);
            }
        } catch (const ImageError& err) {
            out.skipped = SkippedImage{err.path(), err.reason()};
        }
        out.busy = seconds_since(t0);
        return out;
    });
    if (!batches.empty()) {
        const auto t0 = Clock::now();
        enc.prepare(std::vector<EncoderShape>(shapes.begin(), shapes.end()));
        rep.times.setup = seconds_since(t0);
    }
    std::vector<char> failed(items.size(), 0);
    size_t jobs_done = 0;
    for (size_t bi = 0; bi < batches.size(); bi++) {
        if (opt.stop && opt.stop->load()) {
            rep.interrupted = true;
            break;
        }
        const EncoderShape& s = batches[bi].shape;
        const size_t first = batches[bi].first, end = first + size_t(s.batch);
        const auto t0 = Clock::now();
        while (jobs_done < jobs.size() && jobs[jobs_done].first < end) {
            Prepared p = *prepared.next();
            const Job& job = jobs[jobs_done++];
            rep.times.prepare_busy += p.busy;
            if (!p.skipped) continue;
            rep.skipped.push_back(std::move(*p.skipped));
            for (size_t k = job.first; k < job.first + job.count; k++) {
                failed[k] = 1;
                rep.keys[size_t(items[k].image) * 2 + items[k].flip].clear();
            }
        }
        rep.times.wait_prepare += seconds_since(t0);
        std::optional<Staging::Buffer> input = staging.take(bi), noise = noise_staging.take(bi);
        size_t ok = first;
        while (ok < end && failed[ok]) ok++;
        if (ok == end) {  // every image of the batch failed: no call
            if (input) staging.recycle(std::move(*input));
            if (noise) noise_staging.recycle(std::move(*noise));
            continue;
        }
        GL_CHECK(input.has_value() && noise.has_value(), "latent cache: batch ", bi,
                 " has prepared images but no input buffer");
        // A failed image's place holds a copy of another: the batch keeps its planned shape.
        const size_t place = place_bytes(s), per = latent_values(s);
        for (size_t k = first; k < end; k++)
            if (failed[k]) {
                std::memcpy(input->data.get() + (k - first) * place, input->data.get() + (ok - first) * place, place);
                std::memcpy(noise->data.get() + (k - first) * per * 4, noise->data.get() + (ok - first) * per * 4,
                            per * 4);
            }
        const auto t1 = Clock::now();
        auto z = std::make_shared<const std::vector<float>>(
            enc.encode(input->data.get(), values.dtype(), s,
                       std::span<const float>(reinterpret_cast<const float*>(noise->data.get()), per * size_t(s.batch))));
        rep.times.encode += seconds_since(t1);
        staging.recycle(std::move(*input));
        noise_staging.recycle(std::move(*noise));
        rep.vae_calls++;
        GL_CHECK(z->size() == per * size_t(s.batch), "the image encoder returned ", z->size(), " values, expected ",
                 per * size_t(s.batch));
        const int lh = s.height / spec.downscale, lw = s.width / spec.downscale;
        for (size_t k = first; k < end; k++) {
            if (failed[k]) continue;
            writes.push_back(pool.submit([&cache, z, at = (k - first) * per, per, lh, lw, c = spec.channels,
                                          key = items[k].key, path = ds.images[size_t(items[k].image)].path.string()] {
                Latent l{lh, lw, c, std::vector<float>(z->begin() + ptrdiff_t(at), z->begin() + ptrdiff_t(at + per))};
                for (float v : l.data) GL_CHECK(std::isfinite(v), "NaN or inf in the latents of ", path);
                cache.put(key, std::move(l));
            }));
            rep.encoded++;
        }
        while (!writes.empty() && writes.front().wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            writes.front().get();  // a write's error stops caching now
            writes.pop_front();
        }
        if (opt.progress) {
            const double sec = seconds_since(t_start);
            opt.progress(rep.hits + rep.encoded, rep.total, sec > 0 ? double(rep.encoded) / sec : 0);
        }
    }
    return finish();
}

}  // namespace data
