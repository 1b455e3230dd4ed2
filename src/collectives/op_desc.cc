// Operation descriptions.
#include "collectives/op_desc.h"

namespace zw::internal {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kSendRecv: return "send_recv";
  }
  return "?";
}

const char* algo_name(Algo algo) { return algo == Algo::kRing ? "ring" : "tree"; }

std::string OpDesc::describe() const {
  std::string s = std::string(op_kind_name(kind)) + "(count=" + std::to_string(count) + ", " + dtype_name(dtype);
  if (kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce || kind == OpKind::kReduce)
    s += std::string(", ") + reduce_op_name(op);
  if (kind == OpKind::kBroadcast || kind == OpKind::kReduce) s += ", root=" + std::to_string(root);
  return s + ", " + algo_name(algo) + ")";
}

}  // namespace zw::internal
