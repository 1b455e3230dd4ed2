// zero/checkpoint/checkpoint_save.cc — the collective save: retire DONE, every rank its shard, rank 0 index, barrier,
// DONE.
//
// Phases, each closed by one agreement all-reduce (agree_flags) so that a failure on any rank fails the save on
// every rank instead of hanging the others:
//   1. check arguments, create the directory, rank 0 removes an old DONE      -> agree
//   2. every rank writes rank<r>.safetensors atomically                       -> agree (+ size, file hash and
//                                                                                 layout hash of every rank)
//   3. rank 0 checks that all ranks saved its layout, writes index.json       -> agree (the barrier)
//   4. rank 0 writes DONE                                                     -> agree
// Non-goals: overlapping the write with training (the caller may copy shards and call this from a thread that
// owns its own communicator).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/checkpoint_index.h"
#include "zero/checkpoint/checkpoint_io.h"
#include "zero/checkpoint/safetensors.h"

namespace zw::zero {
namespace {

Status check_args(const Communicator& comm, const tensor::ModelLayout& layout, std::span<const ShardConstRef> shards) {
  const std::string who = "save_checkpoint on rank " + std::to_string(comm.rank());
  ZW_TRY(validate_layout(layout, comm.size(), who));
  if (shards.size() != layout.units.size())
    return Status(Code::kInvalidArgument, who + ": " + std::to_string(shards.size()) + " shards given for " +
                                              std::to_string(layout.units.size()) + " units");
  for (size_t u = 0; u < shards.size(); ++u) {
    const ShardConstRef& s = shards[u];
    if (shard_numel(layout.units[u], comm.size()) > 0 && (!s.master || !s.exp_avg || !s.exp_avg_sq))
      return Status(Code::kInvalidArgument, who + ": a buffer of unit \"" + layout.units[u].name + "\" is null");
  }
  return Status();
}

// mkdir -p, as DeepSpeed's os.makedirs(exist_ok=True); ranks racing on it is fine.
Status make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return system_error("create checkpoint directory " + dir + " (is its parent writable?)", ec.value());
  return Status();
}

Status prepare(const Communicator& comm, const std::string& dir, const tensor::ModelLayout& layout,
               std::span<const ShardConstRef> shards) {
  ZW_TRY(check_args(comm, layout, shards));
  ZW_TRY(make_dir(dir));
  if (comm.rank() == 0) {
    const std::string done = join_path(dir, kCheckpointDone);
    if (::unlink(done.c_str()) != 0 && errno != ENOENT) return system_error("remove old " + done, errno);
  }
  return Status();
}

Result<FileDigest> write_shard(const std::string& dir, const tensor::ModelLayout& layout, int rank, int world_size,
                               std::span<const ShardConstRef> shards, const CheckpointScalars& scalars) {
  std::vector<StTensor> tensors;
  for (const tensor::UnitLayout& u : layout.units)
    for (const char* kind : kTensorKinds) tensors.push_back({u.name + "/" + kind, "F32", {shard_numel(u, world_size)}});
  const std::map<std::string, std::string> meta = {{"format", kCheckpointFormat},
                                                   {"version", std::to_string(kCheckpointVersion)},
                                                   {"world_size", std::to_string(world_size)},
                                                   {"rank", std::to_string(rank)},
                                                   {"step", std::to_string(scalars.step)},
                                                   {"loss_scaler", scalars.loss_scaler},
                                                   {"client_state", scalars.client_state},
                                                   {"layout", layout_to_json(layout, world_size).dump()}};
  ZW_ASSIGN_OR_RETURN(SafetensorsWriter w,
                      SafetensorsWriter::create(join_path(dir, shard_file_name(rank)), std::move(tensors), meta));
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const size_t bytes = static_cast<size_t>(shard_numel(layout.units[u], world_size)) * sizeof(float);
    ZW_TRY(w.write(shards[u].master, bytes));
    ZW_TRY(w.write(shards[u].exp_avg, bytes));
    ZW_TRY(w.write(shards[u].exp_avg_sq, bytes));
  }
  return w.commit();
}

