// Encoders and decoders of the TCP store's frames (format in store_frame.h).
#include "bootstrap/store_frame.h"

#include <cstring>

namespace zw::store {
namespace {

class Writer {
 public:
  explicit Writer(Op op) {
    out_.resize(kHeaderBytes);
    out_.push_back(static_cast<char>(op));
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string finish() {
    auto len = static_cast<uint32_t>(out_.size() - kHeaderBytes);
    for (int i = 0; i < 4; ++i) out_[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    return std::move(out_);
  }

 private:
  std::string out_;
};

// Reads fields in order; the first failure is remembered and reported by status().
class Reader {
 public:
  explicit Reader(std::string_view payload) : in_(payload) {}
  uint32_t u32(const char* what) {
    if (!need(4, what)) return 0;
    uint32_t v = read_frame_length(in_.data() + pos_);
    pos_ += 4;
    return v;
  }
  int64_t i64(const char* what) {
    if (!need(8, what)) return 0;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return static_cast<int64_t>(u);
  }
  std::string str(const char* what) {
    uint32_t n = u32(what);
    if (!need(n, what)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // Call after the last field: trailing bytes are an error.
  Status finish(const char* opname) {
    if (error_.empty() && pos_ != in_.size())
      error_ = std::to_string(in_.size() - pos_) + " trailing bytes after the fields";
    if (error_.empty()) return Status();
    return Status(Code::kProtocolError, std::string("malformed ") + opname + " frame: " + error_);
  }
  bool failed() const { return !error_.empty(); }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  bool need(size_t n, const char* what) {
    if (!error_.empty()) return false;
    if (in_.size() - pos_ >= n) return true;
    error_ = std::string("truncated ") + what + " (needs " + std::to_string(n) + " bytes, " +
             std::to_string(in_.size() - pos_) + " left)";
    return false;
  }
  std::string_view in_;
  size_t pos_ = 0;
  std::string error_;
};

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello:
      return "HELLO";
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kWait:
      return "WAIT";
    case Op::kAdd:
      return "ADD";
    case Op::kDel:
      return "DEL";
    case Op::kOk:
      return "OK";
    case Op::kValue:
      return "VALUE";
    case Op::kInt:
      return "INT";
    case Op::kBool:
      return "BOOL";
    case Op::kError:
      return "ERROR";
  }
  return "?";
}

Status empty_payload() { return Status(Code::kProtocolError, "malformed frame: empty payload (no opcode)"); }

Status unknown_opcode(uint8_t op, const char* kind) {
  return Status(Code::kProtocolError,
                "malformed frame: unknown " + std::string(kind) + " opcode " + std::to_string(op));
}

}  // namespace

uint32_t read_frame_length(const char* header) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(header[i])) << (8 * i);
  return v;
}

std::string encode_request(const Request& r) {
  Writer w(r.op);
  switch (r.op) {
    case Op::kHello:
    case Op::kDel:
      w.str(r.key);
      break;
    case Op::kSet:
      w.str(r.key);
      w.str(r.value);
      break;
    case Op::kGet:
    case Op::kAdd:
      w.str(r.key);
      w.i64(r.number);
      break;
    case Op::kWait:
      w.u32(static_cast<uint32_t>(r.keys.size()));
      for (const std::string& k : r.keys) w.str(k);
      w.i64(r.number);
      break;
    default:
      break;  // reply opcodes carry no request fields
  }
  return w.finish();
}

Result<Request> decode_request(std::string_view payload) {
  if (payload.empty()) return empty_payload();
  Request r;
  r.op = static_cast<Op>(static_cast<uint8_t>(payload[0]));
  Reader in(payload.substr(1));
  switch (r.op) {
    case Op::kHello:
      r.key = in.str("token");
      break;
    case Op::kDel:
      r.key = in.str("key");
      break;
    case Op::kSet:
      r.key = in.str("key");
      r.value = in.str("value");
      break;
    case Op::kGet:
      r.key = in.str("key");
      r.number = in.i64("timeout");
      break;
    case Op::kAdd:
      r.key = in.str("key");
      r.number = in.i64("delta");
      break;
    case Op::kWait: {
      uint32_t count = in.u32("key count");
      if (count > in.remaining() / 4) return Status(Code::kProtocolError, "malformed WAIT frame: key count too large");
      for (uint32_t i = 0; i < count && !in.failed(); ++i) r.keys.push_back(in.str("key"));
      r.number = in.i64("timeout");
      break;
    }
    default:
      return unknown_opcode(static_cast<uint8_t>(payload[0]), "request");
  }
  ZW_TRY(in.finish(op_name(r.op)));
  return r;
}

std::string encode_reply(const Reply& r) {
  Writer w(r.op);
  switch (r.op) {
    case Op::kValue:
      w.str(r.text);
      break;
    case Op::kInt:
    case Op::kBool:
      w.i64(r.number);
      break;
    case Op::kError:
      w.i64(r.number);
      w.str(r.text);
      break;
    default:
      break;  // OK has no fields
  }
  return w.finish();
}

Result<Reply> decode_reply(std::string_view payload) {
  if (payload.empty()) return empty_payload();
  Reply r;
  r.op = static_cast<Op>(static_cast<uint8_t>(payload[0]));
  Reader in(payload.substr(1));
  switch (r.op) {
    case Op::kOk:
      break;
    case Op::kValue:
      r.text = in.str("value");
      break;
    case Op::kInt:
    case Op::kBool:
      r.number = in.i64("integer");
      break;
    case Op::kError:
      r.number = in.i64("error code");
      r.text = in.str("error message");
      break;
    default:
      return unknown_opcode(static_cast<uint8_t>(payload[0]), "reply");
  }
  ZW_TRY(in.finish(op_name(r.op)));
  return r;
}

Reply error_reply(const Status& status) {
  Reply r;
  r.op = Op::kError;
  r.number = static_cast<int64_t>(status.code());
  r.text = status.message();
  return r;
}

Status reply_status(const Reply& reply) {
  auto code = static_cast<Code>(static_cast<uint16_t>(reply.number));
  bool known = reply.number > 0 && reply.number < 0x10000 && std::strcmp(code_name(code), "UNKNOWN") != 0;
  if (!known)
    return Status(Code::kProtocolError,
                  "store replied with unknown error code " + std::to_string(reply.number) + ": " + reply.text);
  return Status(code, reply.text);
}

}  // namespace zw::store
