// BlockLayout (collectives/algorithms/algorithms.h): its closed forms give the same blocks as laying them out one by
// one — equal blocks, and count elements split as evenly as whole elements allow (the first count % n one larger).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "collectives/algorithms/algorithms.h"

namespace zw::internal {
namespace {

// The layout's blocks against offsets accumulated block by block.
void expect_blocks(const BlockLayout& layout, const std::vector<size_t>& sizes) {
  ASSERT_EQ(layout.blocks(), int(sizes.size()));
  size_t at = 0, largest = 0;
  for (int b = 0; b < layout.blocks(); ++b) {
    SCOPED_TRACE("block " + std::to_string(b));
    EXPECT_EQ(layout.offset(b), at);
    EXPECT_EQ(layout.bytes(b), sizes[size_t(b)]);
    at += sizes[size_t(b)];
    largest = std::max(largest, sizes[size_t(b)]);
  }
  EXPECT_EQ(layout.total(), at);
  EXPECT_EQ(layout.max_block(), largest);
}

TEST(BlockLayout, EqualBlocks) {
  for (int n : {1, 2, 3, 7, 64})
    for (size_t block : {size_t{0}, size_t{1}, size_t{4096}, size_t{3} << 30}) {
      SCOPED_TRACE("n " + std::to_string(n) + " block " + std::to_string(block));
      expect_blocks(BlockLayout::equal(n, block), std::vector<size_t>(size_t(n), block));
    }
}

TEST(BlockLayout, BalancedSplitsWholeElementsFirstBlocksLarger) {
  for (int n : {1, 2, 3, 5, 8})
    for (size_t count : {size_t{0}, size_t{1}, size_t{4}, size_t{7}, size_t{1000003}})
      for (size_t elem : {size_t{1}, size_t{2}, size_t{8}}) {
        SCOPED_TRACE("n " + std::to_string(n) + " count " + std::to_string(count) + " elem " + std::to_string(elem));
        std::vector<size_t> sizes;
        for (int b = 0; b < n; ++b) sizes.push_back((count / size_t(n) + (size_t(b) < count % size_t(n))) * elem);
        expect_blocks(BlockLayout::balanced(n, count, elem), sizes);
      }
}

TEST(BlockLayout, SlicesCoverEachBlockOnceAndStopAtItsEnd) {
  const BlockLayout layout = BlockLayout::balanced(3, 10, 4);  // blocks of 16, 12, 12 bytes
  for (int b = 0; b < 3; ++b) {
    size_t covered = 0, len = 0;
    for (size_t it = 0; it < 4; ++it) {
      const size_t at = layout.slice(b, it, 5, &len);
      if (len > 0) EXPECT_EQ(at, layout.offset(b) + covered);
      covered += len;
    }
    EXPECT_EQ(covered, layout.bytes(b));
  }
}

}  // namespace
}  // namespace zw::internal
