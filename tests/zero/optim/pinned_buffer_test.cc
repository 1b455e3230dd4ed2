// tests/zero/optim/pinned_buffer_test.cc — alloc_pinned_hugepage: alignment, zero fill, sizes, move semantics.
#include "zero/optim/pinned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace zw::zero {
namespace {

TEST(PinnedBuffer, AlignedZeroedAndWritable) {
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{(2u << 20) + 1}, size_t{64u << 20}}) {
    auto buf = alloc_pinned_hugepage(bytes);
    ASSERT_TRUE(buf.ok()) << buf.status().to_string();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % (2u << 20), 0u);
    EXPECT_EQ(buf->size(), bytes);
    EXPECT_GE(buf->mapped_bytes(), bytes);
    EXPECT_EQ(buf->mapped_bytes() % (2u << 20), 0u);
    const auto* p = buf->as<unsigned char>();
    for (size_t i = 0; i < bytes; i += 997) ASSERT_EQ(p[i], 0) << i;
    buf->as<unsigned char>()[bytes - 1] = 0x5a;
    EXPECT_EQ(p[bytes - 1], 0x5a);
  }
}

TEST(PinnedBuffer, EmptyAndMove) {
  auto empty = alloc_pinned_hugepage(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  auto a = alloc_pinned_hugepage(1 << 20);
  ASSERT_TRUE(a.ok());
  void* ptr = a->data();
  PinnedBuffer b = std::move(a.value());
  EXPECT_EQ(b.data(), ptr);
  EXPECT_EQ(a->data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  PinnedBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), ptr);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace zw::zero
