#include "common/file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace zw {
namespace {

std::string temp_dir() {
  char pattern[] = "/tmp/zw_file_test.XXXXXX";
  const char* made = ::mkdtemp(pattern);
  EXPECT_NE(made, nullptr);
  return made != nullptr ? made : "/tmp";
}

TEST(ReadFile, WholeFileRoundTripsEveryByte) {
  const std::string dir = temp_dir(), path = dir + "/bytes";
  std::string want;
  for (int i = 0; i < 200000; ++i) want.push_back(char(i * 131 % 256));  // several read(2) calls, NUL bytes included
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(want.data(), 1, want.size(), f), want.size());
  std::fclose(f);
  const Result<std::string> got = read_file(path, "data file");
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), want);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(ReadFile, MissingFileIsNotFoundNamingIt) {
  const Result<std::string> got = read_file("/nonexistent/zw.json", "DeepSpeed config");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kNotFound);
  EXPECT_NE(got.status().message().find("cannot open DeepSpeed config /nonexistent/zw.json"), std::string::npos)
      << got.status().to_string();
}

// A directory opens with O_RDONLY; reading it fails with EISDIR, which an ifstream turned into an uncaught exception
// (`zw_train --data /tmp` aborted): now an error that says what is wrong.
TEST(ReadFile, DirectoryIsAClearErrorNotAnException) {
  const std::string dir = temp_dir();
  const Result<std::string> got = read_file(dir, "data file");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kInvalidArgument);
  EXPECT_NE(got.status().message().find("data file " + dir + ": it is a directory, not a file"), std::string::npos)
      << got.status().to_string();
  ::rmdir(dir.c_str());
}

TEST(ReadFile, FailedReadIsAnErrorNamingTheFile) {
  const int fd = ::open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const Result<std::string> got = read_fd(fd, "checkpoint /tmp");  // read(2) on a directory: EISDIR
  ::close(fd);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kSystem);
  EXPECT_NE(got.status().message().find("cannot read checkpoint /tmp: Is a directory"), std::string::npos)
      << got.status().to_string();
}

}  // namespace
}  // namespace zw
