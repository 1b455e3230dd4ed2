// zero/config/config_parse.h — the per-block parsers behind parse_zero_config (internal).
//
// Each parser reads one DeepSpeed block through an ObjectReader of its parent, fills its struct, records every
// problem it finds in the ParseLog (and keeps going with the default), and reports the keys it does not know.
// Non-goals: cross-block rules other than the batch-size rule and the offload/stage rule (parse_zero_config
// checks those).
#pragma once

#include <string_view>

#include "zero/config/config.h"
#include "zero/config/json_reader.h"

namespace zw::zero::internal {

// Blocks of the root object, each read from `root` (absent: the defaults stay).
void parse_fp16(ObjectReader& root, Fp16Config* out);
void parse_bf16(ObjectReader& root, Bf16Config* out);  // "bf16" or its other spelling "bfloat16"
void parse_optimizer(ObjectReader& root, OptimizerConfig* out);
void parse_scheduler(ObjectReader& root, SchedulerConfig* out);
void parse_zero_optimization(ObjectReader& root, ZeroConfig* config);
// The top-level keys zerowire accepts with a note or refuses (monitors, profilers, policy switches, ...).
void parse_top_level_policy(ObjectReader& root, ZeroConfig* config);
// The zero_optimization keys zerowire accepts with a note or refuses (ZeRO++, MiCS, legacy spellings, ...).
void parse_zero_policy(ObjectReader& zero, ZeroOptimizationConfig* z);

// Reads the three batch keys of the root object ("auto" filled from the trainer's values where the file's own
// keys do not decide them) and applies DeepSpeed's inference rule.
void parse_batch(ObjectReader& root, int world_size, std::string_view world_size_source, BatchConfig* out);

}  // namespace zw::zero::internal
