// zero/config/config_batch.cc — DeepSpeed's batch-size rule:
//   train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × world_size.
// Any two of the three keys infer the third; train_batch_size alone sets gradient_accumulation_steps = 1;
// the micro batch alone sets gradient_accumulation_steps = 1. A mismatch, or an inference that does not
// divide evenly (DeepSpeed would floor it and then fail its own check), is an error naming all four numbers
// and where world_size came from.
#include <string>
#include <utility>

#include "zero/config/config_parse.h"

namespace zw::zero::internal {
namespace {

constexpr const char* kTrain = "train_batch_size";
constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
constexpr const char* kAccum = "gradient_accumulation_steps";

std::string number_or_unset(int64_t value) { return value > 0 ? std::to_string(value) : "(not set)"; }

Status mismatch(const BatchConfig& b, const std::string& what) {
  std::string world = "world_size " + std::to_string(b.world_size) + " (" + b.world_size_source + ")";
  return Status(Code::kInvalidArgument,
                std::string("batch sizes do not fit DeepSpeed's rule ") + kTrain + " = " + kMicro + " × " + kAccum +
                    " × world_size: " + kTrain + " " + number_or_unset(b.train_batch_size) + ", " + kMicro + " " +
                    number_or_unset(b.micro_batch_per_gpu) + ", " + kAccum + " " +
                    number_or_unset(b.gradient_accumulation_steps) + ", " + world + "; " + what);
}

// `*out` = numerator / denominator, or an error when it does not divide evenly.
Status infer(const BatchConfig& b, const char* name, int64_t numerator, int64_t denominator, int64_t* out) {
  if (numerator % denominator != 0)
    return mismatch(b, std::string("cannot infer ") + name + ": " + std::to_string(numerator) +
                           " is not divisible by " + std::to_string(denominator) +
                           "; set the batch sizes so that they divide evenly");
  *out = numerator / denominator;
  return Status();
}

}  // namespace

Status read_batch(ObjectReader& root, int world_size, std::string_view world_size_source, BatchConfig* out) {
  if (world_size <= 0)
    return Status(Code::kInvalidArgument, "world_size must be positive, got " + std::to_string(world_size) + " (" +
                                              std::string(world_size_source) + ")");
  BatchConfig& b = *out;
  b.world_size = world_size;
  b.world_size_source = std::string(world_size_source);
  ZW_TRY(root.read_int(kTrain, "a count of samples", 1, &b.train_batch_size));
  ZW_TRY(root.read_int(kMicro, "a count of samples", 1, &b.micro_batch_per_gpu));
  ZW_TRY(root.read_int(kAccum, "a count of micro batches", 1, &b.gradient_accumulation_steps));
  // Bounded so that the products in apply_batch_rule cannot overflow int64 (world_size is an int).
  constexpr int64_t kMax = int64_t{1} << 31;
  for (auto [name, value] : {std::pair{kTrain, b.train_batch_size}, std::pair{kMicro, b.micro_batch_per_gpu},
                             std::pair{kAccum, b.gradient_accumulation_steps}}) {
    if (value > kMax)
      return Status(Code::kInvalidArgument, std::string(name) + " = " + std::to_string(value) + " is above 2^31");
  }
  return Status();
}

Status apply_batch_rule(BatchConfig* out) {
  BatchConfig& b = *out;
  const int64_t world = b.world_size;
  const bool train = b.train_batch_size > 0, micro = b.micro_batch_per_gpu > 0;
  const bool accum = b.gradient_accumulation_steps > 0;
  if (train && micro && accum) {
    if (b.train_batch_size != b.micro_batch_per_gpu * b.gradient_accumulation_steps * world)
      return mismatch(b, std::to_string(b.micro_batch_per_gpu) + " × " + std::to_string(b.gradient_accumulation_steps) +
                             " × " + std::to_string(world) + " = " +
                             std::to_string(b.micro_batch_per_gpu * b.gradient_accumulation_steps * world) +
                             "; fix one of them or leave one out to have it inferred");
  } else if (train && micro) {
    b.inferred.insert(kAccum);
    ZW_TRY(infer(b, kAccum, b.train_batch_size, b.micro_batch_per_gpu * world, &b.gradient_accumulation_steps));
  } else if (train && accum) {
    b.inferred.insert(kMicro);
    ZW_TRY(infer(b, kMicro, b.train_batch_size, b.gradient_accumulation_steps * world, &b.micro_batch_per_gpu));
  } else if (micro && accum) {
    b.inferred.insert(kTrain);
    b.train_batch_size = b.micro_batch_per_gpu * b.gradient_accumulation_steps * world;
  } else if (train) {
    b.inferred.insert(kAccum);
    b.inferred.insert(kMicro);
    b.gradient_accumulation_steps = 1;
    ZW_TRY(infer(b, kMicro, b.train_batch_size, world, &b.micro_batch_per_gpu));
  } else if (micro) {
    b.inferred.insert(kAccum);
    b.inferred.insert(kTrain);
    b.gradient_accumulation_steps = 1;
    b.train_batch_size = b.micro_batch_per_gpu * world;
  } else {
    return mismatch(b, std::string("set ") + kTrain + " or " + kMicro + " (DeepSpeed requires one of them)");
  }
  return Status();
}

}  // namespace zw::zero::internal
