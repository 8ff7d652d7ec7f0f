#include "train/run/data_plan.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "ggml-lite/core/error.h"
#include "ggml-lite/dist/shard.h"
#include "models/sd15/prompt_weights.h"
#include "train/run/option_table.h"

namespace train {

namespace fs = std::filesystem;

data::ConfigLevel dataset_command_line(const RunConfig& c) {
    data::ConfigLevel l;
    for (const Option& o : option_table())
        if (!o.dataset_key.empty())
            if (const std::optional<data::ConfigValue> v = o.dataset_value(c)) l[o.dataset_key] = *v;
    return l;
}

namespace {

// One dataset's training part and, with a validation split, its validation part (none when the
// split holds out no image: a warning).
void load_dataset(const RunConfig& c, const data::DatasetConfig& dc, uint64_t seed, RunData& d,
                  std::vector<data::BucketedDataset>& validation, const std::string& tag) {
    for (const data::SubsetConfig& s : dc.subsets) {
        GL_CHECK(!s.alpha_mask || !c.cache_latents, "subset ", s.label(),
                 ": alpha_mask with --cache_latents: the latent cache does not keep the masks; train without "
                 "--cache_latents (the masks are made with each batch)");
        GL_CHECK(!s.conditioning_data_dir || c.masked_loss, "subset ", s.label(),
                 ": conditioning_data_dir (mask images) needs --masked_loss (kohya's dataset schema takes the key only "
                 "with it)");
        if (s.face_crop_aug_range && c.cache_latents && !dc.enable_bucket)
            d.warnings.push_back(gl::cat(tag, "subset ", s.label(), ": face_crop_aug_range with "
                                         "--cache_latents: the latents are cached without the face crop (as kohya's "
                                         "cache: the plain resize and centre crop); train without --cache_latents "
                                         "for the crop around the face"));
    }
    const bool split = dc.validation_split > 0.0;
    data::BucketedDataset part;
    part.dataset = data::build_dataset(dc, data::BadImagePolicy::skip,
                                       {split ? data::DatasetPart::training : data::DatasetPart::whole, seed});
    part.buckets = data::assign_buckets(part.dataset);
    if (split) {
        data::BucketedDataset v;
        v.dataset = data::build_dataset(dc, data::BadImagePolicy::skip, {data::DatasetPart::validation, seed});
        if (!v.dataset.images.empty()) v.buckets = data::assign_buckets(v.dataset);
        for (const std::string& w : v.dataset.warnings) d.warnings.push_back("validation set: " + tag + w);
        for (const std::string& w : v.buckets.warnings) d.warnings.push_back("validation set: " + tag + w);
        v.dataset.warnings.clear();
        v.buckets.warnings.clear();
        if (v.buckets.buckets.empty())
            d.warnings.push_back(gl::cat(tag, "validation_split ", dc.validation_split,
                                         " holds out no image: no validation loss (kohya's rule: n - round(n * split) "
                                         "onwards of each subset)"));
        else
            validation.push_back(std::move(v));
    }
    d.parts.push_back(std::move(part));
}

// kohya's weighted captions stop the run at a "(text:number)" whose number Python's float()
// refuses: every caption (its prefix, each line, its suffix) is parsed before any model loads.
void check_weighted_captions(const data::Dataset& ds) {
    for (const data::ImageEntry& e : ds.images) {
        const data::CaptionOptions& o = ds.config.subsets[size_t(e.subset)].caption;
        size_t from = 0;
        for (;;) {
            const size_t end = std::min(e.caption.find('\n', from), e.caption.size());
            std::string line = e.caption.substr(from, end - from);
            if (!o.caption_prefix.empty()) line = o.caption_prefix + " " + line;
            if (!o.caption_suffix.empty()) line += " " + o.caption_suffix;
            try {
                sd::parse_prompt_attention(line);
            } catch (const gl::Error& err) {
                gl::fail("--weighted_captions: the caption of ", e.path.string(), ": ", err.what());
            }
            if (end == e.caption.size()) break;
            from = end + 1;
        }
    }
}

}  // namespace

RunData load_run_data(const RunConfig& c, uint64_t seed) {
    RunData d;
    std::vector<data::DatasetConfig> all;
    if (c.dataset_config) {
        try {
            all = data::load_dataset_config(*c.dataset_config, dataset_command_line(c));
        } catch (const gl::Error& e) {
            gl::fail("--dataset_config: ", e.what());
        }
        d.from_dataset_config = true;
    } else if (c.in_json) {
        std::optional<fs::path> dir;
        if (c.train_data_dir) dir = fs::path(*c.train_data_dir);
        all.push_back(data::metadata_dataset_config(*c.in_json, dir, dataset_command_line(c)));
    } else {
        std::optional<fs::path> reg;
        if (c.reg_data_dir) reg = fs::path(*c.reg_data_dir);
        all.push_back(data::folder_dataset_config(*c.train_data_dir, reg, dataset_command_line(c), d.warnings));
        GL_CHECK(!all[0].subsets.empty(), "--train_data_dir ", *c.train_data_dir,
                 ": no <repeats>_<name> folder (train_data_dir must be the parent of the image folders, as kohya's)");
    }
    std::vector<data::BucketedDataset> validation;
    for (size_t i = 0; i < all.size(); i++) {
        const std::string tag = all.size() > 1 ? gl::cat("dataset #", i + 1, ": ") : std::string();
        try {
            load_dataset(c, all[i], seed, d, validation, tag);
        } catch (const gl::Error& e) {
            if (tag.empty()) throw;
            gl::fail("--dataset_config ", *c.dataset_config, " [[datasets]] #", i + 1, ": ", e.what());
        }
    }
    if (c.masked_loss && std::none_of(d.parts.begin(), d.parts.end(), [](const data::BucketedDataset& p) {
            return std::any_of(p.dataset.config.subsets.begin(), p.dataset.config.subsets.end(),
                               [](const auto& s) { return s.alpha_mask || s.conditioning_data_dir; });
        }))
        d.warnings.push_back("--masked_loss: no subset has masks (alpha_mask, or mask images in a "
                             "conditioning_data_dir), so nothing is masked");
    data::MergedDatasets merged = data::merge_datasets(d.parts);
    d.dataset = std::move(merged.dataset);
    d.buckets = std::move(merged.buckets);
    if (!validation.empty()) {
        data::MergedDatasets v = data::merge_datasets(std::move(validation));
        d.validation = ValidationData{std::move(v.dataset), std::move(v.buckets)};
    }
    if (c.weighted_captions) {
        check_weighted_captions(d.dataset);
        if (d.validation) check_weighted_captions(d.validation->dataset);
    }
    GL_CHECK(!d.buckets.buckets.empty(), "no image fits a bucket (", d.buckets.skipped.size(), " skipped):\n",
             data::describe_skipped(d.buckets.skipped));
    for (const std::string& w : d.dataset.warnings) d.warnings.push_back(w);
    for (const std::string& w : d.buckets.warnings) d.warnings.push_back(w);
    return d;
}

namespace {

// Per subset its images as kohya counts them (the folder's, before the balancing).
std::string subset_lines(const data::Dataset& ds, const std::string& indent) {
    std::map<int, int64_t> per_subset;
    for (const data::ImageEntry& e : ds.images) per_subset[e.subset]++;
    for (const data::ImageEntry& e : ds.unused_reg) per_subset[e.subset]++;
    std::string s;
    for (const auto& [i, n] : per_subset) {
        const data::SubsetConfig& sc = ds.config.subsets[size_t(i)];
        const std::string name = sc.metadata_file ? sc.metadata_file->filename().string() + " (metadata)"
                                                  : sc.image_dir.filename().string();
        s += gl::cat(indent, sc.is_reg ? "reg   " : "train ", name, ": ", n, " images x ",
                     sc.num_repeats, " repeats = ", n * sc.num_repeats, "\n");
    }
    return s;
}

}  // namespace

std::string dataset_summary(const RunData& d) {
    const data::Dataset& ds = d.dataset;
    // The regularisation images an epoch holds after the balancing.
    int64_t reg_per_epoch = 0;
    for (const data::ImageEntry& e : ds.images)
        if (e.is_reg) reg_per_epoch += e.num_repeats;
    const bool metadata = !ds.config.subsets.empty() && ds.config.subsets.front().metadata_file.has_value();
    std::string s = gl::cat("dataset (", d.from_dataset_config ? "dataset config" : metadata ? "--in_json" : "folders",
                            "):\n");
    if (d.parts.size() > 1) {
        for (size_t i = 0; i < d.parts.size(); i++) {
            const data::DatasetConfig& dc = d.parts[i].dataset.config;
            s += gl::cat("  dataset #", i + 1, ": resolution ", dc.width, "x", dc.height, ", batch size ",
                         dc.batch_size, ", ", d.parts[i].dataset.num_train_images, " train images with repeats\n");
            s += subset_lines(d.parts[i].dataset, "    ");
        }
    } else {
        s += subset_lines(ds, "  ");
    }
    std::string reg;
    if (ds.num_reg_images > 0) {
        reg = gl::cat(" + ", ds.num_reg_images, " regularisation");
        if (reg_per_epoch > ds.num_reg_images)
            reg += gl::cat(" (repeated to ", reg_per_epoch, " per epoch to match the training images)");
        else if (reg_per_epoch < ds.num_reg_images)
            reg += gl::cat(" (", reg_per_epoch, " of them per epoch to match the training images)");
    }
    s += gl::cat("  images with repeats: ", ds.num_train_images, " train", reg, "\n");
    if (d.validation)
        s += gl::cat("  validation: ", d.validation->dataset.num_train_images, " images held out (validation_split ",
                     ds.config.validation_split, ") in ", d.validation->buckets.buckets.size(),
                     d.validation->buckets.buckets.size() == 1 ? " bucket\n" : " buckets\n");
    const std::vector<data::SkippedImage> skipped = skipped_before_training(d);
    if (!skipped.empty()) {
        const std::string where = gl::cat(" (the first ", kSkippedInPlan, " here; all of them in the report, ",
                                          "skipped_images.txt and the end of the run)");
        s += gl::cat("  skipped: ", skipped.size(), skipped.size() == 1 ? " image" : " images",
                     skipped.size() > kSkippedInPlan ? where : std::string(), "\n");
        for (const std::string& f : ds.failed_formats) s += "    " + f + "\n";
        s += data::describe_skipped(skipped, kSkippedInPlan, "    ");
    }
    if (d.parts.size() <= 1) return s + data::bucket_table(d.buckets);
    for (size_t i = 0; i < d.parts.size(); i++) s += gl::cat("dataset #", i + 1, " ", data::bucket_table(d.parts[i].buckets));
    return s;
}

std::vector<data::SkippedImage> skipped_before_training(const RunData& d) {
    std::vector<data::SkippedImage> all = d.dataset.skipped;
    data::add_skipped(all, d.buckets.skipped);
    if (d.validation) {
        data::add_skipped(all, d.validation->dataset.skipped);
        data::add_skipped(all, d.validation->buckets.skipped);
    }
    return all;
}

StepCounts count_steps(const RunConfig& c, const RunData& d, int64_t micro_batch, int accum, int world) {
    GL_CHECK(micro_batch >= 1 && accum >= 1 && world >= 1, "steps: micro-batch, accumulation and ranks must be >= 1");
    StepCounts k;
    k.micro_batch = micro_batch;
    k.accum = accum;
    k.world = world;
    std::string terms, values;
    for (const data::Bucket& b : d.buckets.buckets) {
        const int64_t n = int64_t(b.images.size()), batch = b.batch(micro_batch) * world,
                      batches = (n + batch - 1) / batch;
        k.batches_per_epoch += batches;
        terms += gl::cat(terms.empty() ? "" : " + ", "ceil(", n, "/", batch, ")");
        values += gl::cat(values.empty() ? "" : " + ", batches);
    }
    k.updates_per_epoch = (k.batches_per_epoch + accum - 1) / accum;
    std::string& a = k.arithmetic;
    a = gl::cat("  batches per epoch  = ", terms, d.buckets.buckets.size() > 1 ? " = " + values : std::string(), " = ",
                k.batches_per_epoch, "   (per bucket: images with repeats / batch ",
                d.parts.size() > 1 ? gl::cat("of its dataset, at most ", micro_batch) : gl::cat(micro_batch),
                world > 1 ? gl::cat(" x ", world, " ranks: global batches, each rank a slice") : std::string(), ")\n");
    a += gl::cat("  updates per epoch  = ceil(", k.batches_per_epoch, " / ", accum, " accumulation steps) = ",
                 k.updates_per_epoch, "\n");
    if (c.max_train_epochs) {
        k.epochs = *c.max_train_epochs;
        k.max_train_steps = k.epochs * k.updates_per_epoch;
        a += gl::cat("  total steps        = ", k.epochs, " epochs (--max_train_epochs) x ", k.updates_per_epoch, " = ",
                     k.max_train_steps, "\n");
    } else {
        k.max_train_steps = c.max_train_steps;
        k.epochs = (k.max_train_steps + k.updates_per_epoch - 1) / k.updates_per_epoch;
        a += gl::cat("  epochs             = ceil(", k.max_train_steps, " steps (--max_train_steps) / ",
                     k.updates_per_epoch, ") = ", k.epochs, "\n");
    }
    if (world > 1)
        a += gl::cat("  effective batch    = ", micro_batch, " per rank x ", world, " ranks x ", accum,
                     " accumulation = ", micro_batch * world * accum, " images per update\n");
    else
        a += gl::cat("  images per update  = ", micro_batch, " x ", accum, " = ", micro_batch * accum, "\n");
    return k;
}

std::vector<GraphShape> graph_shapes(const RunData& d, int64_t micro_batch, int64_t downscale, int unet_multiple,
                                     int world) {
    std::vector<GraphShape> out;
    auto put = [&](const GraphShape& g) {
        if (g.batch > 0 && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
    };
    auto add = [&](const data::BucketAssignment& buckets, int ranks) {
        for (const data::Bucket& b : buckets.buckets) {
            const int64_t m = downscale * unet_multiple;
            GL_CHECK(b.reso.w % m == 0 && b.reso.h % m == 0, "bucket ", b.reso.w, "x", b.reso.h,
                     ": the UNet takes sides that are multiples of ", m,
                     " pixels (use --bucket_reso_steps 64 and a resolution that is a multiple of 64)");
            const int64_t n = int64_t(b.images.size()), batch = b.batch(micro_batch), global = batch * ranks;
            const int64_t h = b.reso.h / downscale, w = b.reso.w / downscale;
            if (n >= global) put({h, w, batch});
            if (const int64_t rest = n % global)  // the short last global batch: every rank's slice
                for (int r = 0; r < ranks; r++) put({h, w, gl::dist::shard_of(rest, ranks, r).count});
        }
    };
    add(d.buckets, world);
    if (d.validation) add(d.validation->buckets, 1);
    return out;
}

std::vector<BucketShare> bucket_shares(const RunData& d, int64_t downscale) {
    std::vector<BucketShare> out;
    for (const data::Bucket& b : d.buckets.buckets)
        out.push_back({b.reso.h / downscale, b.reso.w / downscale, double(b.images.size())});
    return out;
}

}  // namespace train
