// kernels/reduce_scalar.cc — the portable kernels: one plain loop per dtype × op over element.h.
//
// Purpose: the reference path (and the only path on CPUs without AVX2), complete for every DataType × ReduceOp and
// for scale(). It is compiled with the project's baseline flags; the compiler may vectorize it with SSE2, which
// does not change results. Integer scale() lives only here: it is called with factor 1 in practice, and its
// truncate-and-saturate rule is not worth a vector version. Non-goals: speed beyond what the compiler gives.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/element.h"
#include "kernels/kernel_table.h"

namespace zw::kernels {
namespace {

template <DataType D, ReduceOp O>
void reduce_loop(void* dst, const void* a, const void* b, size_t count) {
  using S = typename Elem<D>::Storage;
  auto* d = static_cast<S*>(dst);
  const auto* pa = static_cast<const S*>(a);
  const auto* pb = static_cast<const S*>(b);
  for (size_t i = 0; i < count; ++i) d[i] = reduce_elem<D, O>(pa[i], pb[i]);
}

template <DataType D>
void scale_float_loop(void* dst, const void* src, size_t count, double factor) {
  using S = typename Elem<D>::Storage;
  const auto f = static_cast<typename Elem<D>::Math>(factor);
  auto* d = static_cast<S*>(dst);
  const auto* s = static_cast<const S*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = scale_elem<D>(s[i], f);
}

// trunc(x * factor) clamped to T's range (NaN gives 0). long double keeps every i64 value exact.
template <class T>
T scale_int_elem(T x, double factor) {
  using Limits = std::numeric_limits<T>;
  const long double p = std::trunc(static_cast<long double>(x) * static_cast<long double>(factor));
  if (!(p == p)) return 0;
  if (p <= static_cast<long double>(Limits::min())) return Limits::min();
  if (p >= static_cast<long double>(Limits::max())) return Limits::max();
  return static_cast<T>(p);
}

template <class T>
void scale_int_loop(void* dst, const void* src, size_t count, double factor) {
  if (factor == 1.0) {
    if (dst != src) std::memcpy(dst, src, count * sizeof(T));
    return;
  }
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = scale_int_elem(s[i], factor);
}

template <DataType D>
void install_reduce(KernelTable& t) {
  auto& row = t.reduce[index_of(D)];
  row[index_of(ReduceOp::kSum)] = reduce_loop<D, ReduceOp::kSum>;
  row[index_of(ReduceOp::kProd)] = reduce_loop<D, ReduceOp::kProd>;
  row[index_of(ReduceOp::kMin)] = reduce_loop<D, ReduceOp::kMin>;
  row[index_of(ReduceOp::kMax)] = reduce_loop<D, ReduceOp::kMax>;
  row[index_of(ReduceOp::kAvg)] = reduce_loop<D, ReduceOp::kSum>;
}

KernelTable make_scalar_table() {
  KernelTable t;
  install_reduce<DataType::kFloat32>(t);
  install_reduce<DataType::kFloat16>(t);
  install_reduce<DataType::kBFloat16>(t);
  install_reduce<DataType::kFloat64>(t);
  install_reduce<DataType::kInt32>(t);
  install_reduce<DataType::kInt64>(t);
  install_reduce<DataType::kUInt8>(t);
  t.scale[index_of(DataType::kFloat32)] = scale_float_loop<DataType::kFloat32>;
  t.scale[index_of(DataType::kFloat16)] = scale_float_loop<DataType::kFloat16>;
  t.scale[index_of(DataType::kBFloat16)] = scale_float_loop<DataType::kBFloat16>;
  t.scale[index_of(DataType::kFloat64)] = scale_float_loop<DataType::kFloat64>;
  t.scale[index_of(DataType::kInt32)] = scale_int_loop<int32_t>;
  t.scale[index_of(DataType::kInt64)] = scale_int_loop<int64_t>;
  t.scale[index_of(DataType::kUInt8)] = scale_int_loop<uint8_t>;
  return t;
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table = make_scalar_table();
  return table;
}

}  // namespace zw::kernels
