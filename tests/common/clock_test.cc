#include "common/clock.h"

#include <gtest/gtest.h>

#include <limits>

namespace zw {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(Deadline, CountsFromTheReadingItIsGiven) {
  const Clock::time_point then = Clock::now() - std::chrono::seconds(5);
  EXPECT_EQ(Deadline::after(milliseconds(250), then).time_point(), then + milliseconds(250));
  EXPECT_EQ(Deadline::after_seconds(1.5, then).time_point(), then + milliseconds(1500));
  // Counted from five seconds ago, two seconds are over, ten are not.
  EXPECT_TRUE(Deadline::after_seconds(2, then).expired());
  EXPECT_FALSE(Deadline::after_seconds(10, then).expired());
}

TEST(Deadline, NothingLeftIsTheReadingItself) {
  const Clock::time_point then = Clock::now();
  EXPECT_EQ(Deadline::after(nanoseconds(0), then).time_point(), then);
  EXPECT_EQ(Deadline::after(nanoseconds(-7), then).time_point(), then);
  EXPECT_EQ(Deadline::after_seconds(-1.0, then).time_point(), then);
  EXPECT_EQ(Deadline::after_seconds(0, then).remaining(), nanoseconds(0));
}

TEST(Deadline, LongerThanTheClockCountsIsNever) {
  const Clock::time_point now = Clock::now();
  EXPECT_TRUE(Deadline::after(milliseconds::max(), now).is_never());  // "no limit": its nanoseconds overflow int64
  EXPECT_TRUE(Deadline::after(std::chrono::hours(24 * 365 * 300), now).is_never());
  EXPECT_TRUE(Deadline::after(nanoseconds::max(), now).is_never());
  EXPECT_TRUE(Deadline::after_seconds(1e300, now).is_never());
  EXPECT_TRUE(Deadline::after_seconds(std::numeric_limits<double>::infinity(), now).is_never());
  EXPECT_FALSE(Deadline::after_seconds(std::numeric_limits<double>::quiet_NaN(), now).is_never());  // no time left
  // The longest the settings allow (1e9 s, ~31 years) is still a deadline, at the right time.
  EXPECT_EQ(Deadline::after_seconds(1e9, now).time_point(), now + std::chrono::seconds(1000000000));
  EXPECT_EQ(Deadline::after(std::chrono::hours(24 * 365 * 100), now).time_point(),
            now + std::chrono::hours(24 * 365 * 100));
}

TEST(Deadline, WithoutAReadingCountsFromNow) {
  const Clock::time_point before = Clock::now();
  const Deadline d = Deadline::after(milliseconds(100));
  const Clock::time_point after = Clock::now();
  EXPECT_GE(d.time_point(), before + milliseconds(100));
  EXPECT_LE(d.time_point(), after + milliseconds(100));
  EXPECT_FALSE(d.is_never());
  EXPECT_TRUE(Deadline::never().is_never());
  EXPECT_FALSE(Deadline::never().expired());
}

}  // namespace
}  // namespace zw
