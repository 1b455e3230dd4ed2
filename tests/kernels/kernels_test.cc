// tests/kernels/kernels_test.cc — randomized bit-exact tests of reduce(), scale() and copy() on every ISA.
//
// Purpose: for every ISA this CPU has × every dtype × every supported op × counts that hit the unrolled body, the
// single-vector loop and the scalar tail, compare reduce() with the independent reference in reference.h, out of
// place and in place (dst == a, dst == b), aligned and misaligned by one element, with guard bands checked.
// Inputs mix moderate values (whose f16/bf16 sums round often, ties included), the full exponent range
// (subnormals, overflow) and specials (±0, ±inf, NaN, signalling NaN, extremes). Non-goals: hand-picked
// semantic edge cases (kernels_edge_test.cc).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/reference.h"
#include "kernels/test_util.h"

namespace zw::kernels {
namespace {

using testing::Buf;
using testing::context;
using testing::IsaScope;
using testing::same_elems;

constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 1000, 4099};

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// A random float of a format with `mant_bits` mantissa bits and `exp_max` the all-ones exponent: 1/64 specials,
// 3/4 of the rest near 1.0 (exponent bias ± `spread`), the others anywhere in the finite range.
uint64_t random_float_bits(std::mt19937_64& rng, int mant_bits, uint64_t exp_max, int spread) {
  const uint64_t r = rng();
  const uint64_t r2 = rng();
  const uint64_t sign = (r >> 63) << (mant_bits + std::bit_width(exp_max));
  const uint64_t mant = (r >> 8) & ((uint64_t{1} << mant_bits) - 1);
  const uint64_t inf = exp_max << mant_bits;
  if (r % 64 == 0) {
    const uint64_t specials[] = {inf | (uint64_t{1} << (mant_bits - 1)),  // quiet NaN
                                 inf | 1,                                 // signalling NaN
                                 inf,
                                 0,
                                 inf - 1,  // inf, zero, largest finite
                                 1,
                                 uint64_t{1} << mant_bits,
                                 inf | mant | 1};
    return sign | specials[(r >> 6) % 8];
  }
  const uint64_t bias = exp_max / 2;
  const uint64_t exp = r2 % 4 != 0 ? bias - spread + (r2 >> 8) % (2 * spread + 1) : (r2 >> 16) % exp_max;
  return sign | (exp << mant_bits) | mant;
}

void fill_random(DataType dt, uint8_t* p, size_t count, std::mt19937_64& rng) {
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = p + i * dtype_size(dt);
    switch (dt) {
      case DataType::kFloat32:
        put(e, static_cast<uint32_t>(random_float_bits(rng, 23, 0xff, 20)));
        break;
      case DataType::kFloat64:
        put(e, random_float_bits(rng, 52, 0x7ff, 20));
        break;
      case DataType::kFloat16:
        put(e, static_cast<uint16_t>(random_float_bits(rng, 10, 0x1f, 5)));
        break;
      case DataType::kBFloat16:
        put(e, static_cast<uint16_t>(random_float_bits(rng, 7, 0xff, 8)));
        break;
      default: {
        const uint64_t r = rng();
        std::memcpy(e, &r, dtype_size(dt));
      }
    }
  }
}

void reference_reduce(DataType dt, ReduceOp op, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  switch (dt) {
    case DataType::kFloat32:
      return put(out, static_cast<float>(ref::float_op(op, load<float>(a), load<float>(b))));
    case DataType::kFloat64:
      return put(out, ref::float_op(op, load<double>(a), load<double>(b)));
    case DataType::kFloat16:
      return put(out, ref::f16_encode(
                          ref::float_op(op, ref::f16_decode(load<uint16_t>(a)), ref::f16_decode(load<uint16_t>(b)))));
    case DataType::kBFloat16:
      return put(out, ref::bf16_encode(
                          ref::float_op(op, ref::bf16_decode(load<uint16_t>(a)), ref::bf16_decode(load<uint16_t>(b)))));
    case DataType::kInt32:
      return put(out, ref::int_op(op, load<int32_t>(a), load<int32_t>(b)));
    case DataType::kInt64:
      return put(out, ref::int_op(op, load<int64_t>(a), load<int64_t>(b)));
    case DataType::kUInt8:
      return put(out, ref::int_op(op, load<uint8_t>(a), load<uint8_t>(b)));
  }
}

