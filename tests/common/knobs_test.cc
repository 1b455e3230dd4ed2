#include "common/knobs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>

namespace zw {
namespace {

Knobs parse(const std::map<std::string, std::string>& env, std::vector<std::string>* warnings) {
  return parse_knobs(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      warnings);
}

TEST(Knobs, DefaultsParseWithoutWarnings) {
  std::vector<std::string> warnings;
  Knobs k = parse({}, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(k.timeout_s, 300);
  EXPECT_EQ(k.chunk_bytes, 1 << 20);
  EXPECT_EQ(k.transport, "shm");
}

TEST(Knobs, ValuesOverrideDefaults) {
  std::vector<std::string> warnings;
  Knobs k = parse({{"ZW_TIMEOUT", "2.5"}, {"ZW_CHUNK_BYTES", "256K"}, {"ZW_ALGO", "tree"}}, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_DOUBLE_EQ(k.timeout_s, 2.5);
  EXPECT_EQ(k.chunk_bytes, 256 << 10);
  EXPECT_EQ(k.algo, "tree");
}

TEST(Knobs, MalformedValueWarnsAndKeepsDefault) {
  std::vector<std::string> warnings;
  Knobs k = parse({{"ZW_CHUNK_BYTES", "lots"}}, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("ZW_CHUNK_BYTES"), std::string::npos);
  EXPECT_EQ(k.chunk_bytes, 1 << 20);
}

// nan and inf used to be accepted, and then every wait "timed out after 0 ms".
TEST(Knobs, NonFiniteSecondsAreMalformed) {
  for (const char* text : {"nan", "inf", "-inf", "NaN", "infinity"}) {
    std::vector<std::string> warnings;
    Knobs k = parse({{"ZW_TIMEOUT", text}}, &warnings);
    ASSERT_EQ(warnings.size(), 1u) << text;
    EXPECT_NE(warnings[0].find("ZW_TIMEOUT"), std::string::npos) << warnings[0];
    EXPECT_EQ(k.timeout_s, 300.0) << text;
  }
}

TEST(Knobs, TableHasUniqueDescribedZwNames) {
  std::set<std::string> names;
  Knobs k = parse({}, nullptr);
  for (const KnobInfo& info : knob_table()) {
    EXPECT_EQ(std::string(info.name).rfind("ZW_", 0), 0u);
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_GT(std::string(info.description).size(), 10u) << info.name;
    EXPECT_NE(knob_value_string(k, info).find('='), std::string::npos);
  }
}

TEST(Knobs, SecretsAreMasked) {
  Knobs k = parse({{"ZW_AUTH_TOKEN", "hunter2"}}, nullptr);
  for (const KnobInfo& info : knob_table())
    if (std::string(info.name) == "ZW_AUTH_TOKEN") {
      EXPECT_EQ(knob_value_string(k, info).find("hunter2"), std::string::npos);
    }
}

TEST(Knobs, ParseBytes) {
  int64_t v = 0;
  EXPECT_TRUE(parse_bytes("4G", &v));
  EXPECT_EQ(v, 4LL << 30);
  EXPECT_FALSE(parse_bytes("4X", &v));
  EXPECT_FALSE(parse_bytes("", &v));
  EXPECT_FALSE(parse_bytes("-1", &v));
}

// A fallback source installed once the knobs were read comes too late: set_knob_fallback says so, and the knobs keep
// the values they were read with (libzwnccl installs its NCCL_* translation at load, before any read).
TEST(Knobs, AFallbackAfterTheFirstReadIsRefused) {
  const Knobs& before = knobs();
  EXPECT_FALSE(set_knob_fallback([](const char*) -> const char* { return "TRACE"; }));
  EXPECT_EQ(&knobs(), &before);
  EXPECT_EQ(knobs().debug, before.debug);
  set_knob_fallback(nullptr);
}

// File-name knobs: %h host, %p pid, %r rank (kept without one), %% a percent sign, anything else as written.
TEST(Knobs, PathPatternsExpandHostPidRankAndPercent) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(expand_path_pattern("/tmp/zw.%h.%p.log"), "/tmp/zw." + std::string(host) + "." + pid + ".log");
  EXPECT_EQ(expand_path_pattern("m/rank%r.json", 3), "m/rank3.json");
  EXPECT_EQ(expand_path_pattern("m/rank%r.json"), "m/rank%r.json");
  EXPECT_EQ(expand_path_pattern("100%%-%x-%"), "100%-%x-%");
}

}  // namespace
}  // namespace zw
