// Python's arithmetic is reproduced where it decides a bucket: `/` on ints is a double division,
// int(x + 0.5) truncates, `//` on a float floors, numpy's argmin takes the first minimum.
#include "data/bucket.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "ggml-lite/core/error.h"

namespace data {

std::vector<Reso> make_bucket_resolutions(Reso max_reso, int min_size, int max_size, int divisible) {
    GL_CHECK(divisible > 0 && min_size > 0 && max_size >= min_size && max_reso.w > 0 && max_reso.h > 0,
             "make_bucket_resolutions: bad arguments");
    const int64_t max_area = int64_t(max_reso.w) * max_reso.h;
    std::set<Reso> resos;
    const int side = int(std::floor(std::sqrt(double(max_area)) / divisible)) * divisible;
    resos.insert({side, side});
    for (int width = min_size; width <= max_size; width += divisible) {
        const int height = int(std::min<int64_t>(max_size, (max_area / width) / divisible * divisible));
        if (height >= min_size) {
            resos.insert({width, height});
            resos.insert({height, width});
        }
    }
    return {resos.begin(), resos.end()};
}

namespace {

double pairwise_sum(const double* x, size_t n) {
    if (n < 8) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += x[i];
        return s;
    }
    if (n <= 128) {
        double r[8];
        for (size_t j = 0; j < 8; j++) r[j] = x[j];
        size_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (size_t j = 0; j < 8; j++) r[j] += x[i + j];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) s += x[i];
        return s;
    }
    const size_t half = n / 2 - (n / 2) % 8;
    return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
}

}  // namespace

double numpy_mean(const std::vector<double>& x) {
    return x.empty() ? 0 : pairwise_sum(x.data(), x.size()) / double(x.size());
}

BucketSelector::BucketSelector(bool no_upscale, Reso max_reso, int min_size, int max_size, int steps)
    : no_upscale_(no_upscale), max_area_(int64_t(max_reso.w) * max_reso.h), steps_(steps) {
    if (!no_upscale) {
        predefined_ = make_bucket_resolutions(max_reso, min_size, max_size, steps);
        for (const Reso& r : predefined_) ratios_.push_back(double(r.w) / r.h);
    }
}

BucketSelector BucketSelector::fixed(Reso reso) {
    BucketSelector s;
    s.max_area_ = int64_t(reso.w) * reso.h;
    s.predefined_ = {reso};
    s.ratios_ = {double(reso.w) / reso.h};
    return s;
}

int BucketSelector::round_to_steps(double x) const {
    const int v = int(x + 0.5);
    return v - v % steps_;
}

BucketChoice BucketSelector::select(int image_w, int image_h) const {
    GL_CHECK(image_w > 0 && image_h > 0, "select bucket: bad image size ", image_w, "x", image_h);
    const double ar = double(image_w) / image_h;
    BucketChoice c;
    if (!no_upscale_) {
        Reso reso{image_w, image_h};
        if (std::find(predefined_.begin(), predefined_.end(), reso) == predefined_.end()) {
            size_t best = 0;
            for (size_t i = 1; i < ratios_.size(); i++)
                if (std::fabs(ratios_[i] - ar) < std::fabs(ratios_[best] - ar)) best = i;
            reso = predefined_[best];
        }
        const double ar_reso = double(reso.w) / reso.h;
        const double scale = ar > ar_reso ? double(reso.h) / image_h : double(reso.w) / image_w;
        c.bucket = reso;
        c.resized = {int(image_w * scale + 0.5), int(image_h * scale + 0.5)};
    } else {
        Reso resized{image_w, image_h};
        if (int64_t(image_w) * image_h > max_area_) {
            const double rw = std::sqrt(double(max_area_) * ar);
            const double rh = double(max_area_) / rw;
            const int bw = round_to_steps(rw);
            const int bh_in_wr = round_to_steps(bw / ar);
            const double ar_w = double(bw) / bh_in_wr;
            const int bh = round_to_steps(rh);
            const int bw_in_hr = round_to_steps(bh * ar);
            const double ar_h = double(bw_in_hr) / bh;
            if (std::fabs(ar_w - ar) < std::fabs(ar_h - ar)) resized = {bw, int(bw / ar + 0.5)};
            else resized = {int(bh * ar + 0.5), bh};
        }
        c.resized = resized;
        c.bucket = {resized.w - resized.w % steps_, resized.h - resized.h % steps_};
    }
    c.ar_error = double(c.bucket.w) / c.bucket.h - ar;
    return c;
}

