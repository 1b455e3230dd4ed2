// Collective algorithms, each a small file, all written against OpContext (rendezvous, scratch, tuning).
//
// Buffers are (RegBuf, base offset) pairs; a BlockLayout says which bytes of the whole vector belong to each
// rank, so all_reduce can split a count that world_size does not divide. Algorithms assume arguments were
// validated; avg reductions arrive as sum (the caller scales the result).
//   ring_all_gather      pipelined ring; chunk slices of every block move one hop per step
//   ring_reduce_scatter  pipelined ring; received slices land in scratch slots, are reduced, forwarded
//   all_reduce_direct_gather  (direct_all_gather.h) the ring reduce-scatter, each final slice sent to every peer
//   tree_all_gather      recursive doubling (non-powers of two fold the extra ranks in and out)
//   tree_reduce_scatter  recursive halving (same folding)
//   broadcast_pipelined  binomial tree or chain, chunk-pipelined
//   reduce_pipelined     binomial tree or chain, chunk-pipelined
//   direct_all_to_all    every block straight to its rank, chunked
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "collectives/buffers.h"
#include "collectives/comm_impl.h"
#include "collectives/op_desc.h"

namespace zw::internal {

class BlockLayout {
 public:
  // n equal blocks of `block_bytes`.
  static BlockLayout equal(int n, size_t block_bytes) { return BlockLayout(n, block_bytes, 1, 0); }
  // `count` elements of `elem` bytes split over n blocks as evenly as whole elements allow: the first count % n
  // blocks hold one element more.
  static BlockLayout balanced(int n, size_t count, size_t elem) {
    return BlockLayout(n, elem, count / size_t(n), count % size_t(n));
  }

  int blocks() const { return n_; }
  size_t offset(int b) const { return (size_t(b) * base_ + std::min(size_t(b), extra_)) * elem_; }
  size_t bytes(int b) const { return (base_ + (size_t(b) < extra_ ? 1 : 0)) * elem_; }
  size_t total() const { return offset(n_); }
  size_t max_block() const { return (base_ + (extra_ > 0 ? 1 : 0)) * elem_; }
  // Slice `it` of block b when blocks are cut in `chunk`-byte slices: [offset, offset + *len) of the whole vector
  // (len 0 past a short block's end). The pipelined algorithms' iteration `it` handles slice `it` of every block.
  size_t slice(int b, size_t it, size_t chunk, size_t* len) const {
    const size_t begin = std::min(bytes(b), it * chunk);
    *len = std::min(bytes(b) - begin, chunk);
    return offset(b) + begin;
  }

 private:
  // Closed form, no table: a layout is made for every operation, so it allocates nothing.
  BlockLayout(int n, size_t elem, size_t base, size_t extra) : n_(n), elem_(elem), base_(base), extra_(extra) {}
  int n_;         // blocks
  size_t elem_;   // bytes per element
  size_t base_;   // elements of every block
  size_t extra_;  // the first extra_ blocks hold one element more
};

// A registered buffer and the offset of the operation's data inside it.
struct BufRef {
  RegBuf reg;
  size_t base = 0;
  std::byte* at(size_t offset) const { return reg.data() + base + offset; }
};

// Tag phases keep the sub-operations of one collective apart.
enum : unsigned { kPhaseGather = 0, kPhaseReduce = 1, kPhaseRoot = 2, kPhaseP2P = 3 };

// `out` already holds this rank's block; on return it holds every block.
Status ring_all_gather(OpContext& ctx, const BufRef& out, const BlockLayout& layout);
Status tree_all_gather(OpContext& ctx, const BufRef& out, const BlockLayout& layout);

// What ring_reduce_scatter tells a caller that works beside it (all_reduce_direct_gather, direct_all_gather.cc).
class ReduceScatterHook {
 public:
  virtual ~ReduceScatterHook() = default;
  // Before iteration `it` sends or waits for anything; iteration `it` handles bytes [it * chunk, (it + 1) * chunk)
  // of every block.
  virtual Status before(size_t it, size_t chunk) = 0;
  // Bytes [offset, offset + len) of this rank's block (offsets within `out`) hold their final sum.
  virtual Status reduced(size_t it, size_t offset, size_t len) = 0;
};
// Reduces `in` (the whole vector) across ranks; this rank's block of the result goes to `out` (block-sized).
Status ring_reduce_scatter(OpContext& ctx, const BufRef& in, const BufRef& out, const BlockLayout& layout,
                           DataType dtype, ReduceOp op, ReduceScatterHook* hook = nullptr);
Status tree_reduce_scatter(OpContext& ctx, const BufRef& in, const BufRef& out, const BlockLayout& layout,
                           DataType dtype, ReduceOp op);

// Root sends `src` (bytes long); every other rank receives into `dst`. Tree = binomial, ring = chain.
Status broadcast_pipelined(OpContext& ctx, Algo shape, int root, const BufRef& src, const BufRef& dst, size_t bytes);

// Reduces `in` (count elements) onto `out` at the root. Tree = binomial, ring = chain.
Status reduce_pipelined(OpContext& ctx, Algo shape, int root, const BufRef& in, const BufRef& out, size_t count,
                        DataType dtype, ReduceOp op);

// Every rank's block p of `in` (block bytes) lands in block r of rank p's `out`; this rank's own block is copied.
// Direct: each chunk of every block goes straight to its destination, receives posted `slots` chunks ahead.
Status direct_all_to_all(OpContext& ctx, const BufRef& in, const BufRef& out, size_t block);

// Parent and children of `rank` in a tree rooted at `root` (binomial for kTree, a chain for kRing); children in
// the order they should be served.
struct TreeLinks {
  int parent = -1;
  std::vector<int> children;
};
TreeLinks tree_links(Algo shape, int rank, int size, int root);

}  // namespace zw::internal
