// tests/tensor/cuda/embedding_test.cc — token + position embedding on CUDA against the CPU ops, per dtype:
// repeated tokens (a few ids, one id everywhere, GPT-2's vocabulary with one very frequent id), determinism of the
// backward, and out-of-range ids reported through CudaContext::synchronize().
//
// Tolerances (relative ‖got − want‖ / ‖want‖, cuda_test_util.h):
//  - forward: f32 1e-6 (the same single f32 addition, exact in fact); bf16 5e-3, f16 1e-3 (the sum rounded once
//    to the dtype: ≤ 2⁻⁹ resp. 2⁻¹² relative per element);
//  - backward dwte/dwpe are f32 in every dtype and both paths add the identical (rounded) dout values, in
//    position order; only where the prior gradient joins the sum differs: 1e-5.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/tensor/cuda/cuda_test_util.h"

namespace zw::tensor::cuda_test {
namespace {

constexpr double kGradTol = 1e-5;
double forward_tol(DataType d) { return by_dtype(d, 1e-6, 5e-3, 1e-3); }

// One embedding problem: B×T tokens over a vocabulary of V, C channels, a position table of maxT rows.
struct EmbCase {
  int64_t B, T, V, C, maxT;
  std::vector<int32_t> tokens;
  std::string name;
};

std::vector<EmbCase> cases(std::mt19937_64& rng) {
  auto draw = [&](int64_t n, int64_t lo, int64_t hi) {
    std::uniform_int_distribution<int32_t> dist(int32_t(lo), int32_t(hi - 1));
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = dist(rng);
    return t;
  };
  std::vector<EmbCase> out;
  out.push_back({2, 5, 11, 24, 8, draw(10, 0, 4), "few ids, C=24"});
  out.push_back({3, 7, 9, 1, 7, draw(21, 0, 9), "C=1"});
  out.push_back({2, 9, 17, 13, 12, draw(18, 0, 17), "C=13"});
  out.push_back({4, 16, 11, 24, 16, std::vector<int32_t>(64, 7), "one id everywhere"});
  std::vector<int32_t> gpt = draw(2048, 0, 50304);
  for (size_t i = 0; i < gpt.size(); i += 3) gpt[i] = 198;  // one id at a third of the positions
  out.push_back({8, 256, 50304, 768, 1024, gpt, "GPT-2 sizes"});
  out.push_back({1, 40, 5, 16, 40, std::vector<int32_t>(40, 4), "a run longer than a warp"});
  return out;
}

class CudaEmbedding : public CudaDtypeTest {};

TEST_P(CudaEmbedding, ForwardMatchesCpu) {
  const DataType d = GetParam();
  for (EmbCase& k : cases(rng_)) {
    SCOPED_TRACE(k.name);
    const Shape st{k.B, k.T}, so{k.B, k.T, k.C}, ste{k.V, k.C}, spe{k.maxT, k.C};
    std::vector<float> wte = random_values(size_t(k.V * k.C), rng_, d);
    std::vector<float> wpe = random_values(size_t(k.maxT * k.C), rng_, d);
    std::vector<float> want(size_t(so.numel()));
    ASSERT_TRUE(embedding_forward(host_view(want, so), Tensor::host(k.tokens.data(), st), host_view(wte, ste),
                                  host_view(wpe, spe))
                    .ok());
    OwnedTensor tokens = upload_ids(k.tokens, st), te = upload(wte, d, ste), pe = upload(wpe, d, spe);
    OwnedTensor out = poisoned(d, so);
    ASSERT_TRUE(embedding_forward(out, tokens, te, pe).ok());
    EXPECT_TRUE(close(download(out), want, forward_tol(d)));
  }
}

// Backward into pre-filled gradients (it accumulates), both tables and each alone.
TEST_P(CudaEmbedding, BackwardMatchesCpu) {
  const DataType d = GetParam();
  for (EmbCase& k : cases(rng_)) {
    SCOPED_TRACE(k.name);
    const Shape st{k.B, k.T}, so{k.B, k.T, k.C}, ste{k.V, k.C}, spe{k.maxT, k.C};
    std::vector<float> dy = random_values(size_t(so.numel()), rng_, d);
    std::vector<float> pte = random_values(size_t(k.V * k.C), rng_, DataType::kFloat32);
    std::vector<float> ppe = random_values(size_t(k.maxT * k.C), rng_, DataType::kFloat32);
    std::vector<float> want_te = pte, want_pe = ppe;
    ASSERT_TRUE(embedding_backward(host_view(want_te, ste), host_view(want_pe, spe), host_view(dy, so),
                                   Tensor::host(k.tokens.data(), st))
                    .ok());
    OwnedTensor tokens = upload_ids(k.tokens, st), dout = upload(dy, d, so);
    OwnedTensor gte = upload(pte, DataType::kFloat32, ste), gpe = upload(ppe, DataType::kFloat32, spe);
    ASSERT_TRUE(embedding_backward(gte, gpe, dout, tokens).ok());
    EXPECT_TRUE(close(download(gte), want_te, kGradTol)) << "dwte";
    EXPECT_TRUE(close(download(gpe), want_pe, kGradTol)) << "dwpe";
    OwnedTensor only_te = upload(pte, DataType::kFloat32, ste), only_pe = upload(ppe, DataType::kFloat32, spe);
    ASSERT_TRUE(embedding_backward(only_te, Tensor{}, dout, tokens).ok());
    ASSERT_TRUE(embedding_backward(Tensor{}, only_pe, dout, tokens).ok());
    EXPECT_TRUE(close(download(only_te), want_te, kGradTol)) << "dwte alone";
    EXPECT_TRUE(close(download(only_pe), want_pe, kGradTol)) << "dwpe alone";
  }
}

// Same inputs twice: the same bits in dwte and dwpe (sorted runs, fixed summation order, no atomics).
TEST_P(CudaEmbedding, BackwardIsDeterministic) {
  const DataType d = GetParam();
  std::vector<EmbCase> all = cases(rng_);
  const EmbCase& k = all[4];  // GPT-2 sizes with one frequent id
  const Shape st{k.B, k.T}, so{k.B, k.T, k.C}, ste{k.V, k.C}, spe{k.maxT, k.C};
  std::vector<float> dy = random_values(size_t(so.numel()), rng_, d);
  OwnedTensor tokens = upload_ids(k.tokens, st), dout = upload(dy, d, so);
  std::vector<float> runs[2][2];
  for (auto& run : runs) {
    OwnedTensor gte = upload(std::vector<float>(size_t(k.V * k.C), 0.0f), DataType::kFloat32, ste);
    OwnedTensor gpe = upload(std::vector<float>(size_t(k.maxT * k.C), 0.0f), DataType::kFloat32, spe);
    ASSERT_TRUE(embedding_backward(gte, gpe, dout, tokens).ok());
    run[0] = download(gte);
    run[1] = download(gpe);
  }
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * sizeof(float)), 0)
        << (i == 0 ? "dwte" : "dwpe") << " differs between two runs";
}

