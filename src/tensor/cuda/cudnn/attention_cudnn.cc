// tensor/cuda/cudnn/attention_cudnn.cc — causal attention on cuDNN's fused flash-attention graphs (see the header).
//
// One graph per (direction, dtype, B, NH, T, hs), built with the frontend's heuristics (mode A) on first use and
// kept in the context's DnnState with its workspace size, or with the reason it could not be built. Tensors are
// bound by uid at each call; the stream is the context's.
#include "tensor/cuda/cudnn/attention_cudnn.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/log.h"
#include "tensor/cuda/context_impl.h"

namespace fe = cudnn_frontend;

namespace zw::tensor::cuda {

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Key {
  bool backward;
  DataType dtype;
  int64_t B, NH, T, hs;
  bool operator<(const Key& o) const {
    return std::tie(backward, dtype, B, NH, T, hs) < std::tie(o.backward, o.dtype, o.B, o.NH, o.T, o.hs);
  }
};

struct Graph {
  std::shared_ptr<fe::graph::Graph> graph;  // null: not buildable (why)
  int64_t workspace = 0;                    // bytes
  std::string why;
};

std::string key_string(const Key& k) {
  return std::string(k.backward ? "backward" : "forward") + " " + dtype_name(k.dtype) + " B " + std::to_string(k.B) +
         " NH " + std::to_string(k.NH) + " T " + std::to_string(k.T) + " hs " + std::to_string(k.hs);
}

}  // namespace

struct DnnState {
  cudnnHandle_t handle = nullptr;
  std::map<Key, Graph> graphs;
};

void destroy_dnn_state(DnnState* state) {
  if (state == nullptr) return;
  state->graphs.clear();
  if (state->handle != nullptr) cudnnDestroy(state->handle);
  delete state;
}

namespace dnn {
namespace {

// The strides of a [B,NH,T,hs] view of a [B,T,W] tensor whose head h starts at channel h·hs of each row.
std::vector<int64_t> head_strides(const Key& k, int64_t row) { return {k.T * row, k.hs, row, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid, const Key& k,
                                                    int64_t row) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({k.B, k.NH, k.T, k.hs})
                      .set_stride(head_strides(k, row)));
}

// The graph of k, described and built; on failure graph is null and why says at which step. The backward is
// cuDNN's deterministic algorithm unless the context allows faster ones (its dQ is then summed with atomics).
Graph build(cudnnHandle_t handle, const Key& k, bool deterministic) {
  Graph out;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(k.dtype == DataType::kBFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t C = k.NH * k.hs;
  const float scale = float(1.0 / std::sqrt(double(k.hs)));
  auto q = input(*g, "q", kQ, k, 3 * C), kk = input(*g, "k", kK, k, 3 * C), v = input(*g, "v", kV, k, 3 * C);
  const std::vector<int64_t> stats_dim{k.B, k.NH, k.T, 1}, stats_stride{k.NH * k.T, k.T, 1, 1};
  if (!k.backward) {
    auto [o, stats] = g->sdpa(q, kk, v,
                              fe::graph::SDPA_attributes()
                                  .set_name("causal_attention")
                                  .set_generate_stats(true)
                                  .set_causal_mask(true)
                                  .set_attn_scale(scale));
    o->set_output(true).set_uid(kO).set_dim({k.B, k.NH, k.T, k.hs}).set_stride(head_strides(k, C));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dim)
        .set_stride(stats_stride);
  } else {
    auto o = input(*g, "o", kO, k, C), dout = input(*g, "dO", kDO, k, C);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(kStats)
                               .set_dim(stats_dim)
                               .set_stride(stats_stride)
                               .set_data_type(fe::DataType_t::FLOAT));
    auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dout, stats,
                                         fe::graph::SDPA_backward_attributes()
                                             .set_name("causal_attention_backward")
                                             .set_causal_mask(true)
                                             .set_attn_scale(scale)
                                             .set_deterministic_algorithm(deterministic));
    dq->set_output(true).set_uid(kDQ).set_dim({k.B, k.NH, k.T, k.hs}).set_stride(head_strides(k, 3 * C));
    dk->set_output(true).set_uid(kDK).set_dim({k.B, k.NH, k.T, k.hs}).set_stride(head_strides(k, 3 * C));
    dv->set_output(true).set_uid(kDV).set_dim({k.B, k.NH, k.T, k.hs}).set_stride(head_strides(k, 3 * C));
  }
  auto step = [&](const char* what, fe::error_t e) {
    if (e.is_good()) return true;
    out.why = std::string("cuDNN cannot build the ") + key_string(k) + " graph (" + what + ": " + e.get_message() + ")";
    return false;
  };
  if (!step("validate", g->validate()) || !step("build_operation_graph", g->build_operation_graph(handle)) ||
      !step("create_execution_plans", g->create_execution_plans({fe::HeurMode_t::A})) ||
      !step("check_support", g->check_support()) || !step("build_plans", g->build_plans()))
    return out;
  int64_t ws = 0;
  if (!step("get_workspace_size", g->get_workspace_size(ws))) return out;
  out.graph = std::move(g);
  out.workspace = ws;
  return out;
}

