// Test helper: runs a shell command with stdout and stderr captured to files and reports its exit code,
// output and duration. Used by the tools tests, which run zwrun and zw_info as real processes.
// Non-goals: interactive input, quoting arbitrary strings (callers pass simple arguments).
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace zw::testing {

struct CommandResult {
  int exit_code = -1;  // the command's exit code; 128+signal when a signal ended it
  std::string out;     // everything it wrote to stdout
  std::string err;     // everything it wrote to stderr
  double seconds = 0;  // wall-clock duration
};

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

// Runs `command` through /bin/sh in `dir`, with its output in dir/out and dir/err.
inline CommandResult run_command(const std::string& command, const std::filesystem::path& dir) {
  std::string line = "cd '" + dir.string() + "' && " + command + " >out 2>err";
  auto start = std::chrono::steady_clock::now();
  int status = std::system(line.c_str());
  CommandResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  result.out = read_file(dir / "out");
  result.err = read_file(dir / "err");
  return result;
}

// A fresh temporary directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "zw_tools_test.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace zw::testing
