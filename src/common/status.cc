// Status and the small type tables of zerowire/types.h.
#include "zerowire/status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "zerowire/types.h"

namespace zw {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kUnsupported: return "UNSUPPORTED";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kConnectionFailed: return "CONNECTION_FAILED";
    case Code::kConnectionLost: return "CONNECTION_LOST";
    case Code::kTimeout: return "TIMEOUT";
    case Code::kAuthFailed: return "AUTH_FAILED";
    case Code::kProtocolError: return "PROTOCOL_ERROR";
    case Code::kRemoteAccess: return "REMOTE_ACCESS";
    case Code::kEndpointError: return "ENDPOINT_ERROR";
    case Code::kDesync: return "DESYNC";
    case Code::kPeerFailed: return "PEER_FAILED";
    case Code::kAborted: return "ABORTED";
    case Code::kSystem: return "SYSTEM";
    case Code::kOutOfMemory: return "OUT_OF_MEMORY";
    case Code::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

Status::Status(Code code, std::string message) {
  if (code != Code::kOk) state_ = std::make_shared<const State>(State{code, std::move(message), {}});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s = std::string(code_name(state_->code)) + ": " + state_->message;
  if (!state_->breadcrumbs.empty()) s += " [at " + state_->breadcrumbs + "]";
  return s;
}

Status Status::at(const char* file, int line) const {
  if (ok()) return *this;
  const char* base = std::strrchr(file, '/');
  std::string crumb = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  Status copy;
  copy.state_ = std::make_shared<const State>(
      State{state_->code, state_->message, state_->breadcrumbs.empty() ? crumb : state_->breadcrumbs + " <- " + crumb});
  return copy;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  Status copy;
  copy.state_ = std::make_shared<const State>(State{state_->code, context + ": " + state_->message, state_->breadcrumbs});
  return copy;
}

Status system_error(const std::string& what, int err) {
  return Status(err == ENOMEM ? Code::kOutOfMemory : Code::kSystem, what + ": " + std::strerror(err));
}

namespace {
constexpr const char* kDtypeNames[kNumDataTypes] = {"float", "half", "bfloat16", "double", "int32", "int64", "uint8"};
constexpr const char* kOpNames[kNumReduceOps] = {"sum", "prod", "min", "max", "avg"};
}  // namespace

// Out-of-range values come from peers' bytes (a GPU descriptor, a monitor record): a name, never an overread.
const char* dtype_name(DataType dtype) {
  const int i = static_cast<int>(dtype);
  return i < kNumDataTypes ? kDtypeNames[i] : "?";
}

Result<DataType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDataTypes; ++i)
    if (name == kDtypeNames[i]) return static_cast<DataType>(i);
  if (name == "float32") return DataType::kFloat32;
  if (name == "float16" || name == "fp16") return DataType::kFloat16;
  if (name == "bf16") return DataType::kBFloat16;
  if (name == "float64") return DataType::kFloat64;
  return Status(Code::kInvalidArgument, "unknown data type '" + std::string(name) +
                                            "': use float, half, bfloat16, double, int32, int64 or uint8");
}

const char* reduce_op_name(ReduceOp op) {
  const int i = static_cast<int>(op);
  return i < kNumReduceOps ? kOpNames[i] : "?";
}

Result<ReduceOp> parse_reduce_op(std::string_view name) {
  for (int i = 0; i < kNumReduceOps; ++i)
    if (name == kOpNames[i]) return static_cast<ReduceOp>(i);
  return Status(Code::kInvalidArgument,
                "unknown reduction op '" + std::string(name) + "': use sum, prod, min, max or avg");
}

bool reduce_op_supported(DataType dtype, ReduceOp op) {
  bool integer = dtype == DataType::kInt32 || dtype == DataType::kInt64 || dtype == DataType::kUInt8;
  return !(integer && op == ReduceOp::kAvg);
}

const char* mem_kind_name(MemKind kind) { return kind == MemKind::kHost ? "host" : "cuda"; }

}  // namespace zw