struct Case {
  Isa isa;
  DataType dtype;
  ReduceOp op;
};

std::vector<Case> reduce_cases() {
  std::vector<Case> out;
  for (Isa isa : testing::supported_isas()) {
    for (DataType dt : testing::all_dtypes()) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
        if (reduce_op_supported(dt, op)) out.push_back({isa, dt, op});
      }
    }
  }
  return out;
}

enum class Alias { kNone, kDstIsA, kDstIsB };

class ReduceSweep : public ::testing::TestWithParam<Case> {};

TEST_P(ReduceSweep, MatchesReferenceBitExactly) {
  const Case c = GetParam();
  IsaScope isa(c.isa);
  ASSERT_EQ(active_isa(), c.isa);
  const size_t es = dtype_size(c.dtype);
  std::mt19937_64 rng(1234 + 100 * static_cast<int>(c.dtype) + static_cast<int>(c.op));
  for (size_t count : kCounts) {
    for (size_t offset : {0, 1}) {
      for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB}) {
        Buf a(count, es, offset), b(count, es, offset), d(count, es, offset);
        fill_random(c.dtype, a.data(), count, rng);
        fill_random(c.dtype, b.data(), count, rng);
        std::vector<uint8_t> want(count * es + 1);
        for (size_t i = 0; i < count; ++i) {
          reference_reduce(c.dtype, c.op, a.data() + i * es, b.data() + i * es, &want[i * es]);
        }
        Buf& dst = alias == Alias::kDstIsA ? a : alias == Alias::kDstIsB ? b : d;
        reduce(c.dtype, c.op, dst.data(), a.data(), b.data(), count);
        const std::string where = context(c.isa, c.dtype, reduce_op_name(c.op), count, offset) +
                                  " alias=" + std::to_string(static_cast<int>(alias));
        ASSERT_TRUE(same_elems(c.dtype, dst.data(), want.data(), count)) << where;
        ASSERT_TRUE(a.guards_intact() && b.guards_intact() && d.guards_intact()) << where;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, ReduceSweep, ::testing::ValuesIn(reduce_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(isa_name(info.param.isa)) + "_" + dtype_name(info.param.dtype) + "_" +
                                  reduce_op_name(info.param.op);
                         });

// trunc(x * factor) saturated to T, for the integer scale reference.
template <class T>
T int_scale_ref(T x, double factor) {
  if (factor == 1.0) return x;
  const long double p = std::trunc(static_cast<long double>(x) * factor);
  if (p <= static_cast<long double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (p >= static_cast<long double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(p);
}

void reference_scale(DataType dt, const uint8_t* x, double factor, uint8_t* out) {
  const double ff = static_cast<float>(factor);  // f32/f16/bf16 scale by the factor rounded to float
  switch (dt) {
    case DataType::kFloat32:
      return put(out, static_cast<float>(load<float>(x) * ff));
    case DataType::kFloat64:
      return put(out, load<double>(x) * factor);
    case DataType::kFloat16:  // the exact double product rounded to f32, then to f16, as documented
      return put(out, ref::f16_encode(static_cast<float>(ref::f16_decode(load<uint16_t>(x)) * ff)));
    case DataType::kBFloat16:
      return put(out, ref::bf16_encode(static_cast<float>(ref::bf16_decode(load<uint16_t>(x)) * ff)));
    case DataType::kInt32:
      return put(out, int_scale_ref(load<int32_t>(x), factor));
    case DataType::kInt64:
      return put(out, int_scale_ref(load<int64_t>(x), factor));
    case DataType::kUInt8:
      return put(out, int_scale_ref(load<uint8_t>(x), factor));
  }
}

struct ScaleCase {
  Isa isa;
  DataType dtype;
};

class ScaleSweep : public ::testing::TestWithParam<ScaleCase> {};

TEST_P(ScaleSweep, MatchesReferenceBitExactly) {
  const ScaleCase c = GetParam();
  IsaScope isa(c.isa);
  const size_t es = dtype_size(c.dtype);
  std::mt19937_64 rng(99 + static_cast<int>(c.dtype));
  for (double factor : {1.0, 0.5, 1.0 / 3.0, -2.5, 0.125, 1e-3}) {
    for (size_t count : kCounts) {
      for (size_t offset : {0, 1}) {
        for (bool in_place : {false, true}) {
          Buf x(count, es, offset), d(count, es, offset);
          fill_random(c.dtype, x.data(), count, rng);
          std::vector<uint8_t> want(count * es + 1);
          for (size_t i = 0; i < count; ++i) reference_scale(c.dtype, x.data() + i * es, factor, &want[i * es]);
          Buf& dst = in_place ? x : d;
          scale(c.dtype, dst.data(), x.data(), count, factor);
          const std::string where = context(c.isa, c.dtype, "scale", count, offset) +
                                    " factor=" + std::to_string(factor) + (in_place ? " in-place" : "");
          ASSERT_TRUE(same_elems(c.dtype, dst.data(), want.data(), count)) << where;
          ASSERT_TRUE(x.guards_intact() && d.guards_intact()) << where;
        }
      }
    }
  }
}

std::vector<ScaleCase> scale_cases() {
  std::vector<ScaleCase> out;
  for (Isa isa : testing::supported_isas()) {
    for (DataType dt : testing::all_dtypes()) out.push_back({isa, dt});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllIsas, ScaleSweep, ::testing::ValuesIn(scale_cases()),
                         [](const ::testing::TestParamInfo<ScaleCase>& info) {
                           return std::string(isa_name(info.param.isa)) + "_" + dtype_name(info.param.dtype);
                         });

TEST(Copy, EverySizeAndAlignmentMatchesMemcpy) {
  std::mt19937_64 rng(7);  // NOLINT(cert-msc32-c,cert-msc51-cpp): reproducible inputs
  const size_t sizes[] = {
      0, 1, 63, 64, 65, 127, 128, 129, 191, 4099, size_t{1} << 20, (size_t{1} << 20) + 77, (size_t{3} << 20) + 5};
  for (size_t bytes : sizes) {
    for (size_t dst_off : {0, 1, 7, 33}) {
      for (size_t src_off : {0, 3}) {
        for (bool streaming : {false, true}) {
          Buf src(bytes, 1, src_off), dst(bytes, 1, dst_off);
          for (size_t i = 0; i < bytes; ++i) src.data()[i] = static_cast<uint8_t>(rng());
          if (streaming) {
            copy_nontemporal(dst.data(), src.data(), bytes);
          } else {
            copy(dst.data(), src.data(), bytes);
          }
          const std::string where = "bytes=" + std::to_string(bytes) + " dst_off=" + std::to_string(dst_off) +
                                    " src_off=" + std::to_string(src_off) + (streaming ? " streaming" : "");
          ASSERT_EQ(std::memcmp(dst.data(), src.data(), bytes), 0) << where;
          ASSERT_TRUE(dst.guards_intact()) << where;
        }
      }
    }
  }
}

TEST(Copy, AboveTheStreamingThresholdMatchesMemcpy) {
  const size_t bytes = kNonTemporalCopyMinBytes + 77;
  Buf src(bytes, 1, 3), dst(bytes, 1, 1);
  for (size_t i = 0; i < bytes; ++i) src.data()[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  copy(dst.data(), src.data(), bytes);
  ASSERT_EQ(std::memcmp(dst.data(), src.data(), bytes), 0);
  ASSERT_TRUE(dst.guards_intact());
}

}  // namespace
}  // namespace zw::kernels
