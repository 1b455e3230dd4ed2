// zero/checkpoint/checkpoint_index.h — internal: the checkpoint's index.json and DONE marker, and the layout as JSON.
//
// read_index is the one gate every reader passes: it refuses a directory without DONE (naming any *.tmp files a
// killed save left behind), checks DONE's size and hash of index.json, parses the index and validates its
// layout. Non-goals: index versions other than 1.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/param_layout.h"
#include "zerowire/communicator.h"
#include "zerowire/status.h"

namespace zw::zero {

inline constexpr const char* kCheckpointFormat = "zerowire.zero3";
inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kTensorKinds[] = {"master", "exp_avg", "exp_avg_sq"};

struct IndexFileEntry {
  int rank = 0;        // the rank that wrote it
  std::string file;    // name relative to the checkpoint directory
  uint64_t bytes = 0;  // size
  uint64_t xxh64 = 0;  // content hash
};

struct CheckpointIndex {
  int world_size = 0;                 // ranks that wrote it
  int64_t step = 0;                   // optimizer steps taken
  std::string loss_scaler;            // LossScaler::to_json() of rank 0, "" if none
  tensor::ModelLayout layout;         // as saved, padded for world_size ranks
  std::vector<IndexFileEntry> files;  // files[r] is rank r's
};

std::string join_path(const std::string& dir, const std::string& name);

// A shape as the JSON array (and safetensors shape) of its extents, and back (at most tensor::kMaxDims extents).
std::vector<int64_t> shape_dims(const tensor::Shape& shape);
Result<tensor::Shape> shape_from_dims(const std::vector<int64_t>& dims, const std::string& what);

// The layout as recorded: {"world_size", "units": [{"name", "numel", "padded_numel", "params": [{"name", "shape",
// "offset"}]}]} (no decay flags, no unit_align).
nlohmann::json layout_to_json(const tensor::ModelLayout& layout, int world_size);
// Parses and validates a recorded layout, whose "world_size" must be `world_size`. Unit offsets, totals and
// unit_align (= world_size) are derived; decay flags are false.
Result<tensor::ModelLayout> layout_from_json(const nlohmann::json& j, int world_size, const std::string& where);
// Offsets within units, no overlaps, padded_numel a multiple of world_size, unique unit names.
Status validate_layout(const tensor::ModelLayout& layout, int world_size, const std::string& what);

std::string index_to_json(const CheckpointIndex& index);
Result<CheckpointIndex> read_index(const std::string& dir);
// read_index's checks on the texts of DONE and index.json (the paths name them in errors); pure, for tests/fuzz.
Result<CheckpointIndex> parse_index(std::string_view done_text, std::string_view index_text,
                                    const std::string& done_path, const std::string& index_path);

// One all-reduce (max, int32) of `flags`: every rank sets its own entries, the result holds everyone's. This is
// how save and load agree on success (it doubles as the barrier between their phases) and how the loss scaler
// agrees on an overflow (engine/loss_scaler.cc).
Status agree_flags(Communicator& comm, std::vector<int32_t>& flags);
// "" when no flag is set, else "rank(s) 1,3".
std::string flagged_ranks(const std::vector<int32_t>& flags, size_t first = 0, size_t count = SIZE_MAX);

}  // namespace zw::zero
