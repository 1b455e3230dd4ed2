// tests/kernels/kernels_edge_test.cc — the documented semantics of the kernels, case by case, on every ISA.
//
// Purpose: pin down with hand-computed bit patterns what the randomized sweep only samples: IEEE minimum/maximum
// (NaN propagation, -0 < +0), f16/bf16 round-to-nearest-even on exact ties (including a carry into the
// exponent and ties in the subnormal range), NaN never turning into infinity when rounding, overflow to
// infinity, bf16 subnormals kept, integer wrap-around and signedness, avg == sum, and the ISA selector API.
// Each check fills whole arrays so that the unrolled body, the single-vector loop and the scalar tail all run.
// Non-goals: random coverage (kernels_test.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/test_util.h"

namespace zw::kernels {
namespace {

using testing::elem_bits;
using testing::elem_is_nan;
using testing::IsaScope;

// 4 unrolled AVX-512 u16 vectors (64 elements) twice, one single vector and a tail of 6.
constexpr size_t kN = 150;

std::vector<uint8_t> repeat(DataType dt, uint64_t bits, size_t offset) {
  const size_t es = dtype_size(dt);
  std::vector<uint8_t> v((kN + offset) * es);
  for (size_t i = 0; i < kN + offset; ++i) std::memcpy(&v[i * es], &bits, es);
  return v;
}

// Reduces arrays filled with a_bits and b_bits (misaligned by one element) and returns the kN results' bits.
std::vector<uint64_t> run(DataType dt, ReduceOp op, uint64_t a_bits, uint64_t b_bits) {
  const size_t es = dtype_size(dt);
  auto a = repeat(dt, a_bits, 1);
  auto b = repeat(dt, b_bits, 1);
  std::vector<uint8_t> d((kN + 1) * es, 0xa5);
  reduce(dt, op, &d[es], &a[es], &b[es], kN);
  std::vector<uint64_t> out(kN);
  for (size_t i = 0; i < kN; ++i) out[i] = elem_bits(dt, &d[(i + 1) * es]);
  return out;
}

class EdgeTest : public ::testing::TestWithParam<Isa> {
 protected:
  void expect_bits(DataType dt, ReduceOp op, uint64_t a, uint64_t b, uint64_t want) {
    for (uint64_t got : run(dt, op, a, b)) {
      ASSERT_EQ(got, want) << std::hex << dtype_name(dt) << " " << reduce_op_name(op) << "(0x" << a << ", 0x" << b
                           << ") on " << isa_name(GetParam());
    }
  }
  void expect_nan(DataType dt, ReduceOp op, uint64_t a, uint64_t b) {
    for (uint64_t got : run(dt, op, a, b)) {
      ASSERT_TRUE(elem_is_nan(dt, reinterpret_cast<const uint8_t*>(&got)))
          << std::hex << dtype_name(dt) << " " << reduce_op_name(op) << "(0x" << a << ", 0x" << b << ") gave 0x" << got
          << " on " << isa_name(GetParam());
    }
  }
  IsaScope isa_{GetParam()};
};

struct FloatCodes {
  DataType dtype;
  uint64_t pos_zero, neg_zero, one, two, qnan, snan;
};

const FloatCodes kFloats[] = {
    {DataType::kFloat32, 0, 0x80000000u, 0x3f800000u, 0x40000000u, 0x7fc00000u, 0x7f800001u},
    {DataType::kFloat64, 0, 0x8000000000000000u, 0x3ff0000000000000u, 0x4000000000000000u, 0x7ff8000000000000u,
     0x7ff0000000000001u},
    {DataType::kFloat16, 0, 0x8000u, 0x3c00u, 0x4000u, 0x7e00u, 0x7c01u},
    {DataType::kBFloat16, 0, 0x8000u, 0x3f80u, 0x4000u, 0x7fc0u, 0x7f81u},
};

TEST_P(EdgeTest, MinMaxOrderSignedZerosAndPropagateNaN) {
  for (const FloatCodes& f : kFloats) {
    expect_bits(f.dtype, ReduceOp::kMax, f.neg_zero, f.pos_zero, f.pos_zero);
    expect_bits(f.dtype, ReduceOp::kMax, f.pos_zero, f.neg_zero, f.pos_zero);
    expect_bits(f.dtype, ReduceOp::kMin, f.neg_zero, f.pos_zero, f.neg_zero);
    expect_bits(f.dtype, ReduceOp::kMin, f.pos_zero, f.neg_zero, f.neg_zero);
    expect_bits(f.dtype, ReduceOp::kMax, f.one, f.two, f.two);
    expect_bits(f.dtype, ReduceOp::kMin, f.two, f.one, f.one);
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kSum, ReduceOp::kProd}) {
      for (uint64_t nan : {f.qnan, f.snan, f.qnan | f.neg_zero}) {
        expect_nan(f.dtype, op, nan, f.one);
        expect_nan(f.dtype, op, f.one, nan);
        expect_nan(f.dtype, op, nan, f.qnan);
      }
    }
  }
}

