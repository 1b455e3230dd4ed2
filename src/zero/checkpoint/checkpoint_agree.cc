// zero/checkpoint/checkpoint_agree.cc — agree_flags and flagged_ranks (checkpoint_index.h): the one all-reduce by
// which save, load and the loss scaler agree on success. Apart from checkpoint_index.cc so that the index parser
// links without the collectives (tests/fuzz). Non-goals: anything but the flag vote.
#include <algorithm>

#include "zero/checkpoint/checkpoint_index.h"

namespace zw::zero {

Status agree_flags(Communicator& comm, std::vector<int32_t>& flags) {
  CollectiveOptions o;
  o.input = MemRef::host(flags.data(), flags.size() * sizeof(int32_t));
  o.output = o.input;
  o.count = flags.size();
  o.dtype = DataType::kInt32;
  o.op = ReduceOp::kMax;
  ZW_ASSIGN_OR_RETURN(Work work, all_reduce(comm, o));
  return work.wait();
}

std::string flagged_ranks(const std::vector<int32_t>& flags, size_t first, size_t count) {
  std::string out;
  const size_t end = std::min(flags.size(), count == SIZE_MAX ? flags.size() : first + count);
  for (size_t i = first; i < end; ++i) {
    if (flags[i] == 0) continue;
    if (!out.empty()) out += ',';
    out += std::to_string(i - first);
  }
  return out.empty() ? out : "rank(s) " + out;
}

}  // namespace zw::zero
