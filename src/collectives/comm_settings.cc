// The communicator's settings: CommConfig with every default taken from the knob table (resolve_settings), and
// the defaults that depend on the world size, resolved when the communicator is made.
#include <cmath>

#include "collectives/comm_impl.h"
#include "common/clock.h"
#include "common/knobs.h"

namespace zw::internal {
namespace {
constexpr double kMaxTimeoutS = 1e9;  // seconds
}  // namespace

Result<CommSettings> resolve_settings(const CommConfig& config) {
  const Knobs& k = knobs();
  CommSettings s;
  s.transport = config.transport.empty() ? k.transport : config.transport;
  if (std::isnan(config.timeout_s))  // not "< 0", so it would pass for the default: say it
    return Status(Code::kInvalidArgument, "the operation timeout (CommConfig::timeout_s) is NaN; give a positive "
                                          "number of seconds up to 1e9, or a negative one for ZW_TIMEOUT");
  s.timeout_s = config.timeout_s >= 0 ? config.timeout_s : k.timeout_s;
  s.algo = config.algo.empty() ? k.algo : config.algo;
  const int64_t tree = config.tree_threshold >= 0 ? config.tree_threshold : k.tree_threshold;
  s.tree_threshold = tree == kAutoBytes ? kAutoTreeThreshold : static_cast<size_t>(tree);
  s.chunk_bytes = static_cast<size_t>(config.chunk_bytes >= 0 ? config.chunk_bytes : k.chunk_bytes);
  s.slots = static_cast<int>(config.slots >= 0 ? config.slots : k.slots);
  s.name = config.name;
  s.store_address = k.store_addr;
  s.cuda_path = config.cuda_path.empty() ? k.cuda_path : config.cuda_path;
  s.cuda_staging_chunk =
      static_cast<size_t>(config.cuda_staging_chunk >= 0 ? config.cuda_staging_chunk : k.cuda_staging_chunk);
  s.cuda_blocks = config.cuda_blocks >= 0 ? config.cuda_blocks : k.cuda_blocks;
  s.monitor = config.monitor >= 0 ? config.monitor != 0 : k.monitor != 0;
  if (s.cuda_path != "auto" && s.cuda_path != "ipc" && s.cuda_path != "staged")
    return Status(Code::kInvalidArgument,
                  "unknown device-memory path '" + s.cuda_path + "' (ZW_CUDA_PATH): use auto, ipc or staged");
  if (s.cuda_staging_chunk < 4096)
    return Status(Code::kInvalidArgument, "staging chunk " + std::to_string(s.cuda_staging_chunk) +
                                              " bytes (ZW_CUDA_STAGING_CHUNK) is below the minimum of 4K");
  if (s.algo != "auto" && s.algo != "ring" && s.algo != "tree")
    return Status(Code::kInvalidArgument, "unknown algorithm '" + s.algo + "' (ZW_ALGO): use auto, ring or tree");
  if (s.chunk_bytes < 4096)
    return Status(Code::kInvalidArgument, "chunk size " + std::to_string(s.chunk_bytes) +
                                              " bytes (ZW_CHUNK_BYTES) is below the minimum of 4K");
  if (s.slots < 1 || s.slots > 64)
    return Status(Code::kInvalidArgument, "ZW_SLOTS=" + std::to_string(s.slots) + " is outside 1..64");
  // At most 1e9 s (~31 years): the timeout becomes int64 milliseconds, which 1e300 s or inf would overflow (every
  // wait then "timed out after 0 ms").
  if (!(s.timeout_s > 0) || !(s.timeout_s <= kMaxTimeoutS))
    return Status(Code::kInvalidArgument, "the operation timeout (ZW_TIMEOUT or CommConfig::timeout_s) is " +
                                              seconds_text(s.timeout_s) +
                                              " s; give a positive number of seconds "
                                              "up to 1e9");
  int64_t eager = config.eager_bytes >= 0 ? config.eager_bytes : k.eager_bytes;
  // ZW_EAGER_BYTES=auto: tcp pays a clear-to-send round trip through both kernels (64K is also Open MPI's tcp
  // eager limit); shm keeps the 16K that bench/tune measured.
  if (eager == kAutoBytes) eager = s.transport == "tcp" ? (64 << 10) : (16 << 10);
  if (eager > (64 << 10))
    return Status(Code::kInvalidArgument, "ZW_EAGER_BYTES=" + std::to_string(eager) + " is above the maximum of 64K");
  if (k.eager_slots < 1 || k.eager_slots > 64)
    return Status(Code::kInvalidArgument, "ZW_EAGER_SLOTS=" + std::to_string(k.eager_slots) + " is outside 1..64");
  s.eager = EagerConfig{static_cast<size_t>(eager), static_cast<int>(k.eager_slots)};
  return s;
}

// ZW_TREE_THRESHOLD=auto (bench/tune at 2-8 ranks, docs/PERF.md): over tcp, a world whose size is a power of two
// gathers and reduces by recursive doubling/halving below 1M, where the ring's n-1 dependent steps (each a wake-up
// of the next rank) cost more than log2(n) exchanges with no folding; in other worlds the folding of the extra
// ranks (a whole-vector transfer more) loses to the ring from 256K, and shm keeps the measured 64K.
size_t resolve_tree_threshold(const CommSettings& settings, int world_size) {
  if (settings.tree_threshold != kAutoTreeThreshold) return settings.tree_threshold;
  const bool power_of_two = world_size > 0 && (world_size & (world_size - 1)) == 0;
  return settings.transport == "tcp" && power_of_two ? size_t{1} << 20 : size_t{64} << 10;
}

}  // namespace zw::internal
