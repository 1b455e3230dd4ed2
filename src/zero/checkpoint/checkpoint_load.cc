// zero/checkpoint/checkpoint_load.cc — the collective load: index gate, reshard plan, hash checks, ranged reads.
//
// Each rank reads index.json itself (read_index refuses a checkpoint without DONE), plans its copies with
// plan_reshard, verifies the hashes of the old files assigned to it (i % new_world == rank; with an unchanged
// world size that is its own file) and reads only the ranges its plan names. One all-reduce at the start
// (did everyone open the checkpoint?) and one at the end (bad files, failed reads) make every rank return the
// same verdict. Non-goals: reading through a single rank and broadcasting (every rank needs the directory).
#include <cstring>
#include <optional>

#include "common/log.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/checkpoint_index.h"
#include "zero/checkpoint/safetensors.h"

namespace zw::zero {
namespace {

struct Opened {
  CheckpointIndex index;                       // as saved
  std::vector<std::vector<CopySegment>> plan;  // plan[u] for this rank
};

Result<Opened> open_checkpoint(const Communicator& comm, const std::string& dir, const tensor::ModelLayout& layout,
                               std::span<const ShardRef> shards) {
  const std::string who = "load_checkpoint on rank " + std::to_string(comm.rank());
  if (shards.size() != layout.units.size())
    return Status(Code::kInvalidArgument, who + ": " + std::to_string(shards.size()) + " shards given for " +
                                              std::to_string(layout.units.size()) + " units");
  for (size_t u = 0; u < shards.size(); ++u)
    if (shard_numel(layout.units[u], comm.size()) > 0 &&
        (!shards[u].master || !shards[u].exp_avg || !shards[u].exp_avg_sq))
      return Status(Code::kInvalidArgument, who + ": a buffer of unit \"" + layout.units[u].name + "\" is null");
  Opened o;
  ZW_ASSIGN_OR_RETURN(o.index, read_index(dir));
  ZW_ASSIGN_OR_RETURN(o.plan, plan_reshard(o.index.layout, o.index.world_size, layout, comm.size(), comm.rank()));
  return o;
}

// Opens old rank r's file and checks that it is the one the index describes.
Result<SafetensorsReader> open_shard(const std::string& dir, const CheckpointIndex& index, int r) {
  const std::string path = join_path(dir, index.files[r].file);
  ZW_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::open(path));
  ZW_ASSIGN_OR_RETURN(std::string rank, reader.meta("rank"));
  ZW_ASSIGN_OR_RETURN(std::string world, reader.meta("world_size"));
  if (rank != std::to_string(r) || world != std::to_string(index.world_size))
    return Status(Code::kInvalidArgument,
                  path + " says it is rank " + rank + " of " + world + ", the index says rank " + std::to_string(r) +
                      " of " + std::to_string(index.world_size) + "; files of different checkpoints were mixed");
  return reader;
}

Status read_unit(const std::string& dir, const CheckpointIndex& index, const tensor::UnitLayout& unit,
                 int64_t shard_numel, const std::vector<CopySegment>& plan, const ShardRef& dst,
                 std::vector<std::optional<SafetensorsReader>>& readers) {
  float* outs[3] = {dst.master, dst.exp_avg, dst.exp_avg_sq};
  for (float* out : outs)
    if (shard_numel > 0) std::memset(out, 0, static_cast<size_t>(shard_numel) * sizeof(float));
  const int64_t old_shard = zero::shard_numel(unit, index.world_size);  // `unit` is the saved layout's
  for (const CopySegment& s : plan) {
    if (!readers[s.old_rank]) {
      ZW_ASSIGN_OR_RETURN(SafetensorsReader r, open_shard(dir, index, s.old_rank));
      readers[s.old_rank].emplace(std::move(r));
    }
    const SafetensorsReader& reader = *readers[s.old_rank];
    for (int k = 0; k < 3; ++k) {
      ZW_ASSIGN_OR_RETURN(const StTensor* t, reader.find(unit.name + "/" + kTensorKinds[k]));
      if (t->dtype != "F32" || t->shape != std::vector<int64_t>{old_shard})
        return Status(Code::kInvalidArgument,
                      reader.file().path() + ": tensor " + t->name + " is not F32 of the shard size the index gives");
      ZW_TRY(reader.read(*t, static_cast<uint64_t>(s.src) * sizeof(float), outs[k] + s.dst,
                         static_cast<size_t>(s.count) * sizeof(float)));
    }
  }
  return Status();
}

// Hash check of the old files this rank is assigned; sets bad[i] for each mismatch.
void verify_assigned(const std::string& dir, const CheckpointIndex& index, int rank, int world,
                     std::vector<int32_t>& bad) {
  for (int i = rank; i < index.world_size; i += world) {
    const IndexFileEntry& e = index.files[i];
    const std::string path = join_path(dir, e.file);
    auto file = ReadFile::open(path);
    auto digest = file.ok() ? file.value().digest() : Result<FileDigest>(file.status());
    if (!digest.ok() || digest.value().bytes != e.bytes || digest.value().xxh64 != e.xxh64) {
      bad[i] = 1;
      ZW_WARN(kZero, "checkpoint file %s: %s", path.c_str(),
              digest.ok()
                  ? ("size " + std::to_string(digest.value().bytes) + " / xxh64 " + hex64(digest.value().xxh64) +
                     " differ from the index (" + std::to_string(e.bytes) + " / " + hex64(e.xxh64) + ")")
                        .c_str()
                  : digest.status().to_string().c_str());
    }
  }
}

Status read_all(const std::string& dir, const Opened& o, const tensor::ModelLayout& layout, int world_size,
                std::span<const ShardRef> shards, CheckpointScalars* scalars) {
  std::vector<std::optional<SafetensorsReader>> readers(o.index.world_size);
  for (size_t u = 0; u < layout.units.size(); ++u)
    ZW_TRY(read_unit(dir, o.index, o.index.layout.units[u], shard_numel(layout.units[u], world_size), o.plan[u],
                     shards[u], readers));
  scalars->step = o.index.step;
  scalars->loss_scaler = o.index.loss_scaler;
  return Status();
}

}  // namespace

