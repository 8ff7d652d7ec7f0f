// Several [[datasets]] in one run, as kohya's DatasetGroup trains them (library/train_util.py, a
// torch ConcatDataset): each dataset keeps its resolution, buckets and batch size; an epoch holds
// every dataset's batches, shuffled together; steps per epoch add up over the datasets. Here the
// datasets are merged into one Dataset (subsets and images in dataset order) and one bucket
// assignment whose buckets are never shared between datasets (two datasets at 512x512 give two
// buckets), each bucket carrying its dataset's batch size for the epoch planner.
#pragma once
#include <vector>

#include "data/bucket.h"
#include "data/dataset.h"

namespace data {

struct BucketedDataset {
    Dataset dataset;
    BucketAssignment buckets;
};

struct MergedDatasets {
    Dataset dataset;  // config: the first dataset's settings, batch_size the largest, every subset
    BucketAssignment buckets;
};

// One part: returned as it is (its buckets carry no batch size: the loader's applies). Several:
// merged, warnings prefixed by "dataset #i: ". Throws gl::Error for no parts.
MergedDatasets merge_datasets(std::vector<BucketedDataset> parts);

}  // namespace data
