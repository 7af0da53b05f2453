// make_bucket_reducer: the BucketReducer of comm.compression (strategies/allreduce/
// bucket_reducer.h says what each method does), wrapped so that the steps before
// compression_start_step run uncompressed.
#pragma once

#include <memory>

#include "allreduce/communicator.h"
#include "strategies/allreduce/bucket_reducer.h"

namespace gradsync {

// The reducer of options.method; throws ConfigError (key comm.compression) for an unknown one.
std::unique_ptr<BucketReducer> make_bucket_reducer(std::shared_ptr<Communicator> comm,
                                                   const CompressionOptions& options);

}  // namespace gradsync
