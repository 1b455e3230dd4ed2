// tests/tensor/cuda/layernorm_test.cc — layernorm forward/backward and the fused residual + layernorm on CUDA
// against the CPU ops, per dtype; determinism of the backward.
//
// Inputs are drawn already rounded to the dtype, so both paths see the same values; the CPU computes in f32.
// Tolerances (relative ‖got − want‖ / ‖want‖, cuda_test_util.h):
//  - f32 outputs and everything f32 (mean, rstd, dweight, dbias, in every dtype: identical inputs, so only the
//    summation order differs, ~√C·2⁻²⁴ ≲ 1e-6): 1e-5;
//  - bf16 outputs 5e-3, f16 outputs 1e-3: one rounding to the dtype (≤ 2⁻⁹ resp. 2⁻¹² relative per element) on
//    top of the f32 differences.
// The one-pass backward (16-bit, C <= 1024, every gradient) is checked against the two-kernel path bit for bit.
// Shapes: C = 24 (register path, one pack per lane), C = 1 and C = 13 (the general path), C = 2048 (the largest
// register-resident row), C = 3000 (general path above it), 2048 rows of C = 768 (GPT-2 small), and a misaligned
// view (general path with an aligned C).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

constexpr double kF32Tol = 1e-5;

struct RowsC {
  int64_t rows;
  int64_t C;
};
const RowsC kShapes[] = {{7, 24}, {5, 1}, {3, 13}, {4, 2048}, {3, 3000}, {2048, 768}};

// Host inputs of one layernorm (already rounded to the dtype) and the CPU forward's results.
struct LnCase {
  Shape shape, cshape, stats;
  std::vector<float> x, w, b, out, mean, rstd;
};

LnCase make_case(RowsC rc, DataType d, std::mt19937_64& rng) {
  LnCase k;
  k.shape = Shape{rc.rows, rc.C};
  k.cshape = Shape{rc.C};
  k.stats = Shape{rc.rows};
  k.x = random_values(size_t(rc.rows * rc.C), rng, d, -1.0f, 2.0f);  // a non-zero mean
  k.w = random_values(size_t(rc.C), rng, d, 0.5f, 1.5f);
  k.b = random_values(size_t(rc.C), rng, d);
  k.out.resize(k.x.size());
  k.mean.resize(size_t(rc.rows));
  k.rstd.resize(size_t(rc.rows));
  EXPECT_TRUE(layernorm_forward(host_view(k.out, k.shape), host_view(k.mean, k.stats), host_view(k.rstd, k.stats),
                                host_view(k.x, k.shape), host_view(k.w, k.cshape), host_view(k.b, k.cshape))
                  .ok());
  return k;
}

// The CPU backward of k for dy into dx, dw, db (added to them unless init is kOverwrite); whether it succeeded.
bool cpu_backward(LnCase& k, std::vector<float>& dy, std::vector<float>& dx, std::vector<float>& dw,
                  std::vector<float>& db, GradInit init = GradInit::kAccumulate) {
  return layernorm_backward(host_view(dx, k.shape), host_view(dw, k.cshape), host_view(db, k.cshape),
                            host_view(dy, k.shape), host_view(k.x, k.shape), host_view(k.w, k.cshape),
                            host_view(k.mean, k.stats), host_view(k.rstd, k.stats), init)
      .ok();
}

// The device inputs of one backward of k for dy (x, w and dout in the dtype, the saved statistics in f32).
struct DeviceBackward {
  OwnedTensor x, w, dout, mean, rstd;
  DeviceBackward(const LnCase& k, const std::vector<float>& dy, DataType d)
      : x(upload(k.x, d, k.shape)),
        w(upload(k.w, d, k.cshape)),
        dout(upload(dy, d, k.shape)),
        mean(upload(k.mean, DataType::kFloat32, k.stats)),
        rstd(upload(k.rstd, DataType::kFloat32, k.stats)) {}
  // layernorm_backward into the gradients given (undefined ones skipped).
  Status run(const Tensor& dinp, const Tensor& dw, const Tensor& db, GradInit init = GradInit::kAccumulate) const {
    return layernorm_backward(dinp, dw, db, dout, x, w, mean, rstd, init);
  }
};

