// tests/fuzz/fuzz_store_frame.cc — the TCP store's wire format and request logic (src/bootstrap: store_frame,
// store_engine, store_util's counters), fed what an authenticated client can send: a byte stream cut into frames
// [u32 LE length][payload] as the server cuts it (a last, truncated frame is decoded as it is).
//
// Checked beyond "no crash, no sanitizer report": a payload that decodes as a request (or reply) re-encodes to the
// same bytes; every reply the engine produces decodes; a connection whose request failed is dropped (forget), a
// parked connection sends nothing more (the server stops reading it), as the server does.
// Non-goals: sockets, HELLO/authentication (fuzz_unique_id and the store tests cover the token), timing.
#include <chrono>
#include <vector>

#include "bootstrap/store_engine.h"
#include "bootstrap/store_frame.h"
#include "fuzz_check.h"

using namespace zw;

namespace {

void check_roundtrip(std::string_view payload) {
  Result<store::Request> request = store::decode_request(payload);
  if (request.ok()) {
    const std::string again = store::encode_request(*request);
    FUZZ_CHECK(std::string_view(again).substr(store::kHeaderBytes) == payload, "request does not re-encode as sent");
    FUZZ_CHECK(store::read_frame_length(again.data()) == payload.size(), "header length");
  } else {
    FUZZ_CHECK(request.status().code() == Code::kProtocolError, request.status().to_string());
  }
  Result<store::Reply> reply = store::decode_reply(payload);
  if (reply.ok()) {
    const std::string again = store::encode_reply(*reply);
    FUZZ_CHECK(std::string_view(again).substr(store::kHeaderBytes) == payload, "reply does not re-encode as sent");
    if (reply->op == store::Op::kError) FUZZ_CHECK(!store::reply_status(*reply).ok(), "an ERROR reply is not OK");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in = fuzz::as_text(data, size);
  store::StoreEngine engine;
  std::vector<store::StoreEngine::Out> out;
  Clock::time_point now{};
  uint64_t conn = 1;
  size_t pos = 0;
  while (size - pos >= store::kHeaderBytes) {
    size_t len = store::read_frame_length(in.data() + pos);
    pos += store::kHeaderBytes;
    len = std::min(len, size - pos);
    const std::string_view payload = in.substr(pos, len);
    pos += len;
    check_roundtrip(payload);
    Status st = engine.handle(conn, payload, now, &out);
    if (!st.ok()) {
      FUZZ_CHECK(st.code() == Code::kProtocolError, st.to_string());
      engine.forget(conn);
      ++conn;
    } else if (engine.parked(conn)) {
      ++conn;  // the server reads nothing more from a parked connection until it is answered
    }
    now += std::chrono::milliseconds(len % 97);  // lets some parked requests time out
    engine.expire(now, &out);
    for (const store::StoreEngine::Out& o : out) {
      FUZZ_CHECK(o.frame.size() >= store::kHeaderBytes, "short reply frame");
      FUZZ_CHECK(store::read_frame_length(o.frame.data()) == o.frame.size() - store::kHeaderBytes, "reply length");
      FUZZ_CHECK(store::decode_reply(std::string_view(o.frame).substr(store::kHeaderBytes)).ok(), "bad reply");
    }
    out.clear();
  }
  return 0;
}