// A token outside the vocabulary: synchronize() names it and its position; its output row is zero and the
// others are right; the error is reported once.
TEST_P(CudaEmbedding, OutOfRangeTokenIsReportedBySynchronize) {
  const DataType d = GetParam();
  const int64_t B = 2, T = 4, V = 50304, C = 16;
  std::vector<int32_t> ids = {3, 1, 4, 1, 5, 60000, 2, 6};
  const Shape st{B, T}, so{B, T, C}, ste{V, C}, spe{T, C};
  std::vector<float> wte = random_values(size_t(V * C), rng_, d), wpe = random_values(size_t(T * C), rng_, d);
  std::vector<float> want(size_t(so.numel()), 0.0f);
  for (int64_t i = 0; i < B * T; ++i) {
    if (i == 5) continue;  // the bad id's row stays zero
    for (int64_t c = 0; c < C; ++c)
      want[size_t(i * C + c)] = wte[size_t(ids[i] * C + c)] + wpe[size_t((i % T) * C + c)];
  }
  OwnedTensor tokens = upload_ids(ids, st), te = upload(wte, d, ste), pe = upload(wpe, d, spe);
  OwnedTensor out = poisoned(d, so);
  ASSERT_TRUE(embedding_forward(out, tokens, te, pe).ok());  // queued: the kernel reports, not the call
  const Status s = ctx_->synchronize();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("token 60000 at position 5"), std::string::npos) << s.to_string();
  EXPECT_TRUE(close(download(out), want, forward_tol(d)));
  EXPECT_TRUE(ctx_->synchronize().ok()) << "the error slot is cleared once reported";
}

// A negative id in the backward: reported, skipped, and the other positions' gradients are right.
TEST_P(CudaEmbedding, OutOfRangeTokenInBackwardIsSkipped) {
  const DataType d = GetParam();
  const int64_t B = 1, T = 6, V = 10, C = 8;
  std::vector<int32_t> ids = {2, 9, -3, 2, 0, 9};
  const Shape st{B, T}, so{B, T, C}, ste{V, C}, spe{T, C};
  std::vector<float> dy = random_values(size_t(so.numel()), rng_, d);
  std::vector<float> want_te(size_t(V * C), 0.0f), want_pe(size_t(T * C), 0.0f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t c = 0; c < C; ++c) {
      if (ids[i] >= 0) want_te[size_t(ids[i] * C + c)] += dy[size_t(i * C + c)];
      want_pe[size_t(i * C + c)] += dy[size_t(i * C + c)];
    }
  OwnedTensor tokens = upload_ids(ids, st), dout = upload(dy, d, so);
  OwnedTensor gte = upload(std::vector<float>(size_t(V * C), 0.0f), DataType::kFloat32, ste);
  OwnedTensor gpe = upload(std::vector<float>(size_t(T * C), 0.0f), DataType::kFloat32, spe);
  ASSERT_TRUE(embedding_backward(gte, gpe, dout, tokens).ok());
  const Status s = ctx_->synchronize();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("token -3 at position 2"), std::string::npos) << s.to_string();
  EXPECT_TRUE(close(download(gte), want_te, kGradTol));
  EXPECT_TRUE(close(download(gpe), want_pe, kGradTol));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaEmbedding, ::testing::ValuesIn(kDtypes), dtype_param_name);

}  // namespace
}  // namespace zw::tensor::cuda_test
