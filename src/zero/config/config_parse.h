// zero/config/config_parse.h — the per-block parsers behind parse_zero_config (internal).
//
// Each parser reads one DeepSpeed block through an ObjectReader, fills its struct and rejects keys it does not
// know. Non-goals: cross-block rules other than the batch-size rule (parse_zero_config checks those).
#pragma once

#include <string_view>

#include "zero/config/config.h"
#include "zero/config/json_reader.h"

namespace zw::zero::internal {

Status parse_fp16(const Json& block, std::set<std::string>* explicit_keys, Fp16Config* out);
Status parse_bf16(const Json& block, std::string_view name, std::set<std::string>* explicit_keys, Bf16Config* out);
Status parse_optimizer(const Json& block, std::set<std::string>* explicit_keys, OptimizerConfig* out);
Status parse_scheduler(const Json& block, std::set<std::string>* explicit_keys, SchedulerConfig* out);

// Reads the three batch keys of the root object (0 = absent) and records world_size and its source.
Status read_batch(ObjectReader& root, int world_size, std::string_view world_size_source, BatchConfig* out);
// Applies DeepSpeed's inference rule to what read_batch read (after unknown keys have been reported).
Status apply_batch_rule(BatchConfig* batch);

}  // namespace zw::zero::internal
