// tensor/cuda/linear.cu — linear_forward / linear_backward (and the MLP's GELU pair, linear_gelu_forward /
// linear_backward_gelu) on a CUDA device: cuBLASLt matmuls planned once per shape (the context's BlasPlans cache), and
// a deterministic two-stage column sum for the bias gradient.
//
// Row-major tensors are column-major transposes, so every product is written for cuBLASLt as its transpose:
//   forward  outᵀ[OC,N]  = W·inpᵀ       A = W   (C×OC, ld C, op T), B = inp  (C×N, ld C, op N),  D ld OC
//   dinp     dinpᵀ[C,N]  = Wᵀ·doutᵀ     A = W   (C×OC, ld C, op N), B = dout (OC×N, ld OC, op N), D ld C
//   dweight  dWᵀ[C,OC]  += inpᵀ·dout    A = inp (C×N, ld C, op N),  B = dout (OC×N, ld OC, op T), D ld C (f32)
// Values are f32, bf16 or f16 with CUBLAS_COMPUTE_32F (plain f32 for f32 tensors: no TF32) and f32 alpha/beta; the
// weight gradient is f32 (bf16/f16 inputs, f32 output, beta = 1). The forward bias rides in the
// CUBLASLT_EPILOGUE_BIAS epilogue (bias in the value dtype). GELU fusions: forward CUBLASLT_EPILOGUE_GELU_AUX(_BIAS)
// writes gelu(sum) to D and the pre-activation to the aux matrix (same layout as D); the input gradient of the layer
// after the GELU uses CUBLASLT_EPILOGUE_DGELU (D = product ∘ gelu'(aux)). cuBLASLt's GELU is the tanh form (GPT-2's);
// where it offers no such kernel for a shape (the aux leading dimension must be a multiple of 8, aux 16-byte aligned),
// the unfused pair (matmul, then pointwise.cu's GELU kernels) runs instead, with the same results up to rounding; so it
// does for what ZW_CUDA_GELU_FUSION turns off (default "both": on an H200 GPT-2 124M trained 2 % faster with both
// epilogues than with the forward one alone, 3 % faster than with none). The bias gradient db[OC] += Σ_rows dout is our
// own kernel pair: stage 1 sums fixed row blocks per column into f32 partials in the context scratch, stage 2
// (column_sums.cuh) adds the partials of each column in a fixed order into db — no atomics, a fixed order, the same
// bits on every run. cuBLAS documents bit-wise reproducible results for one toolkit version on one GPU model, and its
// split-K reduction schemes (in place with ordering counters, or a separate reduction pass) are all ordered; we opt
// into nothing that is not (no atomic-sync attributes). The plan cache fixes the algorithm per shape and alignment.
// Allocation: the FIRST call of each distinct plan key (shape, dtypes, epilogue, beta, pointer alignments) creates
// the cache (once per context) and one host-side entry (cuBLASLt descriptors, heuristic query); later calls with
// that key allocate nothing and only queue work on the context's stream.
// Non-goals: batched/strided matmul; the bias gradient in cuBLASLt's BGRADB epilogue (tried on an H100 in the 32nd
// session: the weight-gradient matmuls with it took 0.13 ms more per GPT-2 124M step than without it plus our column
// sums, docs/PERF.md); autotuning beyond cuBLASLt's first heuristic answer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>

#include "common/knobs.h"
#include "tensor/cuda/column_sums.cuh"
#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/dtype.cuh"