std::string case_name(RowsC rc, GradInit init) {
  return "rows " + std::to_string(rc.rows) + " C " + std::to_string(rc.C) +
         (init == GradInit::kAccumulate ? " accumulate" : " overwrite");
}

class CudaLayerNorm : public CudaDtypeTest {};

TEST_P(CudaLayerNorm, ForwardMatchesCpu) {
  const DataType d = GetParam();
  for (const RowsC& rc : kShapes) {
    SCOPED_TRACE("rows " + std::to_string(rc.rows) + " C " + std::to_string(rc.C));
    LnCase k = make_case(rc, d, rng_);
    OwnedTensor x = upload(k.x, d, k.shape), w = upload(k.w, d, k.cshape), b = upload(k.b, d, k.cshape);
    OwnedTensor out = poisoned(d, k.shape);
    OwnedTensor mean = poisoned(DataType::kFloat32, k.stats), rstd = poisoned(DataType::kFloat32, k.stats);
    ASSERT_TRUE(layernorm_forward(out, mean, rstd, x, w, b).ok());
    EXPECT_TRUE(close(download(out), k.out, out_tol(d)));
    EXPECT_TRUE(close(download(mean), k.mean, kF32Tol));
    EXPECT_TRUE(close(download(rstd), k.rstd, kF32Tol));
  }
}

// res = a + b rounded to the dtype (bit for bit what residual_forward stores), then layernorm of those values.
TEST_P(CudaLayerNorm, ResidualForwardMatchesCpu) {
  const DataType d = GetParam();
  for (const RowsC& rc : kShapes) {
    SCOPED_TRACE("rows " + std::to_string(rc.rows) + " C " + std::to_string(rc.C));
    const Shape s{rc.rows, rc.C}, cs{rc.C}, ss{rc.rows};
    const size_t n = size_t(s.numel());
    std::vector<float> a = random_values(n, rng_, d), bb = random_values(n, rng_, d, 0.0f, 1.0f);
    std::vector<float> w = random_values(size_t(rc.C), rng_, d, 0.5f, 1.5f),
                       bias = random_values(size_t(rc.C), rng_, d);
    std::vector<float> res(n), out(n), mean(size_t(rc.rows)), rstd(size_t(rc.rows));
    for (size_t i = 0; i < n; ++i) res[i] = round_to(d, a[i] + bb[i]);
    ASSERT_TRUE(layernorm_forward(host_view(out, s), host_view(mean, ss), host_view(rstd, ss), host_view(res, s),
                                  host_view(w, cs), host_view(bias, cs))
                    .ok());
    OwnedTensor ta = upload(a, d, s), tb = upload(bb, d, s), tw = upload(w, d, cs), tbias = upload(bias, d, cs);
    OwnedTensor tres = poisoned(d, s), tout = poisoned(d, s);
    OwnedTensor tmean = poisoned(DataType::kFloat32, ss), trstd = poisoned(DataType::kFloat32, ss);
    ASSERT_TRUE(residual_layernorm_forward(tres, tout, tmean, trstd, ta, tb, tw, tbias).ok());
    EXPECT_EQ(download(tres), res);
    EXPECT_TRUE(close(download(tout), out, out_tol(d)));
    EXPECT_TRUE(close(download(tmean), mean, kF32Tol));
    EXPECT_TRUE(close(download(trstd), rstd, kF32Tol));
  }
}

