// tests/tensor/tape_test.cc — the tape replays a composite graph correctly (finite differences through a small
// tied-embedding network in f64) and stays allocation-free across steps.
#include "tensor/tape.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/tensor/gradcheck.h"

namespace zw::tensor {
namespace {

using testing::check_gradients;
using testing::random_tensor;
using testing::zeros64;

// A miniature GPT-like graph: every op kind, a tied embedding (wte used twice) and a residual stream (x used
// twice), so the test fails if the tape drops a contribution or replays in the wrong order.
struct MiniNet {
  static constexpr int64_t B = 2, T = 4, C = 6, V = 5, NH = 2;
  std::mt19937_64 rng{7};
  int32_t ids[B * T] = {0, 1, 4, 2, 3, 3, 0, 1};
  int32_t tgt[B * T] = {1, 4, 2, 0, 3, 0, 1, 2};
  OwnedTensor wte = random_tensor(Shape{V, C}, rng), wpe = random_tensor(Shape{T, C}, rng);
  OwnedTensor lw = random_tensor(Shape{C}, rng, 0.5, 1.5), lb = random_tensor(Shape{C}, rng);
  OwnedTensor qw = random_tensor(Shape{3 * C, C}, rng), qb = random_tensor(Shape{3 * C}, rng);
  OwnedTensor dwte = zeros64(Shape{V, C}), dwpe = zeros64(Shape{T, C}), dlw = zeros64(Shape{C});
  OwnedTensor dlb = zeros64(Shape{C}), dqw = zeros64(Shape{3 * C, C}), dqb = zeros64(Shape{3 * C});
  // activations and their gradients
  OwnedTensor x = zeros64(Shape{B, T, C}), dx = zeros64(Shape{B, T, C});
  OwnedTensor ln = zeros64(Shape{B, T, C}), dln = zeros64(Shape{B, T, C});
  OwnedTensor mean = zeros64(Shape{B * T}), rstd = zeros64(Shape{B * T});
  OwnedTensor qkv = zeros64(Shape{B, T, 3 * C}), dqkv = zeros64(Shape{B, T, 3 * C});
  OwnedTensor y = zeros64(Shape{B, T, C}), dy = zeros64(Shape{B, T, C});
  OwnedTensor att = zeros64(attention_stats_shape(MemKind::kHost, B, T, NH));
  OwnedTensor scratch = zeros64(attention_scratch_shape(MemKind::kHost, B, T, NH));
  OwnedTensor g = zeros64(Shape{B, T, C}), dg = zeros64(Shape{B, T, C});
  OwnedTensor res = zeros64(Shape{B, T, C}), dres = zeros64(Shape{B, T, C});
  OwnedTensor logits = zeros64(Shape{B, T, V}), dlogits = zeros64(Shape{B, T, V});
  OwnedTensor probs = zeros64(Shape{B, T, V}), losses = zeros64(Shape{B, T});
  Tape tape{16};

  double forward() {
    tape.clear();
    const Tensor tokens = Tensor::host(ids, Shape{B, T}), targets = Tensor::host(tgt, Shape{B, T});
    EXPECT_TRUE(record::embedding(tape, {x, dx}, tokens, {wte, dwte}, {wpe, dwpe}).ok());
    EXPECT_TRUE(record::layernorm(tape, {ln, dln}, mean, rstd, {x, dx}, {lw, dlw}, {lb, dlb}).ok());
    EXPECT_TRUE(record::linear(tape, {qkv, dqkv}, {ln, dln}, {qw, dqw}, {qb, dqb}).ok());
    EXPECT_TRUE(record::attention(tape, {y, dy}, att, scratch, {qkv, dqkv}, NH).ok());
    EXPECT_TRUE(record::gelu(tape, {g, dg}, {y, dy}).ok());
    EXPECT_TRUE(record::residual(tape, {res, dres}, {x, dx}, {g, dg}).ok());
    EXPECT_TRUE(record::linear(tape, {logits, dlogits}, {res, dres}, {wte, dwte}, Var{}).ok());
    double loss = 0;
    EXPECT_TRUE(record::cross_entropy(tape, losses, probs, {logits, dlogits}, targets, &loss).ok());
    return loss;
  }
  void backward() {
    for (const Tensor& t :
         {dx.tensor(), dln.tensor(), dqkv.tensor(), dy.tensor(), dg.tensor(), dres.tensor(), dlogits.tensor()})
      EXPECT_TRUE(fill(t, 0.0).ok());
    const Status s = tape.backward();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
};

TEST(Tape, CompositeGraphMatchesFiniteDifferences) {
  MiniNet net;
  check_gradients(
      {{"wte", net.wte, net.dwte},
       {"wpe", net.wpe, net.dwpe},
       {"ln.w", net.lw, net.dlw},
       {"ln.b", net.lb, net.dlb},
       {"qkv.w", net.qw, net.dqw},
       {"qkv.b", net.qb, net.dqb}},
      [&] { return net.forward(); }, [&] { net.backward(); });
  EXPECT_EQ(net.tape.size(), 8u);
}

TEST(Tape, ReplayKeepsCapacityAndRecordsInOrder) {
  MiniNet net;
  const size_t capacity = net.tape.capacity();
  for (int step = 0; step < 3; ++step) {
    net.forward();
    net.backward();
  }
  EXPECT_EQ(net.tape.capacity(), capacity);
  ASSERT_EQ(net.tape.size(), 8u);
  EXPECT_EQ(net.tape.entry(0).kind, OpKind::kEmbedding);
  EXPECT_EQ(net.tape.entry(3).kind, OpKind::kAttention);
  EXPECT_EQ(net.tape.entry(7).kind, OpKind::kCrossEntropy);
}

TEST(Tape, MissingOutputGradientIsAnError) {
  MiniNet net;
  net.forward();
  Tape tape;
  ASSERT_TRUE(record::gelu(tape, Var{net.g, Tensor{}}, Var{net.y, net.dy}).ok());
  const Status s = tape.backward();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("gelu"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace zw::tensor