TEST_P(EdgeTest, MinMaxNaNAtScatteredPositions) {
  for (const FloatCodes& f : kFloats) {
    const size_t es = dtype_size(f.dtype);
    std::vector<uint8_t> a(kN * es), b(kN * es), d(kN * es);
    for (size_t i = 0; i < kN; ++i) {
      const uint64_t av = i % 3 == 0 ? f.qnan : f.one;
      const uint64_t bv = i % 5 == 0 ? f.snan : f.two;
      std::memcpy(&a[i * es], &av, es);
      std::memcpy(&b[i * es], &bv, es);
    }
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      reduce(f.dtype, op, d.data(), a.data(), b.data(), kN);
      for (size_t i = 0; i < kN; ++i) {
        const bool nan = i % 3 == 0 || i % 5 == 0;
        const uint64_t want = op == ReduceOp::kMin ? f.one : f.two;
        if (nan) {
          EXPECT_TRUE(elem_is_nan(f.dtype, &d[i * es])) << dtype_name(f.dtype) << " element " << i;
        } else {
          EXPECT_EQ(elem_bits(f.dtype, &d[i * es]), want) << dtype_name(f.dtype) << " element " << i;
        }
      }
    }
  }
}

TEST_P(EdgeTest, HalfPrecisionRoundsTiesToEven) {
  const auto f16 = DataType::kFloat16;
  expect_bits(f16, ReduceOp::kSum, 0x3c00, 0x1000, 0x3c00);   // 1 + 2^-11: tie, 1.0 is even
  expect_bits(f16, ReduceOp::kSum, 0x3c01, 0x1000, 0x3c02);   // (1 + 2^-10) + 2^-11: tie, rounds up to even
  expect_bits(f16, ReduceOp::kSum, 0xbc01, 0x9000, 0xbc02);   // the same, negative
  expect_bits(f16, ReduceOp::kSum, 0x3bff, 0x0c00, 0x3c00);   // (1 - 2^-11) + 2^-12: tie, carries into the exponent
  expect_bits(f16, ReduceOp::kProd, 0x0001, 0x3800, 0x0000);  // 2^-24 * 0.5: subnormal tie down to even 0
  expect_bits(f16, ReduceOp::kProd, 0x0003, 0x3800, 0x0002);  // 3 * 2^-25: subnormal tie up to even 2
  expect_bits(f16, ReduceOp::kProd, 0x0400, 0x3800, 0x0200);  // smallest normal * 0.5: exact subnormal
  expect_bits(f16, ReduceOp::kSum, 0x7bff, 0x7bff, 0x7c00);   // overflow to +inf
  expect_bits(f16, ReduceOp::kProd, 0x5c00, 0xdc00, 0xfc00);  // 256 * -256: overflow to -inf
  expect_bits(f16, ReduceOp::kSum, 0x7bff, 0x4b80, 0x7bff);   // 65504 + 15: below the 65520 tie, stays finite
  expect_bits(f16, ReduceOp::kSum, 0x7bff, 0x4c00, 0x7c00);   // 65504 + 16: the tie at 65520 rounds to inf
  expect_bits(f16, ReduceOp::kSum, 0x0001, 0x0001, 0x0002);   // subnormals add exactly
}

TEST_P(EdgeTest, BFloat16RoundsTiesToEvenAndKeepsSubnormals) {
  const auto bf16 = DataType::kBFloat16;
  expect_bits(bf16, ReduceOp::kSum, 0x3f80, 0x3b80, 0x3f80);   // 1 + 2^-8: tie, 1.0 is even
  expect_bits(bf16, ReduceOp::kSum, 0x3f81, 0x3b80, 0x3f82);   // (1 + 2^-7) + 2^-8: tie, rounds up to even
  expect_bits(bf16, ReduceOp::kSum, 0xbf81, 0xbb80, 0xbf82);   // the same, negative
  expect_bits(bf16, ReduceOp::kSum, 0x3f7f, 0x3b00, 0x3f80);   // (1 - 2^-8) + 2^-9: tie, carries into the exponent
  expect_bits(bf16, ReduceOp::kSum, 0x0001, 0x0001, 0x0002);   // subnormals are kept (VCVTNEPS2BF16 gives 0)
  expect_bits(bf16, ReduceOp::kProd, 0x0080, 0x3f00, 0x0040);  // smallest normal * 0.5: exact subnormal
  expect_bits(bf16, ReduceOp::kSum, 0x7f7f, 0x7f7f, 0x7f80);   // overflow to +inf
  expect_nan(bf16, ReduceOp::kSum, 0x7fff, 0x0000);            // all-ones payload: rounding must not carry into inf
  expect_nan(bf16, ReduceOp::kSum, 0xffff, 0x3f80);
  expect_nan(bf16, ReduceOp::kMax, 0x7f81, 0x0000);  // signalling NaN in, quiet NaN out
}