BucketAssignment assign_buckets(const Dataset& ds) {
    const DatasetConfig& c = ds.config;
    BucketAssignment a;
    const Reso reso{c.width, c.height};
    BucketSelector sel = BucketSelector::fixed(reso);
    if (c.enable_bucket) {
        int lo = c.min_bucket_reso, hi = c.max_bucket_reso;
        const int st = c.bucket_reso_steps;
        if (lo % st) {
            a.warnings.push_back(gl::cat("min_bucket_reso adjusted to a multiple of bucket_reso_steps: ", lo, " -> ",
                                         lo - lo % st));
            lo -= lo % st;
        }
        if (hi % st) {
            a.warnings.push_back(gl::cat("max_bucket_reso adjusted to a multiple of bucket_reso_steps: ", hi, " -> ",
                                         hi + st - hi % st));
            hi += st - hi % st;
        }
        GL_CHECK(std::min(reso.w, reso.h) >= lo, "min_bucket_reso (", lo, ") must not exceed the resolution's ",
                 "smaller side (", std::min(reso.w, reso.h), ")");
        GL_CHECK(std::max(reso.w, reso.h) <= hi, "max_bucket_reso (", hi, ") must be at least the resolution's ",
                 "larger side (", std::max(reso.w, reso.h), ")");
        GL_CHECK(lo > 0, "min_bucket_reso must be at least bucket_reso_steps (", st, ")");
        sel = BucketSelector(c.bucket_no_upscale, reso, lo, hi, st);
    }
    std::vector<Bucket> all;
    std::vector<double> errors;  // in the dataset's order, as kohya's image_data
    for (size_t i = 0; i < ds.images.size(); i++) {
        const ImageEntry& e = ds.images[i];
        const BucketChoice ch = sel.select(e.width, e.height);
        a.choice.push_back(ch);
        // kohya would go on with these; an empty bucket fails later and a thin strip is resized to
        // hundreds of megapixels to keep a crop of it, so they are skipped with the reason.
        if (ch.bucket.w <= 0 || ch.bucket.h <= 0) {
            a.skipped.push_back({e.path.string(), gl::cat(e.width, "x", e.height, " is too small for bucket_reso_steps ",
                                                          c.bucket_reso_steps, " (bucket ", ch.bucket.w, "x",
                                                          ch.bucket.h, ")")});
            continue;
        }
        if (int64_t(ch.resized.w) * ch.resized.h > 16 * int64_t(ch.bucket.w) * ch.bucket.h) {
            a.skipped.push_back({e.path.string(), gl::cat("aspect ratio too far from every bucket: ", e.width, "x",
                                                          e.height, " would be resized to ", ch.resized.w, "x",
                                                          ch.resized.h, " for bucket ", ch.bucket.w, "x",
                                                          ch.bucket.h)});
            continue;
        }
        // OpenCV's INTER_AREA enlarges by its bilinear path, which sdtrain does not reproduce: refused
        // before anything is encoded rather than resized by other arithmetic than kohya's.
        GL_CHECK(can_resize(e.resize, e.width, e.height, ch.resized.w, ch.resized.h), e.path.string(),
                 ": resize_interpolation 'area' would enlarge it (", e.width, "x", e.height, " to ", ch.resized.w, "x",
                 ch.resized.h, " for bucket ", ch.bucket.w, "x", ch.bucket.h, "); OpenCV's INTER_AREA enlarges "
                 "with its bilinear path, which sdtrain does not reimplement: use 'lanczos' or 'box', or leave "
                 "resize_interpolation unset");
        errors.push_back(std::fabs(ch.ar_error));
        auto it = std::find_if(all.begin(), all.end(), [&](const Bucket& b) { return b.reso == ch.bucket; });
        if (it == all.end()) it = all.insert(all.end(), Bucket{ch.bucket, {}, 0});
        it->distinct++;
        for (int r = 0; r < e.num_repeats; r++) it->images.push_back(int(i));
    }
    std::sort(all.begin(), all.end(), [](const Bucket& x, const Bucket& y) { return x.reso < y.reso; });
    a.buckets = std::move(all);
    a.mean_ar_error = numpy_mean(errors);
    GL_CHECK(!a.buckets.empty(), "no image fits a bucket (", a.skipped.size(), " skipped, first: ",
             a.skipped.empty() ? "" : a.skipped[0].path + ": " + a.skipped[0].reason, ")");
    return a;
}

std::string bucket_table(const BucketAssignment& a) {
    std::string s = "bucket  resolution   images  with repeats\n";
    int64_t n = 0, r = 0;
    for (size_t i = 0; i < a.buckets.size(); i++) {
        const Bucket& b = a.buckets[i];
        char line[96];
        std::snprintf(line, sizeof line, "%6zu  %4d x %-4d  %6d  %12zu\n", i, b.reso.w, b.reso.h, b.distinct,
                      b.images.size());
        s += line;
        n += b.distinct;
        r += int64_t(b.images.size());
    }
    char tail[128];
    std::snprintf(tail, sizeof tail, " total               %6lld  %12lld   (mean aspect-ratio error %.4f)\n",
                  (long long)n, (long long)r, a.mean_ar_error);
    return s + tail;
}

namespace {
constexpr uint64_t kEpochStream = 0x65706f6368ull;  // "epoch"
}

EpochPlanner::EpochPlanner(const BucketAssignment& a, int batch_size, uint64_t seed, int world) : seed_(seed) {
    GL_CHECK(batch_size >= 1 && world >= 1, "batch size and ranks must be >= 1");
    for (size_t b = 0; b < a.buckets.size(); b++) {
        lists_.push_back(a.buckets[b].images);
        const size_t bs = size_t(a.buckets[b].batch(batch_size)) * size_t(world);
        batch_sizes_.push_back(bs);
        const int n = int((a.buckets[b].images.size() + bs - 1) / bs);
        for (int k = 0; k < n; k++) batches_.emplace_back(int(b), k);
    }
}

std::vector<BatchRef> EpochPlanner::epoch(int epoch) {
    GL_CHECK(epoch >= 1 && epoch > current_, "epochs are planned in increasing order from 1 (asked ", epoch,
             " after ", current_, ")");
    // kohya shuffles once when the buckets are made (epoch 0) and once more per epoch; the lists
    // carry over, so epoch e sees e + 1 shuffles.
    for (int e = current_ == 0 ? 0 : current_ + 1; e <= epoch; e++) {
        Rng rng = Rng::derive(seed_, {kEpochStream, uint64_t(e)});
        rng.shuffle(batches_);
        for (std::vector<int>& l : lists_) rng.shuffle(l);
    }
    current_ = epoch;
    std::vector<BatchRef> out;
    for (const auto& [b, k] : batches_) {
        const std::vector<int>& l = lists_[size_t(b)];
        const size_t bs = batch_sizes_[size_t(b)], first = size_t(k) * bs;
        BatchRef r{b, {}};
        r.images.assign(l.begin() + long(first), l.begin() + long(std::min(l.size(), first + bs)));
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace data
