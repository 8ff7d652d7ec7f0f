#include "data/loader.h"

#include <algorithm>

#include "data/caption.h"
#include "data/color_aug.h"
#include "data/face_crop.h"
#include "data/resize.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/dist/shard.h"

namespace data {
namespace {
constexpr uint64_t kSampleStream = 0x73616d706c65ull;  // "sample"
}

Loader::Loader(const Dataset& ds, const BucketAssignment& a, LoaderOptions opt) : ds_(ds), a_(a), opt_(opt) {
    GL_CHECK(opt_.epochs >= 1 && opt_.threads >= 1 && opt_.queue_depth >= 1,
             "loader: epochs, threads and queue_depth must be >= 1");
    GL_CHECK(!opt_.latents || (opt_.latent_keys && opt_.latent_keys->keys.size() == ds.images.size() * 2),
             "loader: cached latents need the keys cache_latents returned for this dataset");
    GL_CHECK(opt_.batches_per_update >= 1, "loader: batches_per_update must be >= 1");
    GL_CHECK(opt_.world >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world, "loader: rank ", opt_.rank,
             " outside a world of ", opt_.world);
    EpochPlanner planner(a, ds.config.batch_size, opt_.seed, opt_.world);
    int64_t updates_before = 0;  // in the epochs before this one
    for (int e = 1; e <= opt_.epochs; e++) {
        int64_t k = 0;
        for (BatchRef& b : planner.epoch(e))
            plan_.push_back({e, updates_before + k++ / opt_.batches_per_update, std::move(b)});
        updates_before += (k + opt_.batches_per_update - 1) / opt_.batches_per_update;
    }
    GL_CHECK(opt_.first_batch <= plan_.size(), "loader: first batch ", opt_.first_batch, " is past the run's ",
             plan_.size(), " batches");
    pool_ = std::make_unique<Workers>(opt_.threads);
    // At least one batch per thread may be in flight, so every thread has work. A resumed run
    // starts at first_batch: the batches before it are planned (the same order) but never made.
    const size_t first = opt_.first_batch;
    batches_ = std::make_unique<Prefetch<Batch>>(*pool_, plan_.size() - first,
                                                 size_t(std::max(opt_.queue_depth, opt_.threads)),
                                                 [this, first](size_t i) { return make(first + i); });
}

Loader::~Loader() {
    batches_.reset();  // waits for the batches under way, which use the pool and this loader
    pool_.reset();
}

std::vector<SkippedImage> Loader::skipped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return skipped_;
}

Batch Loader::make(size_t step) const {
    const Planned& p = plan_[step];
    Batch b;
    b.epoch = p.epoch;
    b.step = int(step);
    b.bucket = a_.buckets[size_t(p.ref.bucket)].reso;
    const gl::dist::Shard shard = gl::dist::shard_of(int64_t(p.ref.images.size()), opt_.world, opt_.rank);
    b.global_images = int64_t(p.ref.images.size());
    b.first = shard.begin;
    b.planned = shard.count;
    for (size_t k = size_t(shard.begin); k < size_t(shard.begin + shard.count); k++) {
        const int i = p.ref.images[k];
        const ImageEntry& e = ds_.images[size_t(i)];
        const SubsetConfig& s = ds_.config.subsets[size_t(e.subset)];
        Rng rng = Rng::derive(opt_.seed, {kSampleStream, uint64_t(step), uint64_t(k)});
        Sample smp;
        smp.image = i;
        smp.loss_weight = e.is_reg ? float(opt_.prior_loss_weight) : 1.0f;
        smp.flipped = s.flip_aug && rng.uniform() < 0.5;
        try {
            // A mask image goes through its image's resize, crop and flip (kohya centres its crop
            // whatever random_crop says; the image's own crop keeps the pair aligned).
            std::optional<std::array<int, 2>> crop;
            const BucketChoice& ch = a_.choice[size_t(i)];
            // kohya's face crop (data/face_crop.h): without bucketing, for an image whose name has a
            // face box, drawn here in kohya's order (after the flip). Cached latents are encoded
            // without it, as kohya's cache does.
            std::optional<FaceCrop> face;
            if (s.face_crop_aug_range && !ds_.config.enable_bucket && e.face && e.face->cx > 0 && !opt_.latents) {
                RngFaceDraws draws(rng);
                face = plan_face_crop(e.width, e.height, ch.bucket.w, ch.bucket.h, *e.face, *s.face_crop_aug_range,
                                      s.random_crop, draws, e.path.string());
            }
            if (s.random_crop && !opt_.latents && !face)
                crop = std::array<int, 2>{int(rng.below(uint64_t(ch.resized.w - ch.bucket.w) + 1)),
                                          int(rng.below(uint64_t(ch.resized.h - ch.bucket.h) + 1))};
            // Face crop or not, the image's prepare, done to the mask too.
            const auto prepare = [&](const ImageEntry& x, bool flip, bool keep_alpha) {
                return face ? prepare_face_crop(x, *face, ch.bucket.w, ch.bucket.h, flip, keep_alpha)
                            : prepare_image(x, ch, flip, keep_alpha, crop);
            };
            if (!e.mask.empty()) {
                ImageEntry m = e;
                m.path = e.mask;
                const PreparedImage mask = prepare(m, smp.flipped, true);
                for (size_t p = 0; p < mask.rgb.size(); p += 3) smp.mask.push_back(float(mask.rgb[p]) / 255.f);
            }
            if (opt_.latents) {
                const std::string& key = opt_.latent_keys->keys[size_t(i) * 2 + smp.flipped];
                std::optional<Latent> l = key.empty() ? std::nullopt : opt_.latents->get(key);
                if (!l) throw ImageError(e.path.string(), "no cached latent (it failed to cache)");
                smp.latent = std::move(l->data);
            } else {
                // kohya's color_aug comes after the crop and before the flip (OpenCV's rounding
                // depends on where a pixel lies in its row).
                PreparedImage img = prepare(e, smp.flipped && !s.color_aug, s.alpha_mask);
                if (s.color_aug) {
                    color_aug(img.rgb, img.width, rng);
                    if (smp.flipped) {
                        flip_horizontal(img.rgb.data(), img.width, img.height, 3);
                        if (!img.alpha.empty()) flip_horizontal(img.alpha.data(), img.width, img.height, 1);
                    }
                }
                smp.pixels.resize(img.rgb.size());
                to_unit_range(img.rgb, smp.pixels.data());
                for (uint8_t v : img.alpha) smp.mask.push_back(float(v) / 255.f);
            }
        } catch (const ImageError& err) {
            std::lock_guard<std::mutex> lock(mu_);
            skipped_.push_back({err.path(), err.reason()});
            continue;
        }
        smp.caption = process_caption(s.caption, e.caption, p.epoch, rng, {p.update, opt_.max_train_steps});
        b.samples.push_back(std::move(smp));
    }
    return b;
}

std::optional<Batch> Loader::next() {
    while (std::optional<Batch> b = batches_->next())
        if (!b->samples.empty() || opt_.world > 1) return b;  // one rank passes over a batch whose images all failed
    return std::nullopt;
}

}  // namespace data
