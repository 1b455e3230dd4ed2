// zero/config/config_batch.cc — DeepSpeed's batch-size rule:
//   train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × world_size.
// Any two of the three keys infer the third; train_batch_size alone sets gradient_accumulation_steps = 1;
// the micro batch alone sets gradient_accumulation_steps = 1. A mismatch, or an inference that does not
// divide evenly (DeepSpeed would floor it and then fail its own check), is a problem naming all four numbers
// and where world_size came from.
// "auto" (the Hugging Face integration fills all three from its arguments): numbers the file gives win; an
// "auto" the file's own numbers decide is inferred from them; otherwise gradient_accumulation_steps takes the
// trainer's accumulation, train_batch_size the trainer's global batch, and the micro batch follows from them.
#include <string>
#include <utility>

#include "zero/config/config_parse.h"

namespace zw::zero::internal {
namespace {

constexpr const char* kTrain = "train_batch_size";
constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
constexpr const char* kAccum = "gradient_accumulation_steps";

std::string number_or_unset(int64_t value) { return value > 0 ? std::to_string(value) : "(not set)"; }

std::string mismatch(const BatchConfig& b, const std::string& what) {
  const std::string world = "world_size " + std::to_string(b.world_size) + " (" + b.world_size_source + ")";
  return std::string("batch sizes do not fit DeepSpeed's rule ") + kTrain + " = " + kMicro + " × " + kAccum +
         " × world_size: " + kTrain + " " + number_or_unset(b.train_batch_size) + ", " + kMicro + " " +
         number_or_unset(b.micro_batch_per_gpu) + ", " + kAccum + " " + number_or_unset(b.gradient_accumulation_steps) +
         ", " + world + (b.filled.empty() ? "" : "; \"auto\" filled " + b.filled) + "; " + what;
}

// `*out` = numerator / denominator, or a problem when it does not divide evenly.
bool infer(ParseLog& log, const BatchConfig& b, const char* name, int64_t numerator, int64_t denominator,
           int64_t* out) {
  if (numerator % denominator != 0) {
    log.problem(
        name, Code::kInvalidArgument,
        mismatch(b, std::string("cannot infer ") + name + ": " + std::to_string(numerator) + " is not divisible by " +
                        std::to_string(denominator) + "; set the batch sizes so that they divide evenly"));
    return false;
  }
  *out = numerator / denominator;
  return true;
}

// DeepSpeed's inference over the keys that are set (> 0); the inferred names go to b.inferred.
void apply_rule(ParseLog& log, BatchConfig& b) {
  const int64_t world = b.world_size;
  const bool train = b.train_batch_size > 0, micro = b.micro_batch_per_gpu > 0;
  const bool accum = b.gradient_accumulation_steps > 0;
  if (train && micro && accum) {
    const int64_t product = b.micro_batch_per_gpu * b.gradient_accumulation_steps * world;
    if (b.train_batch_size != product)
      log.problem(
          kTrain, Code::kInvalidArgument,
          mismatch(b, std::to_string(b.micro_batch_per_gpu) + " × " + std::to_string(b.gradient_accumulation_steps) +
                          " × " + std::to_string(world) + " = " + std::to_string(product) +
                          "; fix one of them or leave one out to have it inferred"));
  } else if (train && micro) {
    b.inferred.insert(kAccum);
    infer(log, b, kAccum, b.train_batch_size, b.micro_batch_per_gpu * world, &b.gradient_accumulation_steps);
  } else if (train && accum) {
    b.inferred.insert(kMicro);
    infer(log, b, kMicro, b.train_batch_size, b.gradient_accumulation_steps * world, &b.micro_batch_per_gpu);
  } else if (micro && accum) {
    b.inferred.insert(kTrain);
    b.train_batch_size = b.micro_batch_per_gpu * b.gradient_accumulation_steps * world;
  } else if (train) {
    b.inferred.insert(kAccum);
    b.inferred.insert(kMicro);
    b.gradient_accumulation_steps = 1;
    infer(log, b, kMicro, b.train_batch_size, world, &b.micro_batch_per_gpu);
  } else if (micro) {
    b.inferred.insert(kAccum);
    b.inferred.insert(kTrain);
    b.gradient_accumulation_steps = 1;
    b.train_batch_size = b.micro_batch_per_gpu * world;
  } else {
    log.problem(kTrain, Code::kInvalidArgument,
                mismatch(b, std::string("set ") + kTrain + " or " + kMicro + " (DeepSpeed requires one of them)"));
  }
}

// The trainer's value for the "auto" batch key `name`, or 0 (recorded as a problem) when it gives none.
int64_t trainer_value(ParseLog& log, const char* name, std::string* source) {
  const AutoSource* fill = log.fill(name);
  const Json v = fill ? Json::parse(fill->json, nullptr, false) : Json();
  if (!v.is_number_integer() || v.get<int64_t>() < 1) {
    log.problem(name, Code::kInvalidArgument,
                std::string(name) +
                    " is \"auto\", which the trainer fills from its own arguments (as the Hugging "
                    "Face integration does), but this caller gives no value for it; write the value");
    return 0;
  }
  *source = fill->source;
  return v.get<int64_t>();
}

void note_filled(BatchConfig& b, const char* name, int64_t value, const std::string& source) {
  b.filled += (b.filled.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(value) + " from " + source;
}

// Fills the "auto" keys the file's numbers do not decide; `sources` gets what filled each. False when one of
// them could not be filled (recorded as a problem).
bool fill_autos(ParseLog& log, BatchConfig& b, bool auto_train, bool auto_micro, bool auto_accum,
                std::string sources[3]) {
  const int64_t world = b.world_size;
  if (auto_accum && !(b.train_batch_size > 0 && b.micro_batch_per_gpu > 0)) {
    b.gradient_accumulation_steps = trainer_value(log, kAccum, &sources[2]);
    if (b.gradient_accumulation_steps == 0) return false;
    note_filled(b, kAccum, b.gradient_accumulation_steps, sources[2]);
  }
  if (auto_train && b.micro_batch_per_gpu == 0) {
    b.train_batch_size = trainer_value(log, kTrain, &sources[0]);
    if (b.train_batch_size == 0) return false;
    note_filled(b, kTrain, b.train_batch_size, sources[0]);
  }
  if (auto_micro && b.train_batch_size == 0) {
    // No global batch in the file: the trainer's, shared by the accumulation steps and the ranks.
    std::string from;
    const int64_t global = trainer_value(log, kTrain, &from);
    if (global == 0) return false;
    const int64_t accum = b.gradient_accumulation_steps > 0 ? b.gradient_accumulation_steps : 1;
    note_filled(b, "the global batch", global, from);
    if (!infer(log, b, kMicro, global, accum * world, &b.micro_batch_per_gpu)) return false;
    sources[1] = from + " / (" + std::to_string(accum) + " accumulation × " + std::to_string(world) + " ranks)";
  }
  return true;
}

}  // namespace

void parse_batch(ObjectReader& root, int world_size, std::string_view world_size_source, BatchConfig* out) {
  ParseLog& log = root.log();
  BatchConfig& b = *out;
  if (world_size <= 0) {
    log.problem(
        "", Code::kInvalidArgument,
        "world_size must be positive, got " + std::to_string(world_size) + " (" + std::string(world_size_source) + ")");
    return;
  }
  b.world_size = world_size;
  b.world_size_source = std::string(world_size_source);
  const char* names[3] = {kTrain, kMicro, kAccum};
  int64_t* values[3] = {&b.train_batch_size, &b.micro_batch_per_gpu, &b.gradient_accumulation_steps};
  const char* units[3] = {"a count of samples", "a count of samples", "a count of micro batches"};
  bool is_auto[3] = {false, false, false};
  bool ok = true;
  constexpr int64_t kMax = int64_t{1} << 31;  // bounded so that the rule's products cannot overflow int64
  for (int i = 0; i < 3; ++i) {
    const Json* raw = root.read_raw(names[i]);
    is_auto[i] = raw && raw->is_string() && *raw == "auto";
    if (is_auto[i]) {
      log.explicit_keys.erase(names[i]);
      continue;
    }
    if (raw && !root.read_int(names[i], units[i], 1, values[i])) ok = false;
    if (*values[i] > kMax) {
      log.problem(names[i], Code::kInvalidArgument,
                  std::string(names[i]) + " = " + std::to_string(*values[i]) + " is above 2^31");
      ok = false;
    }
  }
  if (!ok) return;
  std::string sources[3];
  if (!fill_autos(log, b, is_auto[0], is_auto[1], is_auto[2], sources)) return;
  apply_rule(log, b);
  for (int i = 0; i < 3; ++i) {
    if (!is_auto[i]) continue;
    const std::string source =
        !sources[i].empty() ? sources[i] : "inferred: " + std::string(kTrain) + " = micro × accumulation × world size";
    log.resolved(names[i], std::to_string(*values[i]), source);
  }
}

}  // namespace zw::zero::internal