TEST_P(EdgeTest, IntegersWrapAndCompareWithTheirSignedness) {
  const uint64_t i32_max = 0x7fffffff, i32_min = 0x80000000, minus1_32 = 0xffffffff;
  expect_bits(DataType::kInt32, ReduceOp::kSum, i32_max, 1, i32_min);
  expect_bits(DataType::kInt32, ReduceOp::kProd, 0x10000, 0x10000, 0);
  expect_bits(DataType::kInt32, ReduceOp::kProd, minus1_32, 7, 0xfffffff9);
  expect_bits(DataType::kInt32, ReduceOp::kMin, minus1_32, 1, minus1_32);
  expect_bits(DataType::kInt32, ReduceOp::kMax, minus1_32, 1, 1);
  const uint64_t i64_max = 0x7fffffffffffffff, minus1_64 = ~uint64_t{0};
  expect_bits(DataType::kInt64, ReduceOp::kSum, i64_max, 1, i64_max + 1);
  expect_bits(DataType::kInt64, ReduceOp::kProd, 0x100000001, 0x100000001, 0x200000001);  // (2^32+1)^2 mod 2^64
  expect_bits(DataType::kInt64, ReduceOp::kProd, minus1_64, 0x123456789, ~uint64_t{0x123456789} + 1);
  expect_bits(DataType::kInt64, ReduceOp::kMin, minus1_64, 1, minus1_64);
  expect_bits(DataType::kInt64, ReduceOp::kMax, 0x8000000000000000, minus1_64, minus1_64);
  expect_bits(DataType::kUInt8, ReduceOp::kSum, 200, 100, 44);
  expect_bits(DataType::kUInt8, ReduceOp::kProd, 16, 16, 0);
  expect_bits(DataType::kUInt8, ReduceOp::kProd, 255, 3, 253);
  expect_bits(DataType::kUInt8, ReduceOp::kMin, 200, 100, 100);  // unsigned: 200 > 100
  expect_bits(DataType::kUInt8, ReduceOp::kMax, 200, 100, 200);
}

TEST_P(EdgeTest, AvgComputesTheSum) {
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
    EXPECT_EQ(run(dt, ReduceOp::kAvg, 0x3c00, 0x3c01), run(dt, ReduceOp::kSum, 0x3c00, 0x3c01)) << dtype_name(dt);
  }
}

TEST_P(EdgeTest, IntegerScaleTruncatesAndSaturates) {
  const int32_t src[] = {7, -7, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 0};
  int32_t out[5];
  scale(DataType::kInt32, out, src, 5, 0.5);
  EXPECT_EQ(std::vector<int32_t>(out, out + 5), (std::vector<int32_t>{3, -3, 1073741823, -1073741824, 0}));
  scale(DataType::kInt32, out, src, 5, 2.0);
  EXPECT_EQ(out[2], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(out[3], std::numeric_limits<int32_t>::min());
  const int64_t big[] = {(int64_t{1} << 62) + 1, -((int64_t{1} << 62) + 3)};  // not exact in double
  int64_t big_out[2];
  scale(DataType::kInt64, big_out, big, 2, 1.0);
  EXPECT_EQ(big_out[0], big[0]);
  EXPECT_EQ(big_out[1], big[1]);
  const uint8_t bytes[] = {200, 5};
  uint8_t bytes_out[2];
  scale(DataType::kUInt8, bytes_out, bytes, 2, 2.0);
  EXPECT_EQ(bytes_out[0], 255);
  scale(DataType::kUInt8, bytes_out, bytes, 2, -1.0);
  EXPECT_EQ(bytes_out[1], 0);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, EdgeTest, ::testing::ValuesIn(testing::supported_isas()),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });

TEST(IsaSelector, NamesDefaultsAndClamping) {
  EXPECT_STREQ(isa_name(Isa::kScalar), "scalar");
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_EQ(active_isa(), best_isa());
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  EXPECT_TRUE(isa_supported(best_isa()));
  {
    IsaScope forced(Isa::kScalar);
    EXPECT_EQ(active_isa(), Isa::kScalar);
  }
  EXPECT_EQ(active_isa(), best_isa());
  if (!isa_supported(Isa::kAvx512)) {
    IsaScope forced(Isa::kAvx512);
    EXPECT_EQ(active_isa(), best_isa()) << "an unsupported ISA must clamp to the best supported one";
  }
  std::printf("best ISA on this CPU: %s\n", isa_name(best_isa()));
}

}  // namespace
}  // namespace zw::kernels
