// Tree shapes shared by the algorithms (block layouts are closed forms in algorithms.h).
#include <algorithm>

#include "collectives/algorithms/algorithms.h"

namespace zw::internal {

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
