// Block layouts and tree shapes shared by the algorithms.
#include <algorithm>

#include "collectives/algorithms/algorithms.h"

namespace zw::internal {

BlockLayout BlockLayout::equal(int n, size_t block_bytes) {
  BlockLayout l;
  l.offsets_.resize(n + 1);
  for (int b = 0; b <= n; ++b) l.offsets_[b] = static_cast<size_t>(b) * block_bytes;
  return l;
}

BlockLayout BlockLayout::balanced(int n, size_t count, size_t elem) {
  BlockLayout l;
  l.offsets_.resize(n + 1);
  size_t base = count / n, extra = count % n;
  size_t at = 0;
  for (int b = 0; b < n; ++b) {
    l.offsets_[b] = at * elem;
    at += base + (static_cast<size_t>(b) < extra ? 1 : 0);
  }
  l.offsets_[n] = at * elem;
  return l;
}

size_t BlockLayout::max_block() const {
  size_t m = 0;
  for (int b = 0; b < blocks(); ++b) m = std::max(m, bytes(b));
  return m;
}

TreeLinks tree_links(Algo shape, int rank, int size, int root) {
  TreeLinks t;
  int vr = (rank - root + size) % size;
  auto real = [&](int v) { return (v + root) % size; };
  if (shape == Algo::kRing) {
    if (vr > 0) t.parent = real(vr - 1);
    if (vr + 1 < size) t.children.push_back(real(vr + 1));
    return t;
  }
  // Binomial: the parent clears the lowest set bit; children add the lower powers of two, farthest first.
  int low = vr == 0 ? size : (vr & -vr);
  if (vr > 0) t.parent = real(vr - low);
  int top = 1;
  while (top < low && top < size) top <<= 1;
  for (int m = top; m >= 1; m >>= 1)
    if (m < low && vr + m < size) t.children.push_back(real(vr + m));
  return t;
}

}  // namespace zw::internal
