// SPDX-License-Identifier: Apache-2.0
// Running the built `redlock` tool from a test (cli_test, cli_tls_test): the binary is
// build/<preset>/cli/redlock, next to the test's own directory. Each child runs with stdin
// from /dev/null, stdout and stderr to files, the environment without REDLOCK_* (plus what a
// test adds), in a process group of its own that is SIGKILLed and reaped when it is done.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace redlock::cli_testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

inline fs::path cli_binary() {
  // build/<preset>/tests/cli_test -> build/<preset>/cli/redlock
  const fs::path self = fs::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path() / "cli" / "redlock";
}


inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}


// This process's environment without the tool's own variables, plus `extra`.
inline std::vector<std::string> tool_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, "REDLOCK_", 8) != 0) out.emplace_back(*entry);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}


// argv/envp for exec: pointers into `strings`, null-terminated.
inline std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& text : strings) out.push_back(text.data());
  out.push_back(nullptr);
  return out;
}


// --no-restart-guard (the masters were just started) and -m for each master, then `args`.
inline std::vector<std::string> args_for(const std::vector<std::string>& uris, const std::vector<std::string>& args) {
  std::vector<std::string> all{"--no-restart-guard"};
  for (const auto& uri : uris) {
    all.emplace_back("-m");
    all.push_back(uri);
  }
  all.insert(all.end(), args.begin(), args.end());
  return all;
}


struct Finished {
  int exit_code = -1;  // 128+N if killed by signal N
  bool signaled = false;  // killed by a signal (not an exit with 128+N)
  std::string out;
  std::string err;
  bool timed_out = false;
  std::chrono::milliseconds elapsed{0};
};


// How a child's standard streams start. By default stdin is /dev/null and stdout and stderr
// go to files that wait() reads; a test may start it with some of them closed (as `<&-`
// does), or with stdout on another file (/dev/full).
struct Streams {
  bool close_stdin = false;
  bool close_stdout = false;
  bool close_stderr = false;
  std::string stdout_path;  // instead of the file wait() reads, if set
  bool stdout_to_closed_pipe = false;  // a pipe whose read end is closed (a reader that has gone)
  // stderr into a pipe of one page that nobody reads until the test does (stderr_pipe()):
  // a stuck log reader, a paused terminal.
  bool stderr_to_unread_pipe = false;
};

// One child process, its streams as `streams` says, in its own process group. The destructor
// kills the whole group and reaps the child.
class Process {
 public:
  explicit Process(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
                   const Streams& streams = {}) {
    char pattern[] = "/tmp/redlock_cli_test.XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;

    // Everything the child needs is prepared before fork(): after it, only exec.
    std::vector<std::string> env_strings = tool_environment(extra_env);
    std::vector<char*> envp = pointers(env_strings);
    std::vector<std::string> argv_strings{cli_binary().string()};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv = pointers(argv_strings);

    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const fs::path out_path = streams.stdout_path.empty() ? dir_ / "stdout" : fs::path(streams.stdout_path);
    int out = -1;
    if (streams.stdout_to_closed_pipe) {
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC) == 0) {
        ::close(ends[0]);
        out = ends[1];
      }
    } else {
      out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    }
    int err = -1;
    if (streams.stderr_to_unread_pipe) {
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC) == 0) {
        ::fcntl(ends[1], F_SETPIPE_SZ, 4096);
        stderr_read_ = ends[0];
        err = ends[1];
      }
    } else {
      err = ::open((dir_ / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    }
    if (in < 0 || out < 0 || err < 0) throw std::runtime_error("open failed");

    started_ = SteadyClock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      if (streams.close_stdin) ::close(0);
      if (streams.close_stdout) ::close(1);
      if (streams.close_stderr) ::close(2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(in);
    ::close(out);
    ::close(err);
    if (pid_ < 0) throw std::runtime_error("fork failed");
    ::setpgid(pid_, pid_);  // also here: whichever runs first
  }

  ~Process() {
    if (pid_ > 0 && !reaped_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stderr_read_ >= 0) ::close(stderr_read_);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Streams::stderr_to_unread_pipe: the read end (the test reads it when it wants to).
  [[nodiscard]] int stderr_pipe() const { return stderr_read_; }

  // Whether the process has exited. It stays a zombie (its pid and process group are not
  // reused) until wait().
  [[nodiscard]] bool exited() const {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
  }

  // Waits for the process to exit; after `timeout` kills its group and reports timed_out.
  Finished wait(std::chrono::milliseconds timeout = 30s) {
    Finished result;
    const auto give_up = SteadyClock::now() + timeout;
    for (;;) {
      // WNOWAIT: the exited child stays a zombie, so its process group id cannot be reused
      // before the group is killed below.
      siginfo_t info{};
      const int rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
      if (rc == 0 && info.si_pid == pid_) break;
      if (rc < 0 && errno != EINTR) throw std::runtime_error("waitid failed");
      if (SteadyClock::now() >= give_up) {
        result.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(2ms);
    }
    result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started_);
    ::kill(-pid_, SIGKILL);  // on timeout the tool; otherwise anything it left behind in its group
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
      result.exit_code = 128 + WTERMSIG(status);
      result.signaled = true;
    }
    result.out = read_file(dir_ / "stdout");
    if (stderr_read_ < 0) result.err = read_file(dir_ / "stderr");
    return result;
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
  int stderr_read_ = -1;
  bool reaped_ = false;
  SteadyClock::time_point started_;
};

// The last line of `text` that is a JSON object (run --json writes it last on stderr).
inline nlohmann::json last_json_line(const std::string& text) {
  std::istringstream lines(text);
  nlohmann::json found;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') {
      auto parsed = nlohmann::json::parse(line, nullptr, false);
      if (!parsed.is_discarded()) found = std::move(parsed);
    }
  }
  return found;
}

inline std::string describe(const Finished& f) {
  return "exit " + std::to_string(f.exit_code) + (f.timed_out ? " (timed out)" : "") + "\nstdout: " + f.out +
         "\nstderr: " + f.err;
}


// Runs the tool to completion (killed after `timeout`).
inline Finished run_tool(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
                         std::chrono::milliseconds timeout = 30s) {
  return Process(args, extra_env).wait(timeout);
}

// "redis://host:port" or "rediss://host:port" -> the same with "<userinfo>@" before the host.
inline std::string with_userinfo(const std::string& uri, const std::string& userinfo) {
  const auto scheme = uri.find("://") + 3;
  return uri.substr(0, scheme) + userinfo + "@" + uri.substr(scheme);
}

}  // namespace redlock::cli_testing
