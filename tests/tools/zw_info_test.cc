// zw_info end to end: the real binary prints the version, backends, topology and, with --params, every knob.
#include <gtest/gtest.h>

#include <regex>

#include "common/knobs.h"
#include "tools/run_command.h"
#include "zerowire/config.h"

namespace zw::testing {
namespace {

const std::string kZwInfo = ZW_INFO_PATH;

TEST(ZwInfoTest, PrintsVersionBackendsAndTopology) {
  TempDir dir;
  CommandResult r = run_command(kZwInfo, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(std::string("zerowire ") + ZW_VERSION + "\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("  transports: shm"), std::string::npos) << r.out;
  for (const char* backend : {"verbs:", "rdmacm:", "cuda:", "ucx:"}) EXPECT_NE(r.out.find(backend), std::string::npos);
  EXPECT_NE(r.out.find("ucx:        not built ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("topology:\n"), std::string::npos);
  EXPECT_EQ(r.out.find("ZW_DEBUG"), std::string::npos) << "the knob table needs --params";
}

TEST(ZwInfoTest, ParamsListsEveryKnobWithValueTypeAndDefault) {
  TempDir dir;
  CommandResult r = run_command("env ZW_CHUNK_BYTES=2M ZW_AUTH_TOKEN=top-secret " + kZwInfo + " --params", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NAME"), std::string::npos);
  for (const KnobInfo& info : knob_table()) {
    EXPECT_NE(r.out.find(std::string("\n  ") + info.name + " "), std::string::npos) << info.name;
    EXPECT_NE(r.out.find(info.description), std::string::npos) << info.name;
  }
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  ZW_CHUNK_BYTES +2M +bytes +1M +pipeline)"))) << r.out;
  EXPECT_EQ(r.out.find("top-secret"), std::string::npos) << "secrets must be masked";
}

TEST(ZwInfoTest, UnknownOptionFails) {
  TempDir dir;
  EXPECT_NE(run_command(kZwInfo + " --no-such-option", dir.path()).exit_code, 0);
}

}  // namespace
}  // namespace zw::testing
