#include "data/loader.h"

#include <algorithm>
#include <chrono>

#include "data/caption.h"
#include "ggml-lite/core/error.h"

namespace data {
namespace {
constexpr uint64_t kSampleStream = 0x73616d706c65ull;  // "sample"
}

Loader::Loader(const Dataset& ds, const BucketAssignment& a, LoaderOptions opt) : ds_(ds), a_(a), opt_(opt) {
    GL_CHECK(opt_.epochs >= 1 && opt_.threads >= 1 && opt_.queue_depth >= 1,
             "loader: epochs, threads and queue_depth must be >= 1");
    GL_CHECK(!opt_.latents || (opt_.latent_keys && opt_.latent_keys->keys.size() == ds.images.size() * 2),
             "loader: cached latents need the keys cache_latents returned for this dataset");
    EpochPlanner planner(a, ds.config.batch_size, opt_.seed);
    for (int e = 1; e <= opt_.epochs; e++)
        for (BatchRef& b : planner.epoch(e)) plan_.push_back({e, std::move(b)});
    GL_CHECK(opt_.first_batch <= plan_.size(), "loader: first batch ", opt_.first_batch, " is past the run's ",
             plan_.size(), " batches");
    next_to_make_ = next_to_give_ = opt_.first_batch;
    for (int t = 0; t < opt_.threads; t++) workers_.emplace_back([this] { work(); });
}

Loader::~Loader() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
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
    for (size_t k = 0; k < p.ref.images.size(); k++) {
        const int i = p.ref.images[k];
        const ImageEntry& e = ds_.images[size_t(i)];
        const SubsetConfig& s = ds_.config.subsets[size_t(e.subset)];
        Rng rng = Rng::derive(opt_.seed, {kSampleStream, uint64_t(step), uint64_t(k)});
        Sample smp;
        smp.image = i;
        smp.loss_weight = e.is_reg ? float(opt_.prior_loss_weight) : 1.0f;
        smp.flipped = s.flip_aug && rng.uniform() < 0.5;
        try {
            if (opt_.latents) {
                const std::string& key = opt_.latent_keys->keys[size_t(i) * 2 + smp.flipped];
                std::optional<Latent> l = key.empty() ? std::nullopt : opt_.latents->get(key);
                if (!l) throw ImageError(e.path.string(), "no cached latent (it failed to cache)");
                smp.latent = std::move(l->data);
            } else {
                const BucketChoice& ch = a_.choice[size_t(i)];
                std::optional<std::array<int, 2>> crop;
                if (s.random_crop)
                    crop = std::array<int, 2>{int(rng.below(uint64_t(ch.resized.w - ch.bucket.w) + 1)),
                                              int(rng.below(uint64_t(ch.resized.h - ch.bucket.h) + 1))};
                const PreparedImage img = prepare_image(e, ch, smp.flipped, s.alpha_mask, crop);
                smp.pixels.resize(img.rgb.size());
                to_unit_range(img.rgb, smp.pixels.data());
                for (uint8_t v : img.alpha) smp.mask.push_back(float(v) / 255.f);
            }
        } catch (const ImageError& err) {
            std::lock_guard<std::mutex> lock(mu_);
            skipped_.push_back({err.path(), err.reason()});
            continue;
        }
        smp.caption = process_caption(s.caption, e.caption, p.epoch, rng);
        b.samples.push_back(std::move(smp));
    }
    return b;
}

void Loader::work() {
    for (;;) {
        size_t step;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] {
                // At least one batch per thread may be in flight, so every thread has work.
                const size_t window = size_t(std::max(opt_.queue_depth, opt_.threads));
                return stop_ || error_ || (next_to_make_ < plan_.size() && next_to_make_ < next_to_give_ + window);
            });
            if (stop_ || error_) return;
            step = next_to_make_++;
        }
        try {
            Batch b = make(step);
            std::lock_guard<std::mutex> lock(mu_);
            ready_.emplace(step, std::move(b));
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu_);
            error_ = std::current_exception();
        }
        cv_.notify_all();
    }
}

std::optional<Batch> Loader::next() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        if (next_to_give_ >= plan_.size()) return std::nullopt;
        const auto t0 = std::chrono::steady_clock::now();
        cv_.wait(lock, [&] { return error_ || ready_.count(next_to_give_); });
        wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (error_) std::rethrow_exception(error_);
        Batch b = std::move(ready_.at(next_to_give_));
        ready_.erase(next_to_give_++);
        cv_.notify_all();
        if (!b.samples.empty()) return b;  // a batch whose images all failed is passed over
    }
}

}  // namespace data
