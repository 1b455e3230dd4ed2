// tensor/cuda/cuda_ops.h — the CUDA implementations behind tensor.h and ops.h (private to src/tensor).
//
// The public functions (tensor.cc, ops_*.cc) check devices, dtypes and shapes once for both paths and call these
// only with valid arguments on one CUDA device; these then queue the work on the current CudaContext's stream
// (current_cuda_context(), never null here: the public functions check it). Builds without CUDA link
// cuda_none.cc instead, where each returns kUnsupported.
// Non-goals: argument checking (done by the callers), anything callers outside src/tensor/ should see.
#pragma once

#include <cstddef>

#include "tensor/adamw.h"
#include "tensor/cuda_context.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace zw::tensor::cuda {

// Memory (cuda_memory.cc). alloc/free keep the counters of cuda_bytes_in_use/peak.
Result<void*> device_alloc(size_t bytes, int device);
void device_free(void* ptr, size_t bytes, int device);
// Zeroes device bytes: on the current context's stream when there is one, else synchronously.
Status zero(MemRef mem);
// cudaMemcpyAsync on the current stream; waits for it when dst is host memory. Either side may be host.
Status copy(const Tensor& dst, const Tensor& src);
// Device-to-device conversion between f32, bf16 and f16 (round to nearest-even), and fill.
Status convert(const Tensor& src, const Tensor& dst);
Status fill(const Tensor& t, double value);

// Ops: the arguments and semantics of ops.h, already checked.
Status embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
Status embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens);
Status layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias);
Status layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          GradInit init);
Status residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias);
Status linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);
Status linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight, GradInit init);
Status linear_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias);
Status linear_backward_gelu(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight, const Tensor& pre);
Status gelu_forward(const Tensor& out, const Tensor& inp);
Status gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, GradInit init);
Status residual_forward(const Tensor& out, const Tensor& a, const Tensor& b);
// da/db: undefined when skipped or when they alias dout (the caller sorted that out).
Status residual_backward(const Tensor& da, const Tensor& db, const Tensor& dout, GradInit init);
Status attention_forward(const Tensor& out, const Tensor& stats, const Tensor& qkv, int num_heads);
Status attention_prepare(DataType dtype, int64_t batch, int64_t seq, int num_heads, int64_t channels);
Status attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout, const Tensor& out,
                          const Tensor& qkv, const Tensor& stats, int num_heads, GradInit init);
Status cross_entropy_forward(const Tensor& losses, const Tensor& probs, const Tensor& logits, const Tensor& targets);
Status cross_entropy_backward(const Tensor& dlogits, const Tensor& probs, const Tensor& targets,
                              double dloss_per_position, GradInit init);
Status cross_entropy_forward_backward(const Tensor& losses, const Tensor& dlogits, const Tensor& logits,
                                      const Tensor& targets, double dloss_per_position);
Status reduce_sum(const Tensor& out, const Tensor& x, bool squares);

// Optimizer (adamw.h): the chunk table of a FlatAdamW on the device, and its update.
struct AdamWTable;  // opaque, owned by FlatAdamW through a unique_ptr with destroy_adamw_table as deleter
Result<AdamWTable*> create_adamw_table(const std::vector<DecaySegment>& segments, int64_t numel, int device);
void destroy_adamw_table(AdamWTable* table);
Status adamw_step(const AdamWTable& table, const AdamWConfig& config, int64_t step, const Tensor& params,
                  const Tensor& grads, const Tensor& m, const Tensor& v, const Tensor& params16,
                  const Tensor& grad_factor);
Status grad_factor(const Tensor& factor, const Tensor& sumsq, double max_norm, double inv_loss_scale);

}  // namespace zw::tensor::cuda
