#include "data/workers.h"

#include <thread>

namespace data {

int default_worker_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace data
