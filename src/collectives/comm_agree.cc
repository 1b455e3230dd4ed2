// Settings every rank must share (comm_agree.h).
#include "collectives/comm_agree.h"

#include <vector>

#include "common/knobs.h"

namespace zw::internal {
namespace {

struct Line {
  std::string knob, value, meaning;
};

std::vector<Line> parse(const std::string& record) {
  std::vector<Line> out;
  size_t at = 0;
  while (at < record.size()) {
    size_t nl = record.find('\n', at);
    std::string line = record.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? record.size() : nl + 1;
    size_t eq = line.find('='), colon = line.rfind(':');
    if (eq == std::string::npos || colon == std::string::npos || colon < eq) continue;
    out.push_back({line.substr(0, eq), line.substr(eq + 1, colon - eq - 1), line.substr(colon + 1)});
  }
  return out;
}

}  // namespace

std::string agreement_record(const CommSettings& s, int world_size) {
  const bool shm = s.transport == "shm", auto_algo = s.algo == "auto";
  const int64_t direct = knobs().shm_direct_ag_max_ranks;
  const bool goes_direct = shm && world_size > 1 && world_size <= direct;
  std::vector<Line> lines = {
      {"ZW_TRANSPORT", s.transport, s.transport},
      {"ZW_ALGO", s.algo, s.algo},
      {"ZW_TREE_THRESHOLD", std::to_string(s.tree_threshold), auto_algo ? std::to_string(s.tree_threshold) : "unused"},
      {"ZW_CHUNK_BYTES", std::to_string(s.chunk_bytes), std::to_string(s.chunk_bytes)},
      {"ZW_EAGER_BYTES", std::to_string(s.eager.bytes), std::to_string(s.eager.bytes)},
      {"ZW_EAGER_SLOTS", std::to_string(s.eager.slots), s.eager.bytes == 0 ? "unused" : std::to_string(s.eager.slots)},
      {"ZW_SHM_DIRECT_AG_MAX_RANKS", std::to_string(direct), goes_direct ? "direct" : "not direct"},
      {"ZW_CUDA_PATH", s.cuda_path, s.cuda_path},
      {"ZW_CUDA_STAGING_CHUNK", std::to_string(s.cuda_staging_chunk), std::to_string(s.cuda_staging_chunk)},
  };
  std::string out;
  for (const Line& l : lines) out += l.knob + "=" + l.value + ":" + l.meaning + "\n";
  return out;
}

std::string agreement_differences(const std::string& mine, int my_rank, const std::string& theirs, int peer) {
  const std::vector<Line> a = parse(mine), b = parse(theirs);
  std::string out;
  for (const Line& x : a) {
    const Line* y = nullptr;
    for (const Line& l : b)
      if (l.knob == x.knob) y = &l;
    if (!y) {
      out += (out.empty() ? "" : "; ") + x.knob + " is unknown to rank " + std::to_string(peer) +
             " (is it running the same zerowire version?)";
    } else if (y->meaning != x.meaning) {
      out += (out.empty() ? "" : "; ") + x.knob + " is " + x.value + " on rank " + std::to_string(my_rank) + " but " +
             y->value + " on rank " + std::to_string(peer);
    }
  }
  return out;
}

Status check_settings_agree(Store& store, int rank, int size, const CommSettings& settings, Deadline deadline) {
  const std::string mine = agreement_record(settings, size);
  ZW_TRY(store.set("agree/" + std::to_string(rank), mine));
  std::string diffs;
  int differing = 0;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    auto theirs = store.get("agree/" + std::to_string(p),
                            std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining()));
    if (!theirs.ok())
      return theirs.status().with_context("rank " + std::to_string(p) +
                                          " never published its settings (is it "
                                          "running, with the same world size and communicator name?)");
    std::string d = agreement_differences(mine, rank, theirs.value(), p);
    if (d.empty()) continue;
    if (++differing <= 3) diffs += (diffs.empty() ? "" : "; ") + d;
  }
  if (differing == 0) return Status();
  return Status(Code::kInvalidArgument,
                "settings that change the wire protocol or the algorithm must be the same on every rank: " + diffs +
                    (differing > 3 ? "; and " + std::to_string(differing - 3) + " more rank(s)" : std::string()) +
                    " (set them alike everywhere, or leave them unset)");
}

}  // namespace zw::internal
