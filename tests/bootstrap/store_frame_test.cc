// The store's wire format and shared helpers: round trips, rejection of every truncation, trailing bytes and
// unknown opcodes; timeout messages, counter arithmetic and token comparison.
#include "bootstrap/store_frame.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bootstrap/store_util.h"

namespace zw::store {
namespace {

std::string payload_of(const std::string& frame) {
  EXPECT_GE(frame.size(), kHeaderBytes);
  EXPECT_EQ(read_frame_length(frame.data()), frame.size() - kHeaderBytes);
  return frame.substr(kHeaderBytes);
}

std::vector<Request> sample_requests() {
  std::vector<Request> out(6);
  out[0].op = Op::kHello, out[0].key = "tok";
  out[1].op = Op::kSet, out[1].key = std::string("k\0", 2), out[1].value = "v\xff";
  out[2].op = Op::kGet, out[2].key = "g", out[2].number = 30000;
  out[3].op = Op::kWait, out[3].keys = {"a", "", "ccc"}, out[3].number = -1;
  out[4].op = Op::kAdd, out[4].key = "c", out[4].number = INT64_MIN;
  out[5].op = Op::kDel, out[5].key = "";
  return out;
}

TEST(StoreFrame, RequestsRoundTrip) {
  for (const Request& r : sample_requests()) {
    auto back = decode_request(payload_of(encode_request(r)));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->op, r.op);
    EXPECT_EQ(back->key, r.key);
    EXPECT_EQ(back->value, r.value);
    EXPECT_EQ(back->keys, r.keys);
    EXPECT_EQ(back->number, r.number);
  }
}

TEST(StoreFrame, RepliesRoundTrip) {
  std::vector<Reply> replies(5);
  replies[0].op = Op::kOk;
  replies[1].op = Op::kValue, replies[1].text = std::string("\0x", 2);
  replies[2].op = Op::kInt, replies[2].number = -42;
  replies[3].op = Op::kBool, replies[3].number = 1;
  replies[4] = error_reply(Status(Code::kTimeout, "late"));
  for (const Reply& r : replies) {
    auto back = decode_reply(payload_of(encode_reply(r)));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->op, r.op);
    EXPECT_EQ(back->text, r.text);
    EXPECT_EQ(back->number, r.number);
  }
  Status st = reply_status(replies[4]);
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_EQ(st.message(), "late");
}

TEST(StoreFrame, EveryTruncationAndAnyTrailingByteIsRejected) {
  for (const Request& r : sample_requests()) {
    std::string p = payload_of(encode_request(r));
    for (size_t n = 0; n < p.size(); ++n) {
      auto d = decode_request(p.substr(0, n));
      ASSERT_FALSE(d.ok()) << "op " << int(r.op) << " cut to " << n << " bytes";
      EXPECT_EQ(d.status().code(), Code::kProtocolError);
    }
    auto d = decode_request(p + "!");
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("trailing"), std::string::npos) << d.status().message();
  }
}

TEST(StoreFrame, UnknownOpcodesAreRejected) {
  EXPECT_EQ(decode_request(std::string(1, '\x77')).status().code(), Code::kProtocolError);
  EXPECT_EQ(decode_request(std::string(1, static_cast<char>(Op::kOk))).status().code(), Code::kProtocolError);
  EXPECT_EQ(decode_reply(std::string(1, static_cast<char>(Op::kSet))).status().code(), Code::kProtocolError);
  Reply weird;
  weird.op = Op::kError;
  weird.number = 12345;
  EXPECT_EQ(reply_status(weird).code(), Code::kProtocolError);
}

TEST(StoreUtil, TimeoutMessagesNameKeysAndRanks) {
  EXPECT_EQ(key_timeout({"addr/3"}, 1, 30000).message(),
            "timed out after 30 s waiting for store key 'addr/3' (is rank 3 running?)");
  EXPECT_EQ(key_timeout({"ready"}, 1, 1500).message(),
            "timed out after 1.5 s waiting for store key 'ready' (is every rank running?)");
  EXPECT_EQ(key_timeout({"a", "b"}, 3, 250).message(),
            "timed out after 250 ms waiting for store keys 'a', 'b' (2 of 3 keys missing; is every rank running?)");
}

TEST(StoreUtil, CounterArithmetic) {
  std::string v = "41", bad = "4x", neg = "-5";
  EXPECT_EQ(add_to_counter("k", nullptr, 7).value(), 7);
  EXPECT_EQ(add_to_counter("k", &v, 1).value(), 42);
  EXPECT_EQ(add_to_counter("k", &neg, -5).value(), -10);
  EXPECT_EQ(add_to_counter("k", &bad, 1).status().code(), Code::kInvalidArgument);
  std::string max = std::to_string(INT64_MAX);
  EXPECT_EQ(add_to_counter("k", &max, 1).status().code(), Code::kInvalidArgument);
}

TEST(StoreUtil, TokensCompareByContentAndLength) {
  EXPECT_TRUE(tokens_equal("secret", "secret"));
  EXPECT_FALSE(tokens_equal("secret", "secreT"));
  EXPECT_FALSE(tokens_equal("secret", "secret2"));
  EXPECT_FALSE(tokens_equal("secret", "secre"));
  EXPECT_FALSE(tokens_equal("", "x"));
  EXPECT_FALSE(tokens_equal(std::string("a\0", 2), "a"));
}

TEST(StoreUtil, DeadlinesSaturate) {
  auto now = Clock::now();
  EXPECT_EQ(deadline_after(now, kForeverMs), Clock::time_point::max());
  EXPECT_EQ(deadline_after(now, INT64_MAX), Clock::time_point::max());
  EXPECT_EQ(deadline_after(now, -5), now);
  EXPECT_TRUE(to_deadline(Store::Timeout::max()).is_never());
  EXPECT_FALSE(to_deadline(Store::Timeout(10)).is_never());
}

TEST(StoreUtil, TimeoutsFromSecondsSaturate) {
  EXPECT_EQ(timeout_from_seconds(1.5), Store::Timeout(1500));
  EXPECT_EQ(timeout_from_seconds(300), Store::Timeout(300000));
  EXPECT_EQ(timeout_from_seconds(1e30), Store::Timeout(kForeverMs));  // s * 1000 would overflow int64
  EXPECT_EQ(timeout_from_seconds(1e9), Store::Timeout(kForeverMs));   // ~31 years: past "forever" (~10)
  EXPECT_EQ(timeout_from_seconds(0), Store::Timeout(0));
  EXPECT_EQ(timeout_from_seconds(-3), Store::Timeout(0));
  EXPECT_EQ(timeout_from_seconds(std::nan("")), Store::Timeout(0));
  EXPECT_TRUE(to_deadline(timeout_from_seconds(1e30)).is_never());
}

}  // namespace
}  // namespace zw::store
