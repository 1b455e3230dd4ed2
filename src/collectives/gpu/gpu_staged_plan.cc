// The chunk plan of the staged device-memory path (gpu_staged.h): which host collective each chunk runs on which
// slice of the pinned staging area, and which copies bring its input there and its result back.
//
// Staging layout: all_reduce, broadcast and reduce stage the buffer as it is, in place (chunk [lo, hi) at lo·elem).
// all_gather and reduce_scatter stage chunk [lo, hi) of every rank's block contiguously at world·lo·elem, rank p's
// piece at p·len inside it, so each chunk is an ordinary in-place host collective of count hi − lo.
// Non-goals: the copies themselves and their ordering (gpu_staged.cc).
#include <algorithm>

#include "collectives/gpu/gpu_staged.h"

namespace zw::internal::gpu {
namespace {

StagedCopy flat(std::byte* dst, const std::byte* src, size_t bytes) {
  return StagedCopy{dst, bytes, src, bytes, bytes, 1};
}

// The host collective of a chunk of `count` elements.
StagedChunk chunk_of(const CommImpl& impl, const OpDesc& desc, size_t count, size_t total_bytes) {
  StagedChunk c;
  c.desc = desc;
  c.desc.count = count;
  c.desc.algo = impl.choose_algo(total_bytes);
  c.host.count = count;
  c.host.dtype = desc.dtype;
  c.host.op = desc.op;
  c.host.root = static_cast<int>(desc.root);
  return c;
}

}  // namespace

size_t staging_bytes(const OpDesc& desc, int size) {
  const size_t bytes = desc.count * dtype_size(desc.dtype);
  const bool blocks = desc.kind == OpKind::kAllGather || desc.kind == OpKind::kReduceScatter;
  return blocks ? bytes * static_cast<size_t>(size) : bytes;
}

StagedPlan plan_staged(const CommImpl& impl, const OpDesc& desc, const CollectiveOptions& o, std::byte* staging,
                       size_t chunk_bytes) {
  const size_t n = static_cast<size_t>(impl.size()), r = static_cast<size_t>(impl.rank());
  const size_t es = dtype_size(desc.dtype), block = desc.count * es;
  // Whole elements, 256-byte multiples (every dtype size divides 256), so chunk offsets stay aligned.
  const size_t per = std::max<size_t>(1, (chunk_bytes & ~size_t{255}) / es);
  const bool root = desc.root == r;
  const std::byte* in = o.input.data();
  std::byte* out = o.output.data();
  StagedPlan plan;
  if (desc.count == 0) {  // nothing to copy, but the host collective still meets the peers (another count fails there)
    plan.chunks.push_back(chunk_of(impl, desc, 0, 0));
    return plan;
  }
  if (desc.kind == OpKind::kBroadcast && root && o.input.ptr != o.output.ptr) plan.d2d = flat(out, in, block);
  for (size_t lo = 0; lo < desc.count; lo += per) {
    const size_t hi = std::min<size_t>(desc.count, lo + per), len = (hi - lo) * es;
    switch (desc.kind) {
      case OpKind::kAllGather: {
        std::byte* all = staging + n * lo * es;
        std::byte* mine = all + r * len;
        StagedChunk c = chunk_of(impl, desc, hi - lo, n * len);
        c.host.input = MemRef::host(mine, len);
        c.host.output = MemRef::host(all, n * len);
        c.d2h = flat(mine, in + lo * es, len);
        c.h2d = StagedCopy{out + lo * es, block, all, len, len, n};
        plan.chunks.push_back(c);
        break;
      }
      case OpKind::kReduceScatter: {
        std::byte* all = staging + n * lo * es;
        std::byte* mine = all + r * len;
        StagedChunk c = chunk_of(impl, desc, hi - lo, n * len);
        c.host.input = MemRef::host(all, n * len);
        c.host.output = MemRef::host(mine, len);
        c.d2h = StagedCopy{all, len, in + lo * es, block, len, n};
        c.h2d = flat(out + lo * es, mine, len);
        plan.chunks.push_back(c);
        break;
      }
      case OpKind::kAllReduce:
      case OpKind::kBroadcast:
      case OpKind::kReduce: {
        std::byte* s = staging + lo * es;
        StagedChunk c = chunk_of(impl, desc, hi - lo, len);
        c.host.input = MemRef::host(s, len);
        const bool has_output = desc.kind == OpKind::kAllReduce || desc.kind == OpKind::kBroadcast || root;
        if (has_output) c.host.output = MemRef::host(s, len);
        const bool sends = desc.kind != OpKind::kBroadcast || root;  // the input is this rank's contribution
        const bool receives = desc.kind == OpKind::kAllReduce || (desc.kind == OpKind::kBroadcast ? !root : root);
        if (sends) c.d2h = flat(s, in + lo * es, len);
        if (receives) c.h2d = flat(out + lo * es, s, len);
        plan.chunks.push_back(c);
        break;
      }
      case OpKind::kBarrier:
      case OpKind::kAllToAll:  // not routed here (p2p.cc stages them)
      case OpKind::kSendRecv:
        return plan;
    }
  }
  return plan;
}

}  // namespace zw::internal::gpu