namespace zw::tensor::cuda {
namespace {

enum class GemmKind : int64_t { kForward, kDinp, kDweight };
enum class Fusion : int64_t {
  kNone,   // D = product (+ bias)
  kGelu,   // D = gelu(product (+ bias)), aux = product (+ bias)
  kDgelu,  // D = product ∘ gelu'(aux)
};

const char* gemm_name(GemmKind kind) {
  switch (kind) {
    case GemmKind::kForward:
      return "linear_forward";
    case GemmKind::kDinp:
      return "linear_backward (dinp)";
    default:
      return "linear_backward (dweight)";
  }
}

// One cuBLASLt call, column-major: D[m,n] = alpha·op(A)·op(B) + beta·C, with C = D (same memory and layout).
struct Gemm {
  GemmKind kind = GemmKind::kForward;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;  // op(A), op(B)
  int64_t m = 0, n = 0, k = 0;                           // op(A) is m×k, op(B) k×n, D m×n
  int64_t lda = 0, ldb = 0, ldd = 0;                     // leading dims of the stored matrices
  DataType ab = DataType::kFloat32;                      // dtype of A and B
  DataType cd = DataType::kFloat32;                      // dtype of C/D (and of the bias)
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  const void* bias = nullptr;  // non-null: the bias epilogue with this [m] vector
  Fusion fusion = Fusion::kNone;
  void* aux = nullptr;  // kGelu: written (pre-activation); kDgelu: read; laid out as D (ld ldd)
  float beta = 0.0f;
};

cublasLtEpilogue_t epilogue_of(const Gemm& g) {
  switch (g.fusion) {
    case Fusion::kGelu:
      return g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Fusion::kDgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    default:
      return g.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

cudaDataType_t blas_type(DataType d) {
  switch (d) {
    case DataType::kBFloat16:
      return CUDA_R_16BF;
    case DataType::kFloat16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// The largest of 16, 8, 4, 2 that divides the address (1 otherwise; 0 for null).
uint32_t alignment(const void* p) {
  if (p == nullptr) return 0;
  const auto u = reinterpret_cast<uintptr_t>(p);
  for (uint32_t a = 16; a > 1; a /= 2)
    if (u % a == 0) return a;
  return 1;
}

std::string describe(const Gemm& g) {
  return std::string(gemm_name(g.kind)) + ": m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
         " k=" + std::to_string(g.k) + " (A/B " + dtype_name(g.ab) + ", C/D " + dtype_name(g.cd) +
         (g.bias != nullptr ? ", bias" : "") +
         (g.fusion == Fusion::kGelu    ? ", gelu epilogue"
          : g.fusion == Fusion::kDgelu ? ", dgelu epilogue"
                                       : "") +
         ", beta " + (g.beta != 0.0f ? "1" : "0") + ")";
}

Status blas_error(const Gemm& g, const char* what, cublasStatus_t st) {
  return Status(Code::kSystem, describe(g) + ": " + what + " failed: " + cublasLtGetStatusName(st) + " (" +
                                   cublasLtGetStatusString(st) + ")");
}

#define ZW_BLAS_TRY(g, call)                                                            \
  do {                                                                                  \
    const cublasStatus_t zw_blas_st_ = (call);                                          \
    if (zw_blas_st_ != CUBLAS_STATUS_SUCCESS) return blas_error(g, #call, zw_blas_st_); \
  } while (0)

using PlanKey = std::array<int64_t, 19>;

PlanKey plan_key(const Gemm& g) {
  const int64_t shape[] = {int64_t(g.kind), int64_t(g.ta), int64_t(g.tb), g.m, g.n, g.k, g.lda, g.ldb, g.ldd};
  const int64_t rest[] = {int64_t(g.ab),  int64_t(g.cd),  g.bias != nullptr, g.beta != 0.0f,    int64_t(g.fusion),
                          alignment(g.a), alignment(g.b), alignment(g.d),    alignment(g.bias), alignment(g.aux)};
  PlanKey key{};
  std::copy(std::begin(shape), std::end(shape), key.begin());
  std::copy(std::begin(rest), std::end(rest), key.begin() + std::size(shape));
  return key;
}

// What a plan holds: the descriptors of one key and the algorithm the heuristic chose for them. A fused key that
// cuBLASLt cannot run is cached too (usable false, no descriptors), so its callers fall back without asking again.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // d serves as C and D
  cublasLtMatmulAlgo_t algo{};
  bool usable = true;
};

void destroy_plan(Plan& p) {
  if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d != nullptr) cublasLtMatrixLayoutDestroy(p.d);
  if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

}  // namespace

// The per-context cache (CudaContext::Impl::blas_plans), made on the first linear call of a context.
struct BlasPlans {
  std::map<PlanKey, Plan> plans;
};

void destroy_blas_plans(BlasPlans* plans) {
  if (plans == nullptr) return;
  for (auto& [key, plan] : plans->plans) destroy_plan(plan);
  delete plans;
}

namespace {

// The matmul descriptor and the three layouts of g (into *p; the caller destroys *p on failure).
Status make_descriptors(const Gemm& g, Plan* p) {
  ZW_BLAS_TRY(g, cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t ta = g.ta, tb = g.tb;
  ZW_BLAS_TRY(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  ZW_BLAS_TRY(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtEpilogue_t epilogue = epilogue_of(g);
  ZW_BLAS_TRY(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (g.bias != nullptr) {
    const int32_t bias_type = blas_type(g.cd);
    ZW_BLAS_TRY(
        g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    // The heuristic reads the pointer's alignment; run_gemm sets the pointer of each call again.
    ZW_BLAS_TRY(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  }
  if (g.fusion != Fusion::kNone) {
    const int64_t aux_ld = g.ldd;
    ZW_BLAS_TRY(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                  sizeof(aux_ld)));
    ZW_BLAS_TRY(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                                  sizeof(g.aux)));
  }
  const bool a_n = g.ta == CUBLAS_OP_N, b_n = g.tb == CUBLAS_OP_N;
  ZW_BLAS_TRY(g, cublasLtMatrixLayoutCreate(&p->a, blas_type(g.ab), uint64_t(a_n ? g.m : g.k),
                                            uint64_t(a_n ? g.k : g.m), g.lda));
  ZW_BLAS_TRY(g, cublasLtMatrixLayoutCreate(&p->b, blas_type(g.ab), uint64_t(b_n ? g.k : g.n),
                                            uint64_t(b_n ? g.n : g.k), g.ldb));
  ZW_BLAS_TRY(g, cublasLtMatrixLayoutCreate(&p->d, blas_type(g.cd), uint64_t(g.m), uint64_t(g.n), g.ldd));
  return Status();
}

// Asks the heuristic for the best algorithm of p's descriptors within the context's workspace and the actual
// pointer alignments.
Status choose_algo(const Gemm& g, CudaContext::Impl& ctx, Plan* p) {
  cublasLtMatmulPreference_t pref = nullptr;
  ZW_BLAS_TRY(g, cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t ws = ctx.workspace_bytes;
  ZW_BLAS_TRY(g, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = alignment(g.a), align_b = alignment(g.b), align_d = alignment(g.d);
  ZW_BLAS_TRY(g, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                      sizeof(align_a)));
  ZW_BLAS_TRY(g, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                      sizeof(align_b)));
  ZW_BLAS_TRY(g, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                      sizeof(align_d)));
  ZW_BLAS_TRY(g, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                      sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(ctx.blas, p->desc, p->a, p->b, p->d, p->d, pref, 1, &result, &returned);
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0 || result.state != CUBLAS_STATUS_SUCCESS)
    return Status(Code::kUnsupported, describe(g) + ": cuBLASLt offers no algorithm for this shape and dtypes (" +
                                          cublasLtGetStatusName(st) + ", " + std::to_string(returned) +
                                          " result(s); pointer alignments A " + std::to_string(align_a) + ", B " +
                                          std::to_string(align_b) + ", D " + std::to_string(align_d) +
                                          " bytes; workspace " + std::to_string(ws) + " bytes)");
  p->algo = result.algo;
  return Status();
}

// The cached plan of g's key, made on first use (the only host allocation of this file).
Result<const Plan*> find_plan(const Gemm& g, CudaContext::Impl& ctx) {
  if (!ctx.blas_plans) ctx.blas_plans.reset(new BlasPlans());
  auto& plans = ctx.blas_plans->plans;
  const PlanKey key = plan_key(g);
  if (auto it = plans.find(key); it != plans.end()) return &it->second;
  Plan plan;
  Status s = make_descriptors(g, &plan);
  if (s.ok()) s = choose_algo(g, ctx, &plan);
  if (!s.ok()) {
    destroy_plan(plan);
    if (g.fusion == Fusion::kNone) return s;
    plan.usable = false;  // the caller runs the unfused pair
  }
  return &plans.emplace(key, plan).first->second;
}

// Whether ZW_CUDA_GELU_FUSION asks for g's epilogue: "none", "forward" (GELU_AUX only) or "both".
bool fusion_wanted(Fusion f) {
  const std::string& mode = knobs().cuda_gelu_fusion;
  if (mode == "none") return false;
  return f == Fusion::kGelu || mode == "both";
}

// Whether cuBLASLt runs g's fused epilogue (planning it on first use); false: run the unfused pair instead.
Result<bool> fusion_available(const Gemm& g) {
  if (!fusion_wanted(g.fusion)) return false;
  if (g.ldd % 8 != 0 || alignment(g.aux) < 16) return false;  // cuBLASLt's documented aux requirements
  ZW_ASSIGN_OR_RETURN(const Plan* plan, find_plan(g, current()));
  return plan->usable;
}

Status run_gemm(const Gemm& g) {
  CudaContext::Impl& ctx = current();
  ZW_ASSIGN_OR_RETURN(const Plan* plan, find_plan(g, ctx));
  if (!plan->usable) return Status(Code::kInternal, describe(g) + ": ran a fused plan cuBLASLt cannot run");
  if (g.bias != nullptr)
    ZW_BLAS_TRY(g,
                cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  if (g.fusion != Fusion::kNone)
    ZW_BLAS_TRY(g, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                                  sizeof(g.aux)));
  const float alpha = 1.0f, beta = g.beta;
  ZW_BLAS_TRY(g, cublasLtMatmul(ctx.blas, plan->desc, &alpha, g.a, plan->a, g.b, plan->b, &beta, g.d, plan->d, g.d,
                                plan->d, &plan->algo, ctx.workspace, ctx.workspace_bytes, ctx.stream));
  return Status();
}

// Rows of a [..., last] shape: the product of all dims but the last (Shape::rows() divides by the last dim).
int64_t leading_rows(const Shape& s) {
  int64_t n = 1;
  for (int i = 0; i + 1 < s.rank; ++i) n *= s.dims[i];
  return n;
}

// ---- C == 0: out is the bias broadcast over rows (or zero) ----

template <class S>
__global__ void __launch_bounds__(256) broadcast_rows_kernel(S* out, const S* row, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) out[i] = row[i % cols];
}

Status broadcast_bias(const Tensor& out, const Tensor& bias, int64_t rows, int64_t cols) {
  if (!bias.defined()) {
    ZW_CUDA_TRY(cudaMemsetAsync(out.mem.ptr, 0, out.bytes(), stream()));
    return Status();
  }
  const int64_t blocks = std::min<int64_t>((rows * cols + 255) / 256, 4096);
  if (out.dtype == DataType::kFloat32)
    broadcast_rows_kernel<<<unsigned(blocks), 256, 0, stream()>>>(out.data<float>(), bias.data<float>(), rows, cols);
  else
    broadcast_rows_kernel<<<unsigned(blocks), 256, 0, stream()>>>(out.data<uint16_t>(), bias.data<uint16_t>(), rows,
                                                                  cols);
  ZW_CUDA_LAUNCH_TRY("linear_forward: bias broadcast");
  return Status();
}

// ---- bias gradient: db[c] += Σ_r dout[r, c], two deterministic stages ----

constexpr int kSumCols = 32;                 // columns per stage-1 block (threadIdx.x)
constexpr int kSumLanes = 8;                 // rows summed side by side per column (threadIdx.y)
constexpr int64_t kSumTargetBlocks = 2048;   // stage-1 blocks aimed for (row blocks × column blocks)
constexpr int64_t kSumMinRowsPerBlock = 64;  // fewer rows per block than this is not worth a partial

// Block (kSumCols, kSumLanes) sums rows [blockIdx.y·rows_per_block, +rows_per_block) of kSumCols columns:
// thread (x, y) takes rows y, y + kSumLanes, ... in order, then lane 0 adds the kSumLanes sums in order.
template <class T>
__global__ void __launch_bounds__(kSumCols* kSumLanes)
    column_partials_kernel(float* partials, const T* dout, int64_t rows, int64_t cols, int64_t rows_per_block) {
  __shared__ float lane_sums[kSumLanes][kSumCols];
  const int64_t col = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  const int64_t first = int64_t(blockIdx.y) * rows_per_block;
  const int64_t end = rows - first < rows_per_block ? rows : first + rows_per_block;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = first + threadIdx.y; r < end; r += kSumLanes) sum += to_f32(dout[r * cols + col]);
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  float total = lane_sums[0][threadIdx.x];
#pragma unroll
  for (int y = 1; y < kSumLanes; ++y) total += lane_sums[y][threadIdx.x];
  partials[int64_t(blockIdx.y) * cols + col] = total;
}

Status bias_grad(const Tensor& dbias, const Tensor& dout, int64_t rows, int64_t cols) {
  const int64_t col_blocks = (cols + kSumCols - 1) / kSumCols;
  // A function of the shape only, so the summation order (and the bits) never depend on the device.
  int64_t row_blocks = std::min((rows + kSumMinRowsPerBlock - 1) / kSumMinRowsPerBlock,
                                std::max<int64_t>(1, kSumTargetBlocks / col_blocks));
  const int64_t rows_per_block = (rows + row_blocks - 1) / row_blocks;
  row_blocks = (rows + rows_per_block - 1) / rows_per_block;  // no empty block
  const CudaContext::Impl& ctx = current();
  const size_t need = size_t(row_blocks) * size_t(cols) * sizeof(float);
  if (need > ctx.scratch_bytes)
    return Status(Code::kOutOfMemory, "linear_backward (dbias): the column sums of a [" + std::to_string(rows) + ", " +
                                          std::to_string(cols) + "] gradient need " + std::to_string(need) +
                                          " bytes of context scratch, the context has " +
                                          std::to_string(ctx.scratch_bytes) +
                                          " (raise CudaContextOptions::scratch_bytes)");
  auto* partials = static_cast<float*>(ctx.scratch);
  const dim3 grid{unsigned(col_blocks), unsigned(row_blocks)};
  const dim3 block{kSumCols, kSumLanes};
  switch (dout.dtype) {
    case DataType::kBFloat16:
      column_partials_kernel<<<grid, block, 0, ctx.stream>>>(partials, dout.data<__nv_bfloat16>(), rows, cols,
                                                             rows_per_block);
      break;
    case DataType::kFloat16:
      column_partials_kernel<<<grid, block, 0, ctx.stream>>>(partials, dout.data<__half>(), rows, cols, rows_per_block);
      break;
    default:
      column_partials_kernel<<<grid, block, 0, ctx.stream>>>(partials, dout.data<float>(), rows, cols, rows_per_block);
      break;
  }
  ZW_CUDA_LAUNCH_TRY("linear_backward: dbias partial sums");
  return add_column_sums(ctx.stream, "linear_backward: dbias final sums", ColumnSumJob{dbias.data<float>(), partials},
                         ColumnSumJob{}, row_blocks, cols);
}

// The three products of a layer with input [N, C], weight [OC, C], output [N, OC] (see the top of the file).
Gemm forward_gemm(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, int64_t N, int64_t C,
                  int64_t OC) {
  Gemm g;
  g.kind = GemmKind::kForward;
  g.ta = CUBLAS_OP_T;
  g.tb = CUBLAS_OP_N;
  g.m = OC, g.n = N, g.k = C;
  g.lda = C, g.ldb = C, g.ldd = OC;
  g.ab = g.cd = inp.dtype;
  g.a = weight.mem.ptr, g.b = inp.mem.ptr, g.d = out.mem.ptr;
  g.bias = bias.defined() ? bias.mem.ptr : nullptr;
  return g;
}

Gemm dinp_gemm(const Tensor& dinp, const Tensor& dout, const Tensor& weight, int64_t N, int64_t C, int64_t OC,
               GradInit init) {
  Gemm g;
  g.kind = GemmKind::kDinp;
  g.m = C, g.n = N, g.k = OC;
  g.lda = C, g.ldb = OC, g.ldd = C;
  g.ab = g.cd = dout.dtype;
  g.a = weight.mem.ptr, g.b = dout.mem.ptr, g.d = dinp.mem.ptr;
  g.beta = init == GradInit::kOverwrite ? 0.0f : 1.0f;
  return g;
}

Status dweight_dbias(const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp, int64_t N,
                     int64_t C, int64_t OC) {
  if (dweight.defined() && OC > 0 && C > 0) {
    Gemm g;
    g.kind = GemmKind::kDweight;
    g.tb = CUBLAS_OP_T;
    g.m = C, g.n = OC, g.k = N;
    g.lda = C, g.ldb = OC, g.ldd = C;
    g.ab = dout.dtype;
    g.cd = DataType::kFloat32;
    g.a = inp.mem.ptr, g.b = dout.mem.ptr, g.d = dweight.mem.ptr;
    g.beta = 1.0f;
    ZW_TRY(run_gemm(g));
  }
  if (dbias.defined() && OC > 0) ZW_TRY(bias_grad(dbias, dout, N, OC));
  return Status();
}

}  // namespace

Status linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const int64_t N = leading_rows(inp.shape), C = inp.shape.last(), OC = weight.shape[0];
  if (N == 0 || OC == 0) return Status();
  if (C == 0) return broadcast_bias(out, bias, N, OC);
  return run_gemm(forward_gemm(out, inp, weight, bias, N, C, OC));
}

Status linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& weight, GradInit init) {
  const int64_t N = leading_rows(dout.shape), C = weight.shape[1], OC = weight.shape[0];
  if (N == 0) return Status();
  if (dinp.defined() && OC == 0 && init == GradInit::kOverwrite)
    ZW_CUDA_TRY(cudaMemsetAsync(dinp.mem.ptr, 0, dinp.bytes(), stream()));
  if (dinp.defined() && OC > 0 && C > 0) ZW_TRY(run_gemm(dinp_gemm(dinp, dout, weight, N, C, OC, init)));
  return dweight_dbias(dweight, dbias, dout, inp, N, C, OC);
}

Status linear_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias) {
  const int64_t N = leading_rows(inp.shape), C = inp.shape.last(), OC = weight.shape[0];
  if (N == 0 || OC == 0) return Status();
  if (C > 0) {
    Gemm g = forward_gemm(out, inp, weight, bias, N, C, OC);
    g.fusion = Fusion::kGelu;
    g.aux = pre.mem.ptr;
    ZW_ASSIGN_OR_RETURN(const bool fused, fusion_available(g));
    if (fused) return run_gemm(g);
  }
  ZW_TRY(cuda::linear_forward(pre, inp, weight, bias));
  return cuda::gelu_forward(out, pre);
}

Status linear_backward_gelu(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp, const Tensor& weight, const Tensor& pre) {
  const int64_t N = leading_rows(dout.shape), C = weight.shape[1], OC = weight.shape[0];
  if (N == 0) return Status();
  if (dpre.defined() && C > 0) {
    if (OC == 0) {
      ZW_CUDA_TRY(cudaMemsetAsync(dpre.mem.ptr, 0, dpre.bytes(), stream()));
    } else {
      Gemm g = dinp_gemm(dpre, dout, weight, N, C, OC, GradInit::kOverwrite);
      g.fusion = Fusion::kDgelu;
      g.aux = pre.mem.ptr;
      ZW_ASSIGN_OR_RETURN(const bool fused, fusion_available(g));
      if (fused) {
        ZW_TRY(run_gemm(g));
      } else {
        ZW_TRY(run_gemm(dinp_gemm(dpre, dout, weight, N, C, OC, GradInit::kOverwrite)));
        ZW_TRY(cuda::gelu_backward(dpre, dpre, pre, GradInit::kOverwrite));  // in place: one thread per element
      }
    }
  }
  return dweight_dbias(dweight, dbias, dout, inp, N, C, OC);
}

}  // namespace zw::tensor::cuda