// Phase 1 and 2 agreement: failed ranks' flags set. `local` is this rank's error, returned as is when set.
Status agree(Communicator& comm, const Status& local, const std::string& phase, std::vector<int32_t>* extra = nullptr) {
  const int n = comm.size();
  std::vector<int32_t> flags(n, 0);
  if (extra != nullptr) flags.insert(flags.end(), extra->begin(), extra->end());
  flags[comm.rank()] = local.ok() ? 0 : 1;
  if (!local.ok()) ZW_WARN(kZero, "checkpoint %s failed: %s", phase.c_str(), local.to_string().c_str());
  ZW_TRY(agree_flags(comm, flags));
  if (extra != nullptr) std::copy(flags.begin() + n, flags.end(), extra->begin());
  if (!local.ok()) return local;
  const std::string failed = flagged_ranks(flags, 0, n);
  if (!failed.empty())
    return Status(Code::kPeerFailed, "checkpoint " + phase + " failed on " + failed + " (their logs say why)");
  return Status();
}

// A file's size and hash, and the hash of the rank's layout, travel in the agreement vector as 16-bit pieces, one
// per int32 slot: non-negative, so the max all-reduce delivers them (each slot has one writer, zeros elsewhere).
constexpr size_t kSlotsPerRank = 12;

void pack_u64(uint64_t v, int32_t* slots) {
  for (int i = 0; i < 4; ++i) slots[i] = static_cast<int32_t>((v >> (16 * i)) & 0xffff);
}

uint64_t unpack_u64(const int32_t* slots) {
  uint64_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint64_t>(slots[i]) << (16 * i);
  return v;
}

uint64_t layout_hash(const tensor::ModelLayout& layout, int world_size) {
  const std::string text = layout_to_json(layout, world_size).dump();
  return Xxh64::of(text.data(), text.size());
}

// Rank 0: writes index.json and returns the DONE marker's text (index size and hash).
Result<std::string> write_index(const std::string& dir, const tensor::ModelLayout& layout,
                                const CheckpointScalars& scalars, const std::vector<int32_t>& digests, int n) {
  CheckpointIndex index{n, scalars.step, scalars.loss_scaler, layout, {}};
  const uint64_t mine = layout_hash(layout, n);
  for (int r = 0; r < n; ++r) {
    const int32_t* slots = &digests[kSlotsPerRank * r];
    if (unpack_u64(slots + 8) != mine)
      return Status(Code::kInvalidArgument,
                    "rank " + std::to_string(r) +
                        " saved a different ModelLayout than rank 0 "
                        "(units, parameters or padding differ); every rank must pass the same layout");
    index.files.push_back({r, shard_file_name(r), unpack_u64(slots), unpack_u64(slots + 4)});
  }
  ZW_ASSIGN_OR_RETURN(FileDigest written, write_file_atomic(join_path(dir, kCheckpointIndex), index_to_json(index)));
  const nlohmann::json done = {{"index_bytes", written.bytes}, {"index_xxh64", hex64(written.xxh64)}};
  return done.dump();
}

}  // namespace

std::string shard_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank%05d.safetensors", rank);
  return buf;
}

Status save_checkpoint(Communicator& comm, const std::string& dir, const tensor::ModelLayout& layout,
                       std::span<const ShardConstRef> shards, const CheckpointScalars& scalars) {
  const int rank = comm.rank(), n = comm.size();
  ZW_TRY(agree(comm, prepare(comm, dir, layout, shards), "preparation of " + dir));

  std::vector<int32_t> digests(kSlotsPerRank * static_cast<size_t>(n), 0);
  auto digest = write_shard(dir, layout, rank, n, shards, scalars);
  if (digest.ok()) {
    int32_t* slots = &digests[kSlotsPerRank * rank];
    pack_u64(digest.value().bytes, slots);
    pack_u64(digest.value().xxh64, slots + 4);
    pack_u64(layout_hash(layout, n), slots + 8);
  }
  ZW_TRY(agree(comm, digest.status(), "shard write into " + dir, &digests));

  std::string done_text;
  Status index_status;
  if (rank == 0) {
    auto done = write_index(dir, layout, scalars, digests, n);
    if (done.ok()) done_text = done.value();
    index_status = done.status();
  }
  ZW_TRY(agree(comm, index_status, "index write"));  // the barrier: every shard and the index are durable
  Status done_status;
  if (rank == 0) done_status = write_file_atomic(join_path(dir, kCheckpointDone), done_text).status();
  ZW_TRY(agree(comm, done_status, "DONE marker write"));
  if (rank == 0)
    ZW_INFO(kZero, "checkpoint of step %lld saved to %s by %d ranks", static_cast<long long>(scalars.step), dir.c_str(),
            n);
  return Status();
}

}  // namespace zw::zero
