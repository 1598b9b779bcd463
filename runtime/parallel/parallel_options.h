// ParallelOptions: how the ranks split the model and the batch, but for the pipeline
// (runtime/pipeline/pipeline_options.h): data-parallel replicas, tensor-parallel ranks, the ZeRO
// stage and the gradient communication (the "layout" and ZeRO flags of --help), and comm/'s
// settings (comm_options: not flags).
#pragma once
#include <cstdint>
#include <string>

#include "comm/comm_options.h"
#include "runtime/common/option_check.h"
#include "runtime/optim/mixed_precision.h"

namespace st::runtime {

struct ParallelOptions {
  int64_t dp = 0;  // 0: world / (tp · cp · pp)
  int64_t tp = 1;
  // Context parallelism (issue 34): each sequence cut into 2·cp chunks, a cp rank holding two (one
  // from each end: runtime/parallel/context_shard.h), attention run as a ring over the cp group
  // (runtime/parallel/ring_attention.h); the weights replicated over cp, the gradients summed over
  // dp × cp. T must divide by 2·cp (TrainConfig::validate).
  int64_t cp = 1;
  // Megatron's sequence parallelism under tp (models/decoder/decoder_layers.h): the norm and
  // residual regions hold T/tp of the sequence; all-gather / reduce-scatter along T replace the
  // all-reduces. At tp > 1 needs T divisible by tp and no dropout (TrainConfig::validate); no
  // effect at tp 1 (a note at start: launch/layout_check.cpp)
  int64_t sequence_parallel = 0;  // 0 | 1
  std::string comm = "auto";  // auto | nccl | mpi
  int64_t zero = 0;  // ZeRO stage: 0 off, 1 optimizer state sharded, 2 also the gradients, 3 also the parameters (runtime/parallel/zero3.h)
  Precision grad_comm_dtype = Precision::fp32;  // dtype of the DP / ZeRO gradient all-reduce
  double bucket_mb = 25.0;                      // DP / ZeRO bucket size
  // comm/'s settings (debug mode, p2p mode, max count, CUDA-aware MPI): not flags — launch/ fills
  // them from the environment (launch/comm_env.h), tests set them. The run hands them to
  // make_communicator with ObserveOptions::flight_recorder_dump added.
  comm::CommOptions comm_options;

  void validate(const OptionFail& fail) const {
    require_non_negative(fail, "dp", static_cast<double>(dp));
    require_positive(fail, "tp", static_cast<double>(tp));
    require_positive(fail, "cp", static_cast<double>(cp));
    if (sequence_parallel != 0 && sequence_parallel != 1)
      fail("sequence-parallel", "must be 0 or 1, got " + std::to_string(sequence_parallel));
    if (bucket_mb <= 0) fail("bucket-mb", "must be positive, got " + option_str(bucket_mb));
    if (zero < 0 || zero > 3) fail("zero", "must be 0, 1, 2 or 3 (the ZeRO stage), got " + std::to_string(zero));
    if (grad_comm_dtype == Precision::fp8) fail("grad-comm-dtype", "must be fp32, fp16 or bf16 (fp8 is a compute precision), got fp8");
  }
};

}  // namespace st::runtime
