// zwrun's process spawning: fork, set up the child's process group, pipes and environment, exec.
//
// zwrun has a store-server thread, so between fork and exec the child calls only async-signal-safe
// functions; everything it needs (argv, envp, descriptors) is prepared by the parent before fork.
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>

namespace zw::zwrun {
namespace {

// The variables zwrun sets for every rank (ZW_TRANSPORT only when --transport was given).
constexpr std::array<const char*, 6> kLaunchVariables = {
    "ZW_RANK", "ZW_WORLD_SIZE", "ZW_LOCAL_RANK", "ZW_LOCAL_WORLD_SIZE", "ZW_STORE_ADDR", "ZW_AUTH_TOKEN"};

bool has_name(const char* entry, const char* name) {
  size_t n = std::strlen(name);
  return std::strncmp(entry, name, n) == 0 && entry[n] == '=';
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

struct Pipe {
  net::Fd read;
  net::Fd write;
};

Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return system_error("zwrun: pipe2", errno);
  return Pipe{net::Fd(fds[0]), net::Fd(fds[1])};
}

// The descriptors a child installs before exec.
struct ChildFds {
  int stdin_fd;   // /dev/null
  int stdout_fd;  // write end of the stdout pipe
  int stderr_fd;  // write end of the stderr pipe
  int status_fd;  // close-on-exec pipe that receives errno when exec fails
};

// Runs in the forked child: async-signal-safe calls only.
[[noreturn]] void exec_child(const ChildFds& fds, char* const* argv, char* const* envp, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // zwrun died before the death signal was armed
  ::dup2(fds.stdin_fd, STDIN_FILENO);
  ::dup2(fds.stdout_fd, STDOUT_FILENO);
  ::dup2(fds.stderr_fd, STDERR_FILENO);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, nullptr);  // zwrun ignores SIGPIPE; the program gets the default back
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // zwrun blocks the signals it reads through a signalfd
  ::execvpe(argv[0], argv, envp);
  int err = errno;
  ssize_t ignored = ::write(fds.status_fd, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

// Waits until the child has exec'd (the status pipe closes empty) or reports why it could not.
Status await_exec(int status_fd, pid_t pid, const std::string& program) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(status_fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof child_errno)) return Status();
  ::waitpid(pid, nullptr, 0);
  Code code = child_errno == ENOENT ? Code::kNotFound : Code::kSystem;
  return Status(code, "cannot execute '" + program + "': " + std::strerror(child_errno));
}

}  // namespace

std::vector<std::string> rank_environment(const LaunchSpec& spec, int rank, const char* const* base) {
  std::vector<std::string> env;
  for (const char* const* e = base; e != nullptr && *e != nullptr; ++e) {
    bool replaced = spec.transport.empty() ? false : has_name(*e, "ZW_TRANSPORT");
    for (const char* name : kLaunchVariables) replaced = replaced || has_name(*e, name);
    for (const std::string& x : spec.extra) replaced = replaced || has_name(*e, x.substr(0, x.find('=')).c_str());
    if (!replaced) env.emplace_back(*e);
  }
  env.push_back("ZW_RANK=" + std::to_string(rank));
  env.push_back("ZW_WORLD_SIZE=" + std::to_string(spec.world_size));
  env.push_back("ZW_LOCAL_RANK=" + std::to_string(rank));
  env.push_back("ZW_LOCAL_WORLD_SIZE=" + std::to_string(spec.world_size));
  env.push_back("ZW_STORE_ADDR=" + spec.store_address);
  env.push_back("ZW_AUTH_TOKEN=" + spec.auth_token);
  if (!spec.transport.empty()) env.push_back("ZW_TRANSPORT=" + spec.transport);
  env.insert(env.end(), spec.extra.begin(), spec.extra.end());
  return env;
}

Result<ChildProcess> spawn_rank(const LaunchSpec& spec, int rank) {
  if (spec.command.empty()) return Status(Code::kInvalidArgument, "no program to run");
  std::vector<std::string> env = rank_environment(spec, rank, environ);
  std::vector<std::string> args = spec.command;
  std::vector<char*> envp = pointers(env);
  std::vector<char*> argv = pointers(args);

  ZW_ASSIGN_OR_RETURN(Pipe out, make_pipe());
  ZW_ASSIGN_OR_RETURN(Pipe err, make_pipe());
  ZW_ASSIGN_OR_RETURN(Pipe status, make_pipe());
  ZW_TRY(net::set_nonblocking(out.read.get()));
  ZW_TRY(net::set_nonblocking(err.read.get()));
  net::Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) return system_error("zwrun: open /dev/null", errno);

  ChildFds fds{devnull.get(), out.write.get(), err.write.get(), status.write.get()};
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return system_error("zwrun: fork", errno);
  if (pid == 0) exec_child(fds, argv.data(), envp.data(), parent);

  ::setpgid(pid, pid);  // also done by the child; whichever runs first wins the race harmlessly
  out.write.reset();
  err.write.reset();
  status.write.reset();
  ZW_TRY(await_exec(status.read.get(), pid, spec.command[0]));
  ChildProcess child;
  child.rank = rank;
  child.pid = pid;
  child.out = std::move(out.read);
  child.err = std::move(err.read);
  return child;
}

}  // namespace zw::zwrun