Result<LoadedCheckpoint> load_checkpoint(Communicator& comm, const std::string& dir, const tensor::ModelLayout& layout,
                                         std::span<const ShardRef> shards, const LoadOptions& options) {
  const int rank = comm.rank(), n = comm.size();
  auto opened = open_checkpoint(comm, dir, layout, shards);
  std::vector<int32_t> flags(n, 0);
  flags[rank] = opened.ok() ? 0 : 1;
  ZW_TRY(agree_flags(comm, flags));
  if (!opened.ok()) return opened.status();
  const std::string failed_open = flagged_ranks(flags);
  if (!failed_open.empty())
    return Status(Code::kPeerFailed,
                  "checkpoint " + dir + " could not be opened on " + failed_open + " (their errors say why)");

  const Opened& o = opened.value();
  const int old_world = o.index.world_size;
  std::vector<int32_t> verdict(old_world + n, 0);  // [0, old_world): bad files; then failed new ranks
  if (options.verify) verify_assigned(dir, o.index, rank, n, verdict);
  LoadedCheckpoint loaded;
  loaded.saved_world_size = old_world;
  Status local = read_all(dir, o, layout, n, shards, &loaded.scalars);
  if (local.ok()) {
    // client_state: this rank's own when the world size is unchanged, else old rank 0's.
    auto reader = open_shard(dir, o.index, old_world == n ? rank : 0);
    auto state = reader.ok() ? reader.value().meta("client_state") : Result<std::string>(reader.status());
    if (state.ok()) loaded.scalars.client_state = state.value();
    local = state.status();
  }
  if (!local.ok()) {
    verdict[old_world + rank] = 1;
    ZW_WARN(kZero, "checkpoint load from %s failed: %s", dir.c_str(), local.to_string().c_str());
  }
  ZW_TRY(agree_flags(comm, verdict));
  std::string bad_files;
  for (int i = 0; i < old_world; ++i) {
    if (verdict[i] == 0) continue;
    if (!bad_files.empty()) bad_files += ", ";
    bad_files += o.index.files[i].file;
  }
  if (!bad_files.empty()) {
    return Status(Code::kInvalidArgument, "checkpoint " + dir + " is corrupt: the content of " + bad_files +
                                              " does not match the XXH64 hash in its index (checked by rank(s) i % " +
                                              std::to_string(n) + "); restore the file(s) or load an older checkpoint");
  }
  if (!local.ok()) return local;
  const std::string failed_read = flagged_ranks(verdict, old_world, n);
  if (!failed_read.empty())
    return Status(Code::kPeerFailed,
                  "checkpoint " + dir + " could not be read on " + failed_read + " (their errors say why)");
  return loaded;
}

}  // namespace zw::zero
