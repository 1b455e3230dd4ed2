// tests/tensor/tensor_test.cc — Tensor views, Buffer ownership and dtype conversion.
#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zw::tensor {
namespace {

TEST(Shape, NumelRowsAndPrinting) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.last(), 4);
  EXPECT_EQ(s.to_string(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_LT((Shape{1, 2, 3, 4, 5}).numel(), 0);  // more than kMaxDims is rejected
}

TEST(Tensor, ViewIntoALargerBufferSharesMemory) {
  std::vector<float> flat(100, 0.0f);
  MemRef buf = MemRef::host(flat.data(), flat.size() * sizeof(float));
  auto w = Tensor::view(buf, 10 * sizeof(float), DataType::kFloat32, Shape{3, 4});
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  w->data<float>()[5] = 7.0f;
  EXPECT_EQ(flat[15], 7.0f);
  EXPECT_EQ(w->bytes(), 48u);
  EXPECT_EQ(w->describe(), "float[3, 4]@host");
}

TEST(Tensor, ViewOutOfBoundsFails) {
  std::vector<float> flat(10);
  MemRef buf = MemRef::host(flat.data(), flat.size() * sizeof(float));
  auto w = Tensor::view(buf, 8, DataType::kFloat32, Shape{3, 3});
  EXPECT_EQ(w.status().code(), Code::kInvalidArgument);
}

TEST(Tensor, ReshapeAndNarrow) {
  auto t = OwnedTensor::zeros(DataType::kFloat32, Shape{4, 6});
  ASSERT_TRUE(t.ok());
  auto r = t->tensor().reshape(Shape{2, 12});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data<float>(), t->data<float>());
  EXPECT_FALSE(t->tensor().reshape(Shape{5, 5}).ok());
  auto rows = t->tensor().narrow(1, 2);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->data<float>(), t->data<float>() + 6);
  EXPECT_EQ(rows->shape, (Shape{2, 6}));
  EXPECT_FALSE(t->tensor().narrow(3, 2).ok());
}

TEST(Buffer, AlignedAndZeroed) {
  auto b = Buffer::allocate_host(1000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->ref().ptr) % 64, 0u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(b->ref().data()[i], std::byte{0});
}

TEST(Convert, Bf16AndF16RoundTrip) {
  std::vector<float> src = {1.0f, -2.5f, 0.1f, 65504.0f, 3.14159265f};
  for (DataType dt : {DataType::kBFloat16, DataType::kFloat16}) {
    auto half = OwnedTensor::zeros(dt, Shape{5});
    auto back = OwnedTensor::zeros(DataType::kFloat32, Shape{5});
    ASSERT_TRUE(half.ok() && back.ok());
    ASSERT_TRUE(convert(Tensor::host(src.data(), Shape{5}), *half).ok());
    ASSERT_TRUE(convert(*half, *back).ok());
    const double rel = dt == DataType::kBFloat16 ? 1.0 / 256 : 1.0 / 2048;  // half an ulp of 8 / 11 bits
    for (int i = 0; i < 5; ++i) {
      if (dt == DataType::kBFloat16 && i == 3) continue;  // 65504 is exact only in f16
      EXPECT_NEAR(back->data<float>()[i], src[i], rel * std::fabs(src[i])) << dtype_name(dt) << " " << i;
    }
    EXPECT_EQ(back->data<float>()[0], 1.0f);
    EXPECT_EQ(back->data<float>()[1], -2.5f);
  }
}

TEST(Convert, RejectsIntegerAndMismatchedCounts) {
  std::vector<float> a(4);
  std::vector<int32_t> ids(4);
  EXPECT_EQ(convert(Tensor::host(a.data(), Shape{4}), Tensor::host(ids.data(), Shape{4})).code(), Code::kUnsupported);
  EXPECT_EQ(convert(Tensor::host(a.data(), Shape{4}), Tensor::host(a.data(), Shape{3})).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace zw::tensor
