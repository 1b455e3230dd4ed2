// Tensor and option conversion and error mapping of the torch backend (see tensors.h).
#include "tensors.h"

#include <c10/util/Exception.h>

namespace zwt {

std::optional<zw::DataType> zw_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return zw::DataType::kFloat32;
    case at::kHalf: return zw::DataType::kFloat16;
    case at::kBFloat16: return zw::DataType::kBFloat16;
    case at::kDouble: return zw::DataType::kFloat64;
    case at::kInt: return zw::DataType::kInt32;
    case at::kLong: return zw::DataType::kInt64;
    case at::kByte: return zw::DataType::kUInt8;
    default: return std::nullopt;
  }
}

Payload move_payload(const at::Tensor& t) {
  if (auto d = zw_dtype(t.scalar_type())) return {*d, static_cast<size_t>(t.numel())};
  return {zw::DataType::kUInt8, static_cast<size_t>(t.nbytes())};
}

Payload reduce_payload(const char* op, const at::Tensor& t) {
  auto d = zw_dtype(t.scalar_type());
  TORCH_CHECK_TYPE(d.has_value(), "zerowire ", op, ": cannot reduce dtype ", t.scalar_type(),
                   " (supported: float32, float16, bfloat16, float64, int32, int64, uint8)");
  return {*d, static_cast<size_t>(t.numel())};
}

Reduction reduction(const char* op, const c10d::ReduceOp& r) {
  Reduction out;
  switch (r.op_) {
    case c10d::ReduceOp::SUM: out.op = zw::ReduceOp::kSum; break;
    case c10d::ReduceOp::AVG: out.op = zw::ReduceOp::kAvg; break;
    case c10d::ReduceOp::PRODUCT: out.op = zw::ReduceOp::kProd; break;
    case c10d::ReduceOp::MIN: out.op = zw::ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: out.op = zw::ReduceOp::kMax; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(r.supplement_.get());
      TORCH_CHECK_VALUE(s != nullptr, "zerowire ", op, ": PREMUL_SUM without its factor (make it with "
                        "torch.distributed._make_nccl_premul_sum)");
      if (s->tensor_factor.defined()) {
        out.factor = s->tensor_factor;
      } else {
        out.premul = s->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "zerowire ", op, ": reduction op ", static_cast<int>(r.op_),
                                  " (bitwise BAND/BOR/BXOR) is not supported; use SUM, AVG, PREMUL_SUM, MIN, MAX "
                                  "or PRODUCT");
  }
  return out;
}

zw::MemRef mem(const at::Tensor& t) {
  zw::MemRef m;
  m.ptr = t.data_ptr();
  m.bytes = t.nbytes();
  if (t.is_cuda()) {
    m.kind = zw::MemKind::kCudaDevice;
    m.device = t.device().index();
  }
  return m;
}

void check_tensor(const char* op, const char* what, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.defined(), "zerowire ", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "zerowire ", op, ": ", what, " is a ", t.layout(),
                    " tensor; only dense tensors are supported");
  TORCH_CHECK_VALUE(t.is_cpu() || t.is_cuda(), "zerowire ", op, ": ", what, " is on ", t.device(),
                    "; zerowire takes CPU and CUDA tensors");
  TORCH_CHECK_VALUE(t.is_contiguous(), "zerowire ", op, ": ", what, " is not contiguous (sizes ", t.sizes(),
                    ", strides ", t.strides(), "); pass tensor.contiguous()");
}

void check_like(const char* op, const char* what, const at::Tensor& ref, const at::Tensor& t) {
  check_tensor(op, what, t);
  TORCH_CHECK_VALUE(t.device() == ref.device(), "zerowire ", op, ": ", what, " is on ", t.device(),
                    " but the first tensor is on ", ref.device(), "; all tensors of one operation must share a device");
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), "zerowire ", op, ": ", what, " has dtype ",
                    t.scalar_type(), " but the first tensor has ", ref.scalar_type());
}

void check_numel(const char* op, const char* what, const at::Tensor& t, int64_t numel) {
  TORCH_CHECK_VALUE(t.numel() == numel, "zerowire ", op, ": ", what, " has ", t.numel(), " elements (shape ",
                    t.sizes(), ") but ", numel, " are needed");
}

void check_count(const char* op, const char* what, size_t got, size_t n) {
  TORCH_CHECK_VALUE(got == n, "zerowire ", op, ": expected ", n, " ", what, ", got ", got);
}

std::exception_ptr make_error(const std::string& op, uint64_t seq, const zw::Status& s) {
  std::string msg = "zerowire " + op + " (operation " + std::to_string(seq) + " of this group) failed: " +
                    s.to_string();
  try {
    if (s.code() == zw::Code::kUnsupported) {
      C10_THROW_ERROR(NotImplementedError, msg);
    } else if (s.is_usage_error()) {
      C10_THROW_ERROR(ValueError, msg);
    } else {
      C10_THROW_ERROR(DistBackendError, msg);
    }
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;  // not reached
}

void raise(const std::string& op, uint64_t seq, const zw::Status& status) {
  std::rethrow_exception(make_error(op, seq, status));
}

}  // namespace zwt