// The context's cuDNN state, made on first use.
Result<DnnState*> state(CudaContext::Impl& ctx) {
  if (!ctx.dnn) {
    std::unique_ptr<DnnState, DnnStateDeleter> s(new DnnState);
    const cudnnStatus_t st = cudnnCreate(&s->handle);
    if (st != CUDNN_STATUS_SUCCESS)
      return Status(Code::kSystem, std::string("cudnnCreate failed on device ") + std::to_string(ctx.device) + ": " +
                                       cudnnGetErrorString(st));
    ctx.dnn = std::move(s);
  }
  return ctx.dnn.get();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether cuDNN's SDPA may take a call of this dtype, head size and views (before any graph is built).
bool eligible(DataType dtype, int64_t hs, std::initializer_list<const Tensor*> tensors, std::string* why_not) {
  if (dtype != DataType::kBFloat16 && dtype != DataType::kFloat16) {
    *why_not = std::string("cuDNN's flash attention takes bf16 and f16, not ") + dtype_name(dtype);
    return false;
  }
  if (hs > 128 || hs % 8 != 0) {
    *why_not = "cuDNN's flash attention takes head sizes up to 128 in multiples of 8, not " + std::to_string(hs);
    return false;
  }
  for (const Tensor* t : tensors)
    if (!aligned16(t->mem.ptr)) {
      *why_not = "a view is not 16-byte aligned";
      return false;
    }
  return true;
}

// The entry of k: built (and logged) on first use, its graph null when cuDNN could not build it.
Result<const Graph*> entry(CudaContext::Impl& ctx, const Key& k) {
  ZW_ASSIGN_OR_RETURN(DnnState * s, state(ctx));
  auto it = s->graphs.find(k);
  if (it == s->graphs.end()) {
    const bool deterministic = ctx.determinism == Determinism::kDeterministic;
    it = s->graphs.emplace(k, build(s->handle, k, deterministic)).first;
    if (it->second.graph)
      ZW_INFO(kCuda, "attention: cuDNN %s graph built (workspace %lld bytes%s)", key_string(k).c_str(),
              static_cast<long long>(it->second.workspace),
              k.backward && !deterministic ? ", non-deterministic: ZW_CUDA_DETERMINISTIC=0" : "");
    else
      ZW_INFO(kCuda, "attention: %s", it->second.why.c_str());
  }
  return &it->second;
}

// The graph of k, or null with the reason in *why_not.
Result<const Graph*> find(CudaContext::Impl& ctx, const Key& k, std::string* why_not) {
  ZW_ASSIGN_OR_RETURN(const Graph* found, entry(ctx, k));
  const Graph& g = *found;
  if (!g.graph) {
    *why_not = g.why;
    return nullptr;
  }
  if (size_t(g.workspace) > ctx.scratch_bytes) {
    *why_not = "cuDNN's " + key_string(k) + " graph needs " + std::to_string(g.workspace) +
               " bytes of workspace, more than the context's scratch (" + std::to_string(ctx.scratch_bytes) +
               "; raise CudaContextOptions::scratch_bytes)";
    return nullptr;
  }
  return &g;
}

Status execute(CudaContext::Impl& ctx, const Graph& g, std::unordered_map<int64_t, void*>& pack, const Key& k) {
  DnnState& s = *ctx.dnn;
  const cudnnStatus_t st = cudnnSetStream(s.handle, ctx.stream);
  if (st != CUDNN_STATUS_SUCCESS)
    return Status(Code::kSystem, std::string("cudnnSetStream failed: ") + cudnnGetErrorString(st));
  fe::error_t e = g.graph->execute(s.handle, pack, ctx.scratch);
  if (!e.is_good())
    return Status(Code::kSystem, "cuDNN attention " + key_string(k) + " failed to run: " + e.get_message());
  return Status();
}

Key key_of(bool backward, const Tensor& qkv, int num_heads) {
  const int64_t C = qkv.shape[2] / 3;
  return Key{backward, qkv.dtype, qkv.shape[0], num_heads, qkv.shape[1], C / num_heads};
}

std::byte* at(const Tensor& t, int64_t elements) { return t.mem.data() + elements * int64_t(dtype_size(t.dtype)); }

}  // namespace

