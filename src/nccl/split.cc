// nccl/split.cc — ncclCommSplit and ncclCommShrink: child communicators over the parent's store.
//
// Split: every rank of the parent publishes (color, key) under the parent's name in the store, waits for all, and
// ranks of one color form a child ordered by (key, parent rank), named after the parent, the split's number and the
// color. NCCL_SPLIT_NOCOLOR ranks take part and get NULL. Shrink: the ranks not excluded form the child in parent
// order; excluded ranks do not call it, so nothing is exchanged (the survivors agree by construction); with
// NCCL_SHRINK_ABORT the parent's pending work is aborted first. Inside a group both run at ncclGroupEnd, beside the
// group's other creations. A config of NULL inherits the parent's.
// Non-goals: splitShare/shrinkShare resource sharing (each child has its own connections).
#include <algorithm>

#include "bootstrap/store_util.h"
#include "common/knobs.h"
#include "nccl/nccl_internal.h"

namespace zw::nccl {
namespace {

Store::Timeout timeout() { return store::timeout_from_seconds(knobs().timeout_s); }

ncclComm* make_child(ncclComm* parent, const CommOptions& options, const std::string& name) {
  auto* child = new ncclComm;
  child->options = options;
  child->store = parent->store;
  child->store_name = name;
  child->device = parent->device;
  return child;
}

// The exchange and creation of a split (runs now, or at ncclGroupEnd). `child` is null for NCCL_SPLIT_NOCOLOR.
ncclResult_t run_split(ncclComm* parent, int number, int color, int key, ncclComm* child) {
  Store& store = *parent->store;
  const std::string base = parent->store_name + "/split" + std::to_string(number) + "/";
  std::vector<std::string> keys;
  for (int p = 0; p < parent->nranks; ++p) keys.push_back(base + std::to_string(p));
  Status s = store.set(keys[parent->rank], std::to_string(color) + " " + std::to_string(key));
  if (s.ok()) s = store.wait(keys, timeout());
  if (!s.ok()) return fail(parent, s, "ncclCommSplit: exchanging colors with the other ranks");
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of this color
  for (int p = 0; p < parent->nranks; ++p) {
    auto v = store.get(keys[p], timeout());
    if (!v.ok()) return fail(parent, v.status(), "ncclCommSplit: reading rank " + std::to_string(p) + "'s color");
    int c = 0, k = 0;
    if (std::sscanf(v->c_str(), "%d %d", &c, &k) != 2)
      return fail(parent, ncclInternalError, "ncclCommSplit: malformed color of rank " + std::to_string(p));
    if (c == color && color != NCCL_SPLIT_NOCOLOR) members.emplace_back(k, p);
  }
  if (child == nullptr) return ncclSuccess;
  std::sort(members.begin(), members.end());
  child->nranks = static_cast<int>(members.size());
  child->rank = static_cast<int>(std::find(members.begin(), members.end(), std::pair{key, parent->rank}) -
                                 members.begin());
  return create_zw(child);
}

ncclResult_t child_options(ncclComm* parent, const ncclConfig_t* config, CommOptions* out) {
  if (config == nullptr) {
    *out = parent->options;
    return ncclSuccess;
  }
  return read_config(config, out);
}

}  // namespace
}  // namespace zw::nccl

using namespace zw::nccl;  // NOLINT(google-build-using-namespace): the C API below

extern "C" {

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (ncclResult_t r = check_comm(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  if (newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(comm, ncclInvalidArgument,
                "ncclCommSplit: color " + std::to_string(color) + " is negative (NCCL_SPLIT_NOCOLOR is -1)");
  CommOptions options;
  if (ncclResult_t r = child_options(comm, config, &options); r != ncclSuccess) return r;
  const int number = comm->children++;
  ncclComm* child = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR)
    child = make_child(comm, options,
                       comm->store_name + "/split" + std::to_string(number) + "/c" + std::to_string(color));
  *newcomm = child;
  if (in_group()) {
    defer_init(child, [=] { return run_split(comm, number, color, key, child); });
    return ncclSuccess;
  }
  if (ncclResult_t r = ready_comm(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  ncclResult_t r = run_split(comm, number, color, key, child);
  if (r != ncclSuccess && child != nullptr) {
    *newcomm = nullptr;
    delete child;
  }
  return r;
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int excludeCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int flags) {
  if (ncclResult_t r = check_comm(comm, "ncclCommShrink"); r != ncclSuccess) return r;
  if (newcomm == nullptr || (exclude == nullptr && excludeCount > 0) || excludeCount < 0)
    return fail(comm, ncclInvalidArgument, "ncclCommShrink: newcomm is NULL, or excludeRanksList does not match its count");
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
    return fail(comm, ncclInvalidArgument, "ncclCommShrink: unknown shrinkFlags " + std::to_string(flags));
  *newcomm = nullptr;
  std::vector<bool> gone(comm->nranks, false);
  for (int i = 0; i < excludeCount; ++i) {
    if (exclude[i] < 0 || exclude[i] >= comm->nranks)
      return fail(comm, ncclInvalidArgument, "ncclCommShrink: excluded rank " + std::to_string(exclude[i]) +
                                                 " is outside 0.." + std::to_string(comm->nranks - 1));
    gone[exclude[i]] = true;
  }
  if (gone[comm->rank])
    return fail(comm, ncclInvalidUsage, "ncclCommShrink: rank " + std::to_string(comm->rank) +
                                            " is in the exclusion list; only the remaining ranks call it");
  CommOptions options;
  if (ncclResult_t r = child_options(comm, config, &options); r != ncclSuccess) return r;
  if (flags == NCCL_SHRINK_ABORT && comm->zw)
    comm->zw->abort(zw::Status(zw::Code::kAborted, "ncclCommShrink with NCCL_SHRINK_ABORT on rank " +
                                                       std::to_string(comm->rank)));
  ncclComm* child = make_child(comm, options, comm->store_name + "/shrink" + std::to_string(comm->children++));
  child->nranks = static_cast<int>(std::count(gone.begin(), gone.end(), false));
  child->rank = static_cast<int>(std::count(gone.begin(), gone.begin() + comm->rank, false));
  *newcomm = child;
  ncclResult_t r = start_init(child);
  if (r != ncclSuccess && r != ncclInProgress) {
    *newcomm = nullptr;
    delete child;
  }
  return r;
}

}  // extern "C"