TEST_P(CudaLayerNorm, BackwardAccumulatesOrOverwrites) {
  const DataType d = GetParam();
  for (GradInit init : {GradInit::kAccumulate, GradInit::kOverwrite}) {
    for (const RowsC& rc : kShapes) {
      SCOPED_TRACE(case_name(rc, init));
      LnCase k = make_case(rc, d, rng_);
      const size_t n = k.x.size();
      std::vector<float> dy = random_values(n, rng_, d), prior = random_values(n, rng_, d);
      std::vector<float> pw = random_values(size_t(rc.C), rng_, DataType::kFloat32);
      std::vector<float> pb = random_values(size_t(rc.C), rng_, DataType::kFloat32);
      std::vector<float> want_dx = prior, want_dw = pw, want_db = pb;
      ASSERT_TRUE(cpu_backward(k, dy, want_dx, want_dw, want_db, init));
      const DeviceBackward dev(k, dy, d);
      OwnedTensor dinp = init == GradInit::kAccumulate ? upload(prior, d, k.shape) : poisoned(d, k.shape);
      OwnedTensor dw = upload(pw, DataType::kFloat32, k.cshape), db = upload(pb, DataType::kFloat32, k.cshape);
      ASSERT_TRUE(dev.run(dinp, dw, db, init).ok());
      EXPECT_TRUE(close(download(dinp), want_dx, out_tol(d)));
      EXPECT_TRUE(close(download(dw), want_dw, kF32Tol));
      EXPECT_TRUE(close(download(db), want_db, kF32Tol));
    }
  }
}

// Each of dinp, dweight, dbias may be skipped; the others are still right.
TEST_P(CudaLayerNorm, BackwardWithSkippedGradients) {
  const DataType d = GetParam();
  LnCase k = make_case({7, 24}, d, rng_);
  std::vector<float> dy = random_values(k.x.size(), rng_, d);
  std::vector<float> want_dx(k.x.size(), 0.0f), want_dw(24, 0.0f), want_db(24, 0.0f);
  ASSERT_TRUE(cpu_backward(k, dy, want_dx, want_dw, want_db));
  const DeviceBackward dev(k, dy, d);
  OwnedTensor dinp = poisoned(d, k.shape);
  ASSERT_TRUE(dev.run(dinp, Tensor{}, Tensor{}, GradInit::kOverwrite).ok());
  EXPECT_TRUE(close(download(dinp), want_dx, out_tol(d)));
  OwnedTensor dw = upload(std::vector<float>(24, 0.0f), DataType::kFloat32, k.cshape);
  ASSERT_TRUE(dev.run(Tensor{}, dw, Tensor{}).ok());
  EXPECT_TRUE(close(download(dw), want_dw, kF32Tol));
  OwnedTensor db = upload(std::vector<float>(24, 0.0f), DataType::kFloat32, k.cshape);
  ASSERT_TRUE(dev.run(Tensor{}, Tensor{}, db).ok());
  EXPECT_TRUE(close(download(db), want_db, kF32Tol));
}

// Views one element past a 16-byte boundary take the general kernels although C is a multiple of the pack.
TEST_P(CudaLayerNorm, MisalignedViewsMatchCpu) {
  const DataType d = GetParam();
  LnCase k = make_case({6, 64}, d, rng_);
  std::vector<float> dy = random_values(k.x.size(), rng_, d);
  std::vector<float> want_dx(k.x.size(), 0.0f), want_dw(64, 0.0f), want_db(64, 0.0f);
  ASSERT_TRUE(cpu_backward(k, dy, want_dx, want_dw, want_db));
  const int64_t n = k.shape.numel();
  auto view_of = [&](OwnedTensor& owner, const std::vector<float>& v) {
    std::vector<float> padded(size_t(n) + 8, NAN);
    std::copy(v.begin(), v.end(), padded.begin() + 1);
    owner = upload(padded, d, Shape{n + 8});
    auto t = Tensor::view(owner.tensor().mem, dtype_size(d), d, k.shape);
    EXPECT_TRUE(t.ok());
    return *t;
  };
  OwnedTensor ox, oout, ody, odx;
  const Tensor x = view_of(ox, k.x), out = view_of(oout, std::vector<float>(size_t(n), NAN));
  const Tensor dout = view_of(ody, dy), dinp = view_of(odx, std::vector<float>(size_t(n), NAN));
  OwnedTensor w = upload(k.w, d, k.cshape), b = upload(k.b, d, k.cshape);
  OwnedTensor mean = poisoned(DataType::kFloat32, k.stats), rstd = poisoned(DataType::kFloat32, k.stats);
  OwnedTensor dw = upload(std::vector<float>(64, 0.0f), DataType::kFloat32, k.cshape);
  OwnedTensor db = upload(std::vector<float>(64, 0.0f), DataType::kFloat32, k.cshape);
  ASSERT_TRUE(layernorm_forward(out, mean, rstd, x, w, b).ok());
  EXPECT_TRUE(close(download(out), k.out, out_tol(d)));
  EXPECT_TRUE(close(download(rstd), k.rstd, kF32Tol));
  ASSERT_TRUE(layernorm_backward(dinp, dw, db, dout, x, w, mean, rstd, GradInit::kOverwrite).ok());
  EXPECT_TRUE(close(download(dinp), want_dx, out_tol(d)));
  EXPECT_TRUE(close(download(dw), want_dw, kF32Tol));
  EXPECT_TRUE(close(download(db), want_db, kF32Tol));
}

