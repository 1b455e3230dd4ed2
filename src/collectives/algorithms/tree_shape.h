// The folded power-of-two shape of the recursive doubling/halving algorithms.
//
// p = largest power of two ≤ n, rem = n - p. Ranks 2i and 2i+1 for i < rem form pairs; the odd one is
// virtual rank i and stands for both, the even one is folded away. Ranks ≥ 2·rem are virtual rank r - rem.
// Virtual rank v holds blocks [first_block(v), first_block(v+1)).
#pragma once

namespace zw::internal {

struct FoldedShape {
  explicit FoldedShape(int n_) : n(n_) {
    p = 1;
    while (p * 2 <= n) p *= 2;
    rem = n - p;
  }
  bool folded_away(int r) const { return r < 2 * rem && r % 2 == 0; }
  bool has_partner(int r) const { return r < 2 * rem && r % 2 == 1; }
  int virtual_rank(int r) const { return r < 2 * rem ? r / 2 : r - rem; }
  int real_rank(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
  int first_block(int v) const { return v < rem ? 2 * v : v + rem; }

  int n;
  int p;
  int rem;
};

}  // namespace zw::internal