bool built() { return true; }

std::string describe() {
  const size_t v = cudnnGetVersion();
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
         ", frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

Result<bool> prepare(DataType dtype, int64_t batch, int64_t seq, int num_heads, int64_t channels,
                     std::string* why_not) {
  const int64_t hs = channels / num_heads;
  if (!eligible(dtype, hs, {}, why_not)) return false;
  CudaContext::Impl& ctx = current();
  int64_t need = 0;
  for (const bool backward : {false, true}) {
    ZW_ASSIGN_OR_RETURN(const Graph* g, entry(ctx, Key{backward, dtype, batch, num_heads, seq, hs}));
    if (!g->graph) {
      *why_not = g->why;
      return false;
    }
    need = std::max(need, g->workspace);
  }
  ZW_TRY(current_cuda_context()->reserve_scratch(size_t(need)));
  ZW_INFO(kCuda, "attention: cuDNN graphs ready for %s B %lld T %lld NH %d hs %lld (workspace %lld bytes)",
          dtype_name(dtype), static_cast<long long>(batch), static_cast<long long>(seq), num_heads,
          static_cast<long long>(hs), static_cast<long long>(need));
  return true;
}

Result<bool> attention_forward(const Tensor& out, const Tensor& stats, const Tensor& qkv, int num_heads,
                               std::string* why_not) {
  const Key k = key_of(false, qkv, num_heads);
  if (!eligible(qkv.dtype, k.hs, {&qkv, &out}, why_not)) return false;
  CudaContext::Impl& ctx = current();
  ZW_ASSIGN_OR_RETURN(const Graph* g, find(ctx, k, why_not));
  if (g == nullptr) return false;
  const int64_t C = k.NH * k.hs;
  std::unordered_map<int64_t, void*> pack{
      {kQ, qkv.mem.ptr}, {kK, at(qkv, C)}, {kV, at(qkv, 2 * C)}, {kO, out.mem.ptr}, {kStats, stats.mem.ptr}};
  ZW_TRY(execute(ctx, *g, pack, k));
  return true;
}

Result<bool> attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv,
                                const Tensor& stats, int num_heads, bool accumulate, std::string* why_not) {
  const Key k = key_of(true, qkv, num_heads);
  if (accumulate) {
    *why_not = "cuDNN's attention backward overwrites dqkv (GradInit::kAccumulate asks to add to it)";
    return false;
  }
  if (!eligible(qkv.dtype, k.hs, {&qkv, &out, &dout, &dqkv}, why_not)) return false;
  CudaContext::Impl& ctx = current();
  ZW_ASSIGN_OR_RETURN(const Graph* g, find(ctx, k, why_not));
  if (g == nullptr) return false;
  const int64_t C = k.NH * k.hs;
  std::unordered_map<int64_t, void*> pack{{kQ, qkv.mem.ptr},   {kK, at(qkv, C)},    {kV, at(qkv, 2 * C)},
                                          {kO, out.mem.ptr},   {kDO, dout.mem.ptr}, {kStats, stats.mem.ptr},
                                          {kDQ, dqkv.mem.ptr}, {kDK, at(dqkv, C)},  {kDV, at(dqkv, 2 * C)}};
  ZW_TRY(execute(ctx, *g, pack, k));
  return true;
}

}  // namespace dnn
}  // namespace zw::tensor::cuda
