// tests/train/scratch.h — per-process scratch paths for the trainer tests, removed when the test program ends.
//
// Paths are TempDir()/zw_train_<pid>_<name>. The pid is passed through the environment (TRAIN_TEST_TAG) so that a
// "threadsafe" death test's re-executed child works in its parent's directories. Non-goals: isolation between
// tests of one process (each test picks distinct names).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace zw::train::testing {

inline std::string run_tag() {
  if (const char* tag = std::getenv("TRAIN_TEST_TAG")) return tag;
  const std::string tag = std::to_string(::getpid());
  ::setenv("TRAIN_TEST_TAG", tag.c_str(), 1);
  return tag;
}

inline std::string scratch_prefix() { return ::testing::TempDir() + "zw_train_" + run_tag() + "_"; }

// A scratch path that does not exist yet (anything left from an earlier use is removed).
inline std::string scratch_path(const std::string& name) {
  const std::string path = scratch_prefix() + name;
  std::filesystem::remove_all(path);
  return path;
}

// Removes every scratch path of this process when the test program ends (not in a death test's child).
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string prefix = scratch_prefix();
    const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
    const std::string stem = std::filesystem::path(prefix).filename().string();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (entry.path().filename().string().rfind(stem, 0) == 0) std::filesystem::remove_all(entry.path(), ec);
  }
};

}  // namespace zw::train::testing
