#include "zerowire/status.h"

#include <gtest/gtest.h>

#include "zerowire/types.h"

namespace zw {
namespace {

Status fails() { return Status(Code::kTimeout, "peer 3 did not answer"); }
Status passes_through() {
  ZW_TRY(fails());
  return Status();
}
Result<int> make_value(bool ok) {
  if (!ok) return Status(Code::kInvalidArgument, "bad");
  return 42;
}
Status use_value(bool ok, int* out) {
  ZW_ASSIGN_OR_RETURN(*out, make_value(ok));
  return Status();
}

TEST(Status, OkIsDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(Status, TryAddsBreadcrumbAndKeepsMessage) {
  Status s = passes_through();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_TRUE(s.is_link_error());
  EXPECT_EQ(s.message(), "peer 3 did not answer");
  EXPECT_NE(s.to_string().find("status_test.cc:"), std::string::npos) << s.to_string();
}

TEST(Status, AssignOrReturn) {
  int v = 0;
  EXPECT_TRUE(use_value(true, &v).ok());
  EXPECT_EQ(v, 42);
  Status s = use_value(false, &v);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(s.is_usage_error());
}

TEST(Status, WithContextPrefixes) {
  Status s = Status(Code::kPeerFailed, "gone").with_context("rank 2");
  EXPECT_EQ(s.message(), "rank 2: gone");
  EXPECT_TRUE(s.is_communicator_error());
}

TEST(Types, DtypeNamesRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto dt = static_cast<DataType>(i);
    auto parsed = parse_dtype(dtype_name(dt));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(parsed.value(), dt);
    EXPECT_GT(dtype_size(dt), 0u);
  }
  EXPECT_FALSE(parse_dtype("float128").ok());
  EXPECT_FALSE(reduce_op_supported(DataType::kInt32, ReduceOp::kAvg));
  EXPECT_TRUE(reduce_op_supported(DataType::kBFloat16, ReduceOp::kAvg));
}

TEST(Types, RangesOverlap) {
  char buf[16];
  EXPECT_TRUE(ranges_overlap(buf, 8, buf + 4, 8));
  EXPECT_FALSE(ranges_overlap(buf, 8, buf + 8, 8));
  EXPECT_FALSE(ranges_overlap(buf, 0, buf, 8));
}

}  // namespace
}  // namespace zw
