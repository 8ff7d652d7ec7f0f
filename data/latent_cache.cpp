#include "data/latent_cache.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <unistd.h>

#include "data/resize.h"
#include "ggml-lite/io/sha256.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"

namespace data {
namespace fs = std::filesystem;

namespace {

PreparedImage prepare_bytes(const std::vector<uint8_t>& bytes, const ImageEntry& e, const BucketChoice& ch,
                            bool flip, bool keep_alpha, std::optional<std::array<int, 2>> crop_at) {
    DecodeOptions dopt;
    dopt.alpha = keep_alpha ? AlphaMode::mask : AlphaMode::white;
    Image img = decode_image(bytes.data(), bytes.size(), e.path.string(), dopt);
    const Reso r = ch.resized, b = ch.bucket;
    GL_CHECK(r.w >= b.w && r.h >= b.h, e.path.string(), ": resized size ", r.w, "x", r.h, " does not cover bucket ",
             b.w, "x", b.h);
    const int cx = crop_at ? (*crop_at)[0] : (r.w - b.w) / 2, cy = crop_at ? (*crop_at)[1] : (r.h - b.h) / 2;
    PreparedImage p;
    p.width = b.w;
    p.height = b.h;
    std::vector<uint8_t> rgb = resize_like_kohya(img.rgb.data(), img.width, img.height, 3, r.w, r.h);
    p.rgb = crop(rgb.data(), r.w, r.h, 3, cx, cy, b.w, b.h);
    if (flip) flip_horizontal(p.rgb.data(), b.w, b.h, 3);
    if (keep_alpha) {
        std::vector<uint8_t> a = resize_like_kohya(img.alpha.data(), img.width, img.height, 1, r.w, r.h);
        p.alpha = crop(a.data(), r.w, r.h, 1, cx, cy, b.w, b.h);
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

struct VaeGraphEncoder::Shape {
    int batch, height, width;
    gl::Graph g;
    std::unique_ptr<sd::Weights> w;
    gl::ValueId x, moments;
    std::unique_ptr<gl::Runtime> rt;
};

VaeGraphEncoder::VaeGraphEncoder(sd::VaeConfig config, const gl::io::TensorSource& weights, std::string identity,
                                 gl::DType dtype, gl::Backend backend)
    : config_(std::move(config)), weights_(weights), identity_(std::move(identity)), dtype_(dtype),
      backend_(backend) {
    config_.validate();
}
VaeGraphEncoder::~VaeGraphEncoder() = default;

void VaeGraphEncoder::release() { current_.reset(); }

std::vector<float> VaeGraphEncoder::moments(const std::vector<float>& x, int batch, int height, int width) {
    const int64_t f = config_.downscale();
    GL_CHECK(batch > 0 && height > 0 && width > 0 && height % f == 0 && width % f == 0, "VAE encoder: input ",
             batch, "x", height, "x", width, " must be positive multiples of ", f);
    GL_CHECK(x.size() == size_t(batch) * height * width * 3, "VAE encoder: ", x.size(), " values for ", batch, "x",
             height, "x", width, "x3");
    if (!current_ || current_->batch != batch || current_->height != height || current_->width != width) {
        current_.reset();  // the previous shape's weights go before the next are loaded
        auto s = std::make_unique<Shape>();
        s->batch = batch, s->height = height, s->width = width;
        s->w = std::make_unique<sd::Weights>(s->g, dtype_);
        s->x = s->g.input("x", gl::DType::f32, {batch, height, width, config_.in_channels});
        s->moments = sd::vae_encode(*s->w, config_, s->x).moments;
        s->g.mark_output(s->moments);
        s->rt = gl::make_runtime(gl::make_plan(s->g), backend_);
        sd::load_vae(*s->w, config_, weights_, *s->rt);
        current_ = std::move(s);
        graphs_built_++;
    }
    current_->rt->write_f32(current_->x, x);
    current_->rt->run();
    return current_->rt->read_f32(current_->moments);
}

std::string latent_key(const std::string& image_sha256, const BucketChoice& c, std::array<int, 2> crop, bool flip,
                       const std::string& encoder_identity) {
    return gl::io::sha256_hex(gl::cat("latent v1|", image_sha256, "|bucket ", c.bucket.w, "x", c.bucket.h, "|resized ",
                                      c.resized.w, "x", c.resized.h, "|crop ", crop[0], ",", crop[1], "|flip ",
                                      int(flip), "|encoder ", encoder_identity));
}

LatentCache::LatentCache(std::optional<fs::path> dir) : dir_(std::move(dir)) {
    if (dir_) fs::create_directories(*dir_);
}

std::optional<fs::path> LatentCache::file_of(const std::string& key) const {
    if (!dir_) return std::nullopt;
    return *dir_ / (key + ".latent");
}

size_t LatentCache::ram_entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ram_.size();
}

std::optional<Latent> LatentCache::get(const std::string& key) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = ram_.find(key);
        if (it != ram_.end()) return it->second;
    }
    if (!dir_) return std::nullopt;
    std::ifstream f(*file_of(key), std::ios::binary | std::ios::ate);
    if (!f) return std::nullopt;
    const std::streamoff size = f.tellg();
    char head[16];
    f.seekg(0);
    if (size < 16 || !f.read(head, 16) || std::memcmp(head, kMagic, 8) != 0) return std::nullopt;
    uint16_t dims[3];
    std::memcpy(dims, head + 8, 6);
    Latent l{dims[0], dims[1], dims[2], {}};
    const size_t n = size_t(l.height) * l.width * l.channels;
    if (n == 0 || uint64_t(size) != 16 + n * 4) return std::nullopt;
    l.data.resize(n);
    if (!f.read(reinterpret_cast<char*>(l.data.data()), std::streamsize(n * 4))) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    return ram_.emplace(key, std::move(l)).first->second;
}

void LatentCache::put(const std::string& key, Latent l) {
    GL_CHECK(l.data.size() == size_t(l.height) * l.width * l.channels && l.height < 65536 && l.width < 65536 &&
                 l.channels < 65536,
             "latent cache: bad entry ", l.height, "x", l.width, "x", l.channels);
    if (dir_) {
        const fs::path final_path = *file_of(key);
        const fs::path tmp = final_path.string() + ".tmp." + std::to_string(getpid());
        {
            std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
            const uint16_t dims[5] = {uint16_t(l.height), uint16_t(l.width), uint16_t(l.channels), 0, 0};
            f.write(kMagic, 8);
            f.write(reinterpret_cast<const char*>(dims), 8);
            f.write(reinterpret_cast<const char*>(l.data.data()), std::streamsize(l.data.size() * 4));
            f.flush();
            GL_CHECK(f, "latent cache: cannot write ", tmp.string());
        }
        fs::rename(tmp, final_path);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ram_[key] = std::move(l);
}

CacheReport cache_latents(const Dataset& ds, const BucketAssignment& a, LatentCache& cache, LatentEncoder& enc,
                          const CacheOptions& opt) {
    for (const SubsetConfig& s : ds.config.subsets)
        GL_CHECK(!s.random_crop && !s.color_aug, "latents cannot be cached for ", s.image_dir.string(),
                 ": random_crop / color_aug change the image every step");
    GL_CHECK(opt.vae_batch_size >= 1, "vae_batch_size must be >= 1");
    const sd::VaeConfig& vc = enc.config();
    CacheReport rep;
    rep.keys.assign(ds.images.size() * 2, "");
    struct Todo {
        int image;
        bool flip;
        std::string key;
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (const Bucket& b : a.buckets) {
        std::vector<int> distinct(b.images.begin(), b.images.end());
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        std::vector<Todo> todo;
        std::map<int, std::vector<uint8_t>> bytes_of;
        for (int i : distinct) {
            const ImageEntry& e = ds.images[size_t(i)];
            const bool flips = ds.config.subsets[size_t(e.subset)].flip_aug;
            std::vector<uint8_t> bytes;
            try {
                bytes = read_file_bytes(e.path);
            } catch (const ImageError& err) {
                rep.skipped.push_back({err.path(), err.reason()});
                continue;
            }
            const std::string sha = gl::io::sha256_hex(bytes.data(), bytes.size());
            const BucketChoice& ch = a.choice[size_t(i)];
            const std::array<int, 2> crop{(ch.resized.w - ch.bucket.w) / 2, (ch.resized.h - ch.bucket.h) / 2};
            bool any_miss = false;
            for (bool flip : {false, true}) {
                if (flip && !flips) continue;
                const std::string key = latent_key(sha, ch, crop, flip, enc.identity());
                rep.keys[size_t(i) * 2 + flip] = key;
                rep.total++;
                if (cache.get(key)) {
                    rep.hits++;
                } else {
                    todo.push_back({i, flip, key});
                    any_miss = true;
                }
            }
            if (any_miss) bytes_of[i] = std::move(bytes);
        }
        const size_t hw = size_t(b.reso.w) * b.reso.h;
        for (size_t at = 0; at < todo.size();) {
            if (opt.stop && opt.stop->load()) {
                rep.interrupted = true;
                return rep;
            }
            std::vector<Todo> batch;
            std::vector<float> x;
            for (; at < todo.size() && int(batch.size()) < opt.vae_batch_size; at++) {
                const Todo& t = todo[at];
                const ImageEntry& e = ds.images[size_t(t.image)];
                PreparedImage p;
                try {
                    p = prepare_bytes(bytes_of[t.image], e, a.choice[size_t(t.image)], t.flip, false, std::nullopt);
                } catch (const ImageError& err) {
                    rep.skipped.push_back({err.path(), err.reason()});
                    rep.keys[size_t(t.image) * 2 + t.flip].clear();
                    continue;
                }
                x.resize(x.size() + hw * 3);
                to_unit_range(p.rgb, x.data() + x.size() - hw * 3);
                batch.push_back(t);
            }
            if (batch.empty()) continue;
            // The bucket's last batch is padded (its last image repeated) to the bucket's batch
            // size, so each bucket needs one graph: rebuilding one reloads the VAE's weights.
            const size_t shape_batch = std::min(todo.size(), size_t(opt.vae_batch_size));
            const std::vector<float> last(x.end() - long(hw * 3), x.end());
            for (size_t k = batch.size(); k < shape_batch; k++) x.insert(x.end(), last.begin(), last.end());
            const std::vector<float> m = enc.moments(x, int(std::max(shape_batch, batch.size())), b.reso.h, b.reso.w);
            rep.vae_calls++;
            const int lh = int(b.reso.h / vc.downscale()), lw = int(b.reso.w / vc.downscale());
            const size_t per = size_t(lh) * lw * 2 * vc.latent_channels;
            GL_CHECK(m.size() >= per * batch.size(), "VAE encoder returned ", m.size(), " values, expected ",
                     per * batch.size());
            for (size_t k = 0; k < batch.size(); k++) {
                const std::vector<float> mk(m.begin() + long(k * per), m.begin() + long((k + 1) * per));
                const std::vector<float> noise = normal_noise(batch[k].key, opt.seed, per / 2);
                Latent l{lh, lw, vc.latent_channels, sd::vae_sample_latent(vc, mk, noise)};
                for (float v : l.data)
                    GL_CHECK(std::isfinite(v), "NaN or inf in the latents of ", ds.images[size_t(batch[k].image)].path.string());
                cache.put(batch[k].key, std::move(l));
                rep.encoded++;
            }
            if (opt.progress) {
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                opt.progress(rep.hits + rep.encoded, rep.total, s > 0 ? double(rep.encoded) / s : 0);
            }
        }
    }
    return rep;
}

}  // namespace data