// Two runs of the backward on the same inputs give the same bits (fixed reduction orders, no atomics).
TEST_P(CudaLayerNorm, BackwardIsDeterministic) {
  const DataType d = GetParam();
  LnCase k = make_case({2048, 768}, d, rng_);
  const DeviceBackward dev(k, random_values(k.x.size(), rng_, d), d);
  std::vector<float> runs[2][3];
  for (auto& run : runs) {
    OwnedTensor dinp = poisoned(d, k.shape);
    OwnedTensor dw = upload(std::vector<float>(768, 0.0f), DataType::kFloat32, k.cshape);
    OwnedTensor db = upload(std::vector<float>(768, 0.0f), DataType::kFloat32, k.cshape);
    ASSERT_TRUE(dev.run(dinp, dw, db, GradInit::kOverwrite).ok());
    run[0] = download(dinp);
    run[1] = download(dw);
    run[2] = download(db);
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(runs[0][i].size(), runs[1][i].size());
    EXPECT_EQ(std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * sizeof(float)), 0)
        << "output " << i << " differs between two runs";
  }
}

// With all three gradients asked for, 16-bit rows of C <= 1024 take the one-pass kernel; one gradient at a time
// takes the row kernel (dinp) and the column kernel (dweight, dbias). Both sum the same terms in the same order, so
// they agree bit for bit (f32 takes the two kernels both times). C = 24, 768, 1000 (the last pack column partly
// filled), 1024 (4 packs per lane).
TEST_P(CudaLayerNorm, OnePassAndTwoKernelsGiveTheSameBits) {
  const DataType d = GetParam();
  for (const RowsC& rc : {RowsC{7, 24}, RowsC{2048, 768}, RowsC{33, 1000}, RowsC{5, 1024}}) {
    for (GradInit init : {GradInit::kAccumulate, GradInit::kOverwrite}) {
      SCOPED_TRACE(case_name(rc, init));
      LnCase k = make_case(rc, d, rng_);
      const size_t n = k.x.size();
      std::vector<float> dy = random_values(n, rng_, d), prior = random_values(n, rng_, d);
      std::vector<float> pw = random_values(size_t(rc.C), rng_, DataType::kFloat32);
      const DeviceBackward dev(k, dy, d);
      std::vector<float> got[2][3];  // [all at once, one at a time][dinp, dweight, dbias]
      for (int way = 0; way < 2; ++way) {
        OwnedTensor dinp = upload(prior, d, k.shape);
        OwnedTensor dw = upload(pw, DataType::kFloat32, k.cshape), db = upload(pw, DataType::kFloat32, k.cshape);
        if (way == 0) {
          ASSERT_TRUE(dev.run(dinp, dw, db, init).ok());
        } else {
          ASSERT_TRUE(dev.run(dinp, Tensor{}, Tensor{}, init).ok());
          ASSERT_TRUE(dev.run(Tensor{}, dw, db, init).ok());
        }
        got[way][0] = download(dinp);
        got[way][1] = download(dw);
        got[way][2] = download(db);
      }
      const char* names[] = {"dinp", "dweight", "dbias"};
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(got[0][i], got[1][i])) << names[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLayerNorm, ::testing::ValuesIn(kDtypes), dtype_param_name);

}  // namespace
}  // namespace zw::tensor::cuda_test
