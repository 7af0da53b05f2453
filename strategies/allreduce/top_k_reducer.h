// comm.compression: topk, the BucketReducer (strategies/allreduce/bucket_reducer.h).
#pragma once

#include <memory>

#include "allreduce/communicator.h"
#include "strategies/allreduce/bucket_reducer.h"

namespace gradsync {

std::unique_ptr<BucketReducer> make_top_k_reducer(std::shared_ptr<Communicator> comm,
                                                  const CompressionOptions& options);

}  // namespace gradsync
