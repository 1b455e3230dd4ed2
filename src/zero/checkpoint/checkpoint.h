// zero/checkpoint/checkpoint.h — sharded ZeRO-3 checkpoints: every rank writes its shard, any world size reads
// them back.
//
// A checkpoint is a directory (shared by all ranks, e.g. on NFS or a local disk for one host):
//   rank00000.safetensors ...  one per rank: for every unit u of the layout, in layout order, the F32 tensors
//                              "<u>/master", "<u>/exp_avg", "<u>/exp_avg_sq" of shape [shard_numel]; its
//                              __metadata__ holds format, version, world_size, rank, step, the loss scaler state,
//                              the caller's opaque client state and the whole layout (JSON), so one file is
//                              self-describing.
//   index.json                 rank 0: format, world_size, step, layout, tensor kinds, and per rank its file name,
//                              size in bytes and XXH64 content hash.
//   DONE                       rank 0, last, after a barrier: the size and XXH64 of index.json.
// Every file is written atomically (temp + fsync + rename + directory fsync; see checkpoint_io.h). save first
// removes a DONE left by an older save into the same directory, so a save that dies half-way leaves a directory
// without DONE, which load refuses. Prefer one directory per step (DeepSpeed's global_step<N>).
//
// Loading onto the same world size and layout reads only this rank's file. Onto another world size (or other
// padding) each new rank maps every parameter's slice of its new shard back to the old ranks' byte ranges and
// reads only those ranges (plan_reshard). Elements of the new shard outside every parameter (padding) are zeroed.
// Units, parameter names and shapes must match the checkpoint; the first difference is the error. Content hashes
// are verified (LoadOptions::verify): same world size — each rank its own file; otherwise old file i by new rank
// i % new_world; either way one all-reduce tells every rank which files are bad.
// Layouts are tensor::ModelLayouts padded for a world size (every unit's padded_numel a multiple of it: rank r's
// shard of a unit is elements [r·S, (r+1)·S), S = padded_numel / world_size), as PartitionManager::layout() is; the
// world size is the communicator's when saving and loading. The layout is recorded without weight-decay flags and
// unit_align (a loaded one has unit_align = its world size, decay flags false).
// Threading: save/load are collectives over `comm`; every rank calls them with the same dir and layout.
// Non-goals: asynchronous (background) saves, fp16/bf16 parameter copies in the checkpoint, keeping N newest.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/param_layout.h"
#include "zerowire/communicator.h"
#include "zerowire/status.h"
#include "zerowire/types.h"

namespace zw::zero {

inline constexpr const char* kCheckpointIndex = "index.json";
inline constexpr const char* kCheckpointDone = "DONE";
// "rank00003.safetensors".
std::string shard_file_name(int rank);

// Elements of each rank's shard of `unit` in a layout padded for world_size ranks.
inline int64_t shard_numel(const tensor::UnitLayout& unit, int world_size) { return unit.padded_numel / world_size; }

// This rank's shard of one unit: shard_numel(unit, world size) elements each.
struct ShardConstRef {
  const float* master = nullptr;      // fp32 master weights
  const float* exp_avg = nullptr;     // Adam m
  const float* exp_avg_sq = nullptr;  // Adam v
};
struct ShardRef {
  float* master = nullptr;      // fp32 master weights
  float* exp_avg = nullptr;     // Adam m
  float* exp_avg_sq = nullptr;  // Adam v
};

struct CheckpointScalars {
  int64_t step = 0;          // optimizer steps taken
  std::string loss_scaler;   // LossScaler::to_json(), "" when there is none
  std::string client_state;  // opaque JSON of the caller (RNG, data position); may differ per rank
};

// Collective. shards[u] is this rank's shard of layout.units[u]; `layout` is padded for comm.size() ranks.
Status save_checkpoint(Communicator& comm, const std::string& dir, const tensor::ModelLayout& layout,
                       std::span<const ShardConstRef> shards, const CheckpointScalars& scalars);

struct LoadOptions {
  bool verify = true;  // check the XXH64 of every file against the index (reads each file once more)
};

struct LoadedCheckpoint {
  CheckpointScalars scalars;  // step and loss scaler from the index/rank 0; client_state of the same rank when
                              // the world size is unchanged, else old rank 0's
  int saved_world_size = 0;   // world size the checkpoint was written with
};

// Collective. `layout` is the new layout, padded for comm.size() ranks; shards[u] receives this rank's shard of
// layout.units[u].
Result<LoadedCheckpoint> load_checkpoint(Communicator& comm, const std::string& dir, const tensor::ModelLayout& layout,
                                         std::span<const ShardRef> shards, const LoadOptions& options = {});

// One contiguous copy of the reshard plan: `count` elements from old rank `old_rank`'s shard at `src` to the new
// shard at `dst` (element offsets within the shards).
struct CopySegment {
  int old_rank = 0;   // file to read
  int64_t src = 0;    // element offset in the old shard
  int64_t dst = 0;    // element offset in the new shard
  int64_t count = 0;  // elements
};

// The copies that fill new_rank's shard of every unit (result[u]) of `target` (padded for target_world ranks) from
// the shards of `saved` (padded for saved_world ranks), adjacent copies merged. Errors name the first unit /
// parameter / shape that differs between the layouts.
Result<std::vector<std::vector<CopySegment>>> plan_reshard(const tensor::ModelLayout& saved, int saved_world,
                                                           const tensor::ModelLayout& target, int target_world,
                                                           int new_rank);

// Streams a checkpoint into one safetensors file of full, unpadded parameters named by parameter name, in dtype
// kFloat32, kBFloat16 or kFloat16 (round to nearest-even). Holds one unit in memory at a time. Verifies every
// file's hash first when `verify`.
Status consolidate_checkpoint(const std::string& dir, const std::string& out_path, DataType dtype, bool verify = true);

}  // namespace zw::zero
