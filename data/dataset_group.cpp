#include "data/dataset_group.h"

#include <algorithm>

#include "ggml-lite/core/error.h"

namespace data {

MergedDatasets merge_datasets(std::vector<BucketedDataset> parts) {
    GL_CHECK(!parts.empty(), "no dataset to train");
    MergedDatasets m;
    if (parts.size() == 1) {
        m.dataset = std::move(parts[0].dataset);
        m.buckets = std::move(parts[0].buckets);
        return m;
    }
    Dataset& ds = m.dataset;
    BucketAssignment& a = m.buckets;
    ds.config = parts[0].dataset.config;
    ds.config.subsets.clear();
    double error_sum = 0, distinct = 0;
    for (size_t p = 0; p < parts.size(); p++) {
        const Dataset& d = parts[p].dataset;
        const BucketAssignment& b = parts[p].buckets;
        const int subset0 = int(ds.config.subsets.size()), image0 = int(ds.images.size());
        const std::string tag = gl::cat("dataset #", p + 1, ": ");
        ds.config.batch_size = std::max(ds.config.batch_size, d.config.batch_size);
        ds.config.validation_split = std::max(ds.config.validation_split, d.config.validation_split);
        ds.config.subsets.insert(ds.config.subsets.end(), d.config.subsets.begin(), d.config.subsets.end());
        for (ImageEntry e : d.images) {
            e.subset += subset0;
            ds.images.push_back(std::move(e));
        }
        for (ImageEntry e : d.unused_reg) {
            e.subset += subset0;
            ds.unused_reg.push_back(std::move(e));
        }
        for (const std::string& w : d.warnings) ds.warnings.push_back(tag + w);
        for (const std::string& w : b.warnings) a.warnings.push_back(tag + w);
        ds.skipped.insert(ds.skipped.end(), d.skipped.begin(), d.skipped.end());
        for (const std::string& f : d.failed_formats) ds.failed_formats.push_back(tag + f);
        ds.num_train_images += d.num_train_images;
        ds.num_reg_images += d.num_reg_images;
        for (Bucket k : b.buckets) {
            for (int& i : k.images) i += image0;
            k.dataset = int(p);
            k.batch_size = d.config.batch_size;
            error_sum += b.mean_ar_error * k.distinct;
            distinct += k.distinct;
            a.buckets.push_back(std::move(k));
        }
        a.choice.insert(a.choice.end(), b.choice.begin(), b.choice.end());
        add_skipped(a.skipped, b.skipped);
    }
    a.mean_ar_error = distinct > 0 ? error_sum / distinct : 0;
    return m;
}

}  // namespace data
