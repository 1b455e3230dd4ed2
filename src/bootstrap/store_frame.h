// Wire format of the TCP store: frames, opcodes, and the encoders/decoders of requests and replies.
//
// Every frame is [u32 little-endian length][payload]; the length counts payload bytes only and is limited by
// the server's max_frame_bytes (ZW_STORE_MAX_FRAME). A payload is a u8 opcode followed by its fields:
// strings as [u32 LE length][bytes] (binary-safe), integers as i64 LE, key lists as [u32 LE count][strings].
//   requests: HELLO(token) SET(key, value) GET(key, timeout_ms) WAIT(keys, timeout_ms) ADD(key, delta) DEL(key)
//   replies:  OK  VALUE(value)  INT(i64)  BOOL(i64 0/1)  ERROR(i64 zw::Code, message)
// Decoders reject unknown opcodes, truncated fields and trailing bytes. Non-goals: versioning, compression.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "zerowire/status.h"

namespace zw::store {

inline constexpr size_t kHeaderBytes = 4;
// Frames before a successful HELLO may not exceed this, so strangers cannot make the server buffer much.
inline constexpr size_t kPreAuthMaxFrame = 4096;
// Smallest max_frame_bytes a server accepts (room for a HELLO and small keys).
inline constexpr size_t kMinMaxFrame = 256;

enum class Op : uint8_t {
  kHello = 1,  // token
  kSet = 2,    // key, value
  kGet = 3,    // key, timeout_ms
  kWait = 4,   // keys, timeout_ms
  kAdd = 5,    // key, delta
  kDel = 6,    // key
  kOk = 64,
  kValue = 65,  // value
  kInt = 66,    // value
  kBool = 67,   // 0 or 1
  kError = 68,  // code, message
};

struct Request {
  Op op = Op::kHello;             // one of the request opcodes
  std::string key;                // key of SET/GET/ADD/DEL; the token of HELLO
  std::string value;              // value of SET
  std::vector<std::string> keys;  // keys of WAIT
  int64_t number = 0;             // timeout_ms of GET/WAIT, delta of ADD
};

struct Reply {
  Op op = Op::kOk;     // one of the reply opcodes
  std::string text;    // value of VALUE, message of ERROR
  int64_t number = 0;  // value of INT, 0/1 of BOOL, zw::Code of ERROR
};

// Whole frames (header included).
std::string encode_request(const Request& request);
std::string encode_reply(const Reply& reply);

// Decode one payload (header stripped); kProtocolError says what was wrong.
Result<Request> decode_request(std::string_view payload);
Result<Reply> decode_reply(std::string_view payload);

// The payload length stored in a 4-byte header.
uint32_t read_frame_length(const char* header);

// ERROR reply carrying `status` (code and message).
Reply error_reply(const Status& status);
// The Status an ERROR reply carries (unknown codes become kProtocolError).
Status reply_status(const Reply& reply);

}  // namespace zw::store
