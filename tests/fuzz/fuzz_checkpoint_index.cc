// tests/fuzz/fuzz_checkpoint_index.cc — the ZeRO-3 checkpoint's gate (src/zero/checkpoint: parse_index, the text
// half of read_index, with layout_from_json and validate_layout under it) and the reshard planner that a load runs
// on the layout it returns (plan_reshard), on whatever a checkpoint directory's DONE and index.json hold.
//
// An input without a NUL byte is index.json, and the harness writes the DONE marker a save would write for it (its
// size and XXH64), so that the fuzzer gets past the hash gate; an input with a NUL is "DONE text\0index text", which
// fuzzes the marker too. Checked: failures are kInvalidArgument naming a file; an accepted index has one file per
// rank in rank order and a valid layout, prints (index_to_json) to a text that parses back to the same index, and
// plans a same-size reload for its first ranks with every copy inside both shards.
// Non-goals: reading the files (fuzz_safetensors covers the shard reader), hashing them.
#include <cstring>

#include "fuzz_check.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/checkpoint_index.h"
#include "zero/checkpoint/checkpoint_io.h"

using namespace zw;
using namespace zw::zero;

namespace {

std::string done_for(std::string_view index_text) {
  return "{\"index_bytes\":" + std::to_string(index_text.size()) + ",\"index_xxh64\":\"" +
         hex64(Xxh64::of(index_text.data(), index_text.size())) + "\"}";
}

void check_plan(const CheckpointIndex& index) {
  for (int rank = 0; rank < std::min(index.world_size, 3); ++rank) {
    auto plan = plan_reshard(index.layout, index.world_size, index.layout, index.world_size, rank);
    FUZZ_CHECK(plan.ok(), plan.status().to_string());
    FUZZ_CHECK(plan->size() == index.layout.units.size(), "one plan per unit");
    for (size_t u = 0; u < plan->size(); ++u) {
      const int64_t shard = shard_numel(index.layout.units[u], index.world_size);
      for (const CopySegment& s : (*plan)[u]) {
        FUZZ_CHECK(s.old_rank >= 0 && s.old_rank < index.world_size, std::to_string(s.old_rank));
        FUZZ_CHECK(s.count > 0 && s.src >= 0 && s.dst >= 0 && s.src <= shard - s.count && s.dst <= shard - s.count,
                   "copy outside the shard");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = fuzz::as_text(data, size);
  const size_t nul = in.find('\0');
  const std::string done = nul == std::string_view::npos ? done_for(in) : std::string(in.substr(0, nul));
  const std::string_view text = nul == std::string_view::npos ? in : in.substr(nul + 1);
  Result<CheckpointIndex> index = parse_index(done, text, "ckpt/DONE", "ckpt/index.json");
  if (!index.ok()) {
    FUZZ_CHECK(index.status().code() == Code::kInvalidArgument, index.status().to_string());
    FUZZ_CHECK(index.status().message().find("ckpt/") != std::string::npos, index.status().to_string());
    return 0;
  }
  FUZZ_CHECK(index->world_size >= 1 && index->files.size() == static_cast<size_t>(index->world_size), "files");
  FUZZ_CHECK(validate_layout(index->layout, index->world_size, "fuzz").ok(), "accepted an invalid layout");
  const std::string printed = index_to_json(*index);
  Result<CheckpointIndex> again = parse_index(done_for(printed), printed, "ckpt/DONE", "ckpt/index.json");
  FUZZ_CHECK(again.ok(), again.status().to_string() + "\n" + printed);
  FUZZ_CHECK(again->world_size == index->world_size && again->step == index->step &&
                 again->loss_scaler == index->loss_scaler && again->files.size() == index->files.size() &&
                 again->layout.units.size() == index->layout.units.size() &&
                 again->layout.total_numel == index->layout.total_numel,
             printed);
  check_plan(*index);
  return 0;
}
