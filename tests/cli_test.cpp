// End-to-end tests of the `redlock` command-line tool (cli/): the built binary is run as a
// child process against three real redis-servers, and the keys are checked from a second
// connection (RedisServer::command).
//
// The binary is found next to this test's build directory: build/<preset>/tests/cli_test
// -> build/<preset>/cli/redlock. Every process a test starts is put in its own process
// group, and the whole group is SIGKILLed and reaped when the test's Process object goes
// away, so no test leaves a child (or a grandchild such as `sleep`) behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using redlock::support::RedisServerGroup;
using redlock::support::Reply;
using SteadyClock = std::chrono::steady_clock;

fs::path cli_binary() {
  // build/<preset>/tests/cli_test -> build/<preset>/cli/redlock
  const fs::path self = fs::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path() / "cli" / "redlock";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Finished {
  int exit_code = -1;  // 128+N if killed by signal N
  std::string out;
  std::string err;
  bool timed_out = false;
  std::chrono::milliseconds elapsed{0};
};

// One child process: stdin from /dev/null, stdout and stderr to files, in its own process
// group. The destructor kills the whole group and reaps the child.
class Process {
 public:
  explicit Process(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    char pattern[] = "/tmp/redlock_cli_test.XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;

    // Everything the child needs is prepared before fork(): after it, only exec.
    std::vector<std::string> env_strings;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      if (std::strncmp(*entry, "REDLOCK_MASTERS=", 16) != 0) env_strings.emplace_back(*entry);
    }
    env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& entry : env_strings) envp.push_back(entry.data());
    envp.push_back(nullptr);
    const std::string binary = cli_binary().string();
    std::vector<std::string> argv_strings{binary};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : argv_strings) argv.push_back(arg.data());
    argv.push_back(nullptr);

    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = ::open((dir_ / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int err = ::open((dir_ / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (in < 0 || out < 0 || err < 0) throw std::runtime_error("open failed");

    started_ = SteadyClock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
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
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }

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
    if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
    result.out = read_file(dir_ / "stdout");
    result.err = read_file(dir_ / "stderr");
    return result;
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  SteadyClock::time_point started_;
};

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 2s) {
  const auto give_up = SteadyClock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (SteadyClock::now() >= give_up) return false;
    std::this_thread::sleep_for(5ms);
  }
}

std::string describe(const Finished& f) {
  return "exit " + std::to_string(f.exit_code) + (f.timed_out ? " (timed out)" : "") + "\nstdout: " + f.out +
         "\nstderr: " + f.err;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(cli_binary())) << "the redlock binary is not built: " << cli_binary();
  }

  // The masters were started a moment ago, so the restart guard (on by default) would not
  // count their votes yet; RestartGuardIgnoresFreshMastersByDefault covers it.
  std::vector<std::string> with_masters(std::vector<std::string> args) const {
    std::vector<std::string> all{"--no-restart-guard"};
    for (const auto& uri : masters_.uris()) {
      all.emplace_back("-m");
      all.push_back(uri);
    }
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

  // Runs `redlock -m ... args` to completion.
  Finished redlock(std::vector<std::string> args, std::chrono::milliseconds timeout = 30s) {
    Process process(with_masters(std::move(args)));
    return process.wait(timeout);
  }

  // GET key on master i: the value, or "" if the key does not exist.
  std::string value_on(std::size_t i, const std::string& key) const {
    const Reply reply = masters_[i].command({"GET", key});
    return reply.type == Reply::Type::string ? reply.str : std::string();
  }

  std::size_t masters_holding(const std::string& key) const {
    std::size_t count = 0;
    for (std::size_t i = 0; i < masters_.size(); ++i) {
      if (masters_[i].command({"EXISTS", key}).integer == 1) ++count;
    }
    return count;
  }

  std::string acquire_token(const std::string& resource, std::vector<std::string> extra = {}) {
    extra.push_back("acquire");
    extra.push_back(resource);
    const Finished f = redlock(extra);
    EXPECT_EQ(f.exit_code, 0) << describe(f);
    std::string token = f.out;
    while (!token.empty() && token.back() == '\n') token.pop_back();
    return token;
  }

  RedisServerGroup masters_{3};
};

const std::regex kToken("^[0-9a-f]{32}$");

TEST_F(CliTest, AcquirePrintsATokenAndSetsTheKeyOnEveryMaster) {
  const Finished f = redlock({"acquire", "reports"});
  ASSERT_EQ(f.exit_code, 0) << describe(f);
  ASSERT_EQ(f.out.size(), 33u) << describe(f);
  ASSERT_EQ(f.out.back(), '\n');
  const std::string token = f.out.substr(0, 32);
  EXPECT_TRUE(std::regex_match(token, kToken)) << token;
  EXPECT_TRUE(f.err.empty()) << f.err;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    // The round is decided at the quorum; the last master's SET may land a moment later.
    EXPECT_TRUE(eventually([&] { return value_on(i, "redlock:reports") == token; })) << "master " << i;
    EXPECT_GT(masters_[i].command({"PTTL", "redlock:reports"}).integer, 8000);
  }
}

TEST_F(CliTest, SecondAcquireOfAHeldResourceExits73) {
  const std::string token = acquire_token("reports");
  ASSERT_TRUE(std::regex_match(token, kToken));
  const Finished f = redlock({"--retry-count", "0", "acquire", "reports"});
  EXPECT_EQ(f.exit_code, 73) << describe(f);
  EXPECT_TRUE(f.out.empty()) << f.out;
  EXPECT_NE(f.err.find("taken"), std::string::npos) << f.err;
  EXPECT_TRUE(eventually([&] { return value_on(0, "redlock:reports") == token; }));
}

TEST_F(CliTest, ReleaseWithTheTokenExits0AndRemovesTheKey) {
  const std::string token = acquire_token("reports");
  ASSERT_TRUE(eventually([&] { return masters_holding("redlock:reports") == 3; }));
  const Finished f = redlock({"release", "reports", token});
  EXPECT_EQ(f.exit_code, 0) << describe(f);
  EXPECT_TRUE(eventually([&] { return masters_holding("redlock:reports") == 0; }));
  // Now free again: a fresh acquire succeeds at once.
  const Finished again = redlock({"--retry-count", "0", "acquire", "reports"});
  EXPECT_EQ(again.exit_code, 0) << describe(again);
}

TEST_F(CliTest, ReleaseWithAnotherTokenLeavesTheLockAlone) {
  const std::string token = acquire_token("reports");
  ASSERT_TRUE(eventually([&] { return masters_holding("redlock:reports") == 3; }));
  const Finished f = redlock({"release", "reports", "0123456789abcdef0123456789abcdef"});
  // "released" means our token is not there; the owner's key must survive.
  EXPECT_EQ(f.exit_code, 0) << describe(f);
  EXPECT_NE(f.err.find("only 0 of 3"), std::string::npos) << f.err;
  EXPECT_EQ(masters_holding("redlock:reports"), 3u);
  EXPECT_EQ(value_on(0, "redlock:reports"), token);
}

TEST_F(CliTest, RunExitsWithTheCommandsStatusAndReleases) {
  const Finished f = redlock({"run", "job", "--", "sh", "-c", "echo under-lock; exit 3"});
  EXPECT_EQ(f.exit_code, 3) << describe(f);
  EXPECT_EQ(f.out, "under-lock\n");
  EXPECT_TRUE(eventually([&] { return masters_holding("redlock:job") == 0; }));
}

TEST_F(CliTest, RunHoldsTheLockWhileTheCommandRuns) {
  // The command itself finds that a second acquire is refused while it runs.
  const std::string nested = cli_binary().string() + " -m " + masters_.uris()[0] + " -m " + masters_.uris()[1] +
                             " -m " + masters_.uris()[2] + " -q --retry-count 0 acquire job";
  const Finished f = redlock({"run", "job", "--", "sh", "-c", nested + "; echo nested=$?"});
  EXPECT_EQ(f.exit_code, 0) << describe(f);
  EXPECT_EQ(f.out, "nested=73\n") << describe(f);
}

TEST_F(CliTest, RunExtendsTheLeaseWhileTheCommandOutlivesTheTtl) {
  // A 300 ms lease leaves ~200 ms for each extend, which an overloaded machine (sanitizers,
  // parallel ctest) can miss; the tool then correctly gives up with 75. So a run that lost
  // its lease is retried (up to 3 runs); a tool that never extends fails every time.
  std::string failures;
  bool passed = false;
  for (int attempt = 1; attempt <= 3 && !passed; ++attempt) {
    const std::string resource = "job" + std::to_string(attempt);
    const std::string key = "redlock:" + resource;
    Process process(with_masters({"--ttl", "300ms", "run", resource, "--", "sleep", "1"}));
    // Timed from the grant, not from the start of the process (slow under sanitizers).
    ASSERT_TRUE(eventually([&] { return masters_holding(key) >= 2; }, 5s));
    std::this_thread::sleep_for(600ms);  // twice the ttl: only extends keep the key alive
    std::size_t holding = 0;
    long long max_pttl = 0;
    for (std::size_t i = 0; i < masters_.size(); ++i) {
      const auto pttl = masters_[i].command({"PTTL", key}).integer;
      if (pttl > 0) ++holding;
      max_pttl = std::max(max_pttl, pttl);
    }
    const Finished f = process.wait();
    EXPECT_LE(max_pttl, 300);
    if (f.exit_code == 75) {  // lease lost to scheduling delays: see above
      failures += "attempt " + std::to_string(attempt) + ": " + describe(f) + "\n";
      continue;
    }
    EXPECT_GE(holding, 2u) << "the lease was not extended on a quorum";
    EXPECT_EQ(f.exit_code, 0) << describe(f);
    EXPECT_GE(f.elapsed, 1000ms);
    EXPECT_TRUE(eventually([&] { return masters_holding(key) == 0; }));
    passed = true;
  }
  EXPECT_TRUE(passed) << failures;
}

TEST_F(CliTest, RunStopsTheCommandAndExits75WhenTheLockIsLost) {
  Process process(with_masters({"--ttl", "300ms", "run", "job", "--", "sleep", "30"}));
  ASSERT_TRUE(eventually([&] { return masters_holding("redlock:job") >= 2; }));
  for (std::size_t i = 0; i < masters_.size(); ++i) masters_[i].command({"DEL", "redlock:job"});
  const Finished f = process.wait(10s);
  EXPECT_FALSE(f.timed_out) << describe(f);
  EXPECT_EQ(f.exit_code, 75) << describe(f);
  EXPECT_LT(f.elapsed, 5s) << "the command was not terminated";
  EXPECT_NE(f.err.find("lost the lock on 'job'"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("SIGTERM"), std::string::npos) << f.err;
}

TEST_F(CliTest, RunWithoutExtendStopsTheCommandWhenTheLeaseEnds) {
  const Finished f = redlock({"--ttl", "300ms", "run", "--no-extend", "job", "--", "sleep", "30"}, 10s);
  EXPECT_EQ(f.exit_code, 75) << describe(f);
  EXPECT_GE(f.elapsed, 250ms);
  EXPECT_LT(f.elapsed, 5s);
  EXPECT_NE(f.err.find("lease ran out"), std::string::npos) << f.err;
}

TEST_F(CliTest, RunDoesNotStartTheCommandWhenTheLockIsTaken) {
  acquire_token("job");
  char dir_pattern[] = "/tmp/redlock_cli_marker.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_pattern), nullptr);
  const fs::path marker = fs::path(dir_pattern) / "ran";
  const Finished f = redlock({"--retry-count", "0", "run", "job", "--", "touch", marker.string()});
  EXPECT_EQ(f.exit_code, 73) << describe(f);
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_NE(f.err.find("the command was not run"), std::string::npos) << f.err;
  fs::remove_all(dir_pattern);
}

TEST_F(CliTest, RunForwardsSigtermToTheCommand) {
  Process process(with_masters({"run", "job", "--", "sleep", "30"}));
  ASSERT_TRUE(eventually([&] { return masters_holding("redlock:job") >= 2; }));
  std::this_thread::sleep_for(100ms);  // let the tool start the command
  ASSERT_EQ(::kill(process.pid(), SIGTERM), 0);
  const Finished f = process.wait(10s);
  EXPECT_FALSE(f.timed_out) << describe(f);
  EXPECT_EQ(f.exit_code, 128 + SIGTERM) << describe(f);  // the command died of the forwarded SIGTERM
  EXPECT_TRUE(eventually([&] { return masters_holding("redlock:job") == 0; }));
}

TEST_F(CliTest, RunReportsAMissingCommandWith127AndReleases) {
  const Finished f = redlock({"run", "job", "--", "/nonexistent/redlock-test-command"});
  EXPECT_EQ(f.exit_code, 127) << describe(f);
  EXPECT_NE(f.err.find("/nonexistent/redlock-test-command"), std::string::npos) << f.err;
  EXPECT_TRUE(eventually([&] { return masters_holding("redlock:job") == 0; }));
}

TEST_F(CliTest, BadDurationExits64NamingTheValue) {
  const Finished ttl = redlock({"--ttl", "10x", "acquire", "job"});
  EXPECT_EQ(ttl.exit_code, 64) << describe(ttl);
  EXPECT_NE(ttl.err.find("'10x'"), std::string::npos) << ttl.err;
  EXPECT_NE(ttl.err.find("--ttl"), std::string::npos) << ttl.err;

  const Finished wait = redlock({"run", "--wait", "3 parsecs", "job", "--", "true"});
  EXPECT_EQ(wait.exit_code, 64) << describe(wait);
  EXPECT_NE(wait.err.find("'3 parsecs'"), std::string::npos) << wait.err;
  EXPECT_EQ(masters_holding("redlock:job"), 0u);
}

TEST_F(CliTest, BadUriExits64NamingTheUriButNotThePassword) {
  Process bad_scheme({"-m", "http://localhost:6379", "acquire", "job"});
  const Finished scheme = bad_scheme.wait();
  EXPECT_EQ(scheme.exit_code, 64) << describe(scheme);
  EXPECT_NE(scheme.err.find("http://localhost:6379"), std::string::npos) << scheme.err;

  Process bad_port({"-m", "redis://admin:hunter2@localhost:99999", "acquire", "job"});
  const Finished port = bad_port.wait();
  EXPECT_EQ(port.exit_code, 64) << describe(port);
  EXPECT_NE(port.err.find("99999"), std::string::npos) << port.err;
  EXPECT_EQ(port.err.find("hunter2"), std::string::npos) << port.err;
}

TEST_F(CliTest, NoMastersExits64) {
  Process process({"acquire", "job"});
  const Finished f = process.wait();
  EXPECT_EQ(f.exit_code, 64) << describe(f);
  EXPECT_NE(f.err.find("REDLOCK_MASTERS"), std::string::npos) << f.err;
}

TEST_F(CliTest, MastersComeFromTheEnvironment) {
  const auto uris = masters_.uris();
  Process process({"--no-restart-guard", "acquire", "job"},
                  {"REDLOCK_MASTERS=" + uris[0] + ", " + uris[1] + "," + uris[2]});
  const Finished f = process.wait();
  EXPECT_EQ(f.exit_code, 0) << describe(f);
  EXPECT_TRUE(eventually([&] { return masters_holding("redlock:job") == 3; }));
}

TEST_F(CliTest, JsonOutputParsesAndDescribesTheGrant) {
  const Finished f = redlock({"--json", "--ttl", "5s", "acquire", "job"});
  ASSERT_EQ(f.exit_code, 0) << describe(f);
  const auto object = nlohmann::json::parse(f.out);
  EXPECT_EQ(object.at("outcome"), "acquired");
  EXPECT_EQ(object.at("key"), "redlock:job");
  EXPECT_EQ(object.at("resource"), "job");
  EXPECT_EQ(object.at("attempts"), 1);
  EXPECT_EQ(object.at("exit_code"), 0);
  EXPECT_EQ(object.at("ttl_ms"), 5000);
  EXPECT_GT(object.at("validity_ms").get<double>(), 4000.0);
  EXPECT_LE(object.at("validity_ms").get<double>(), 5000.0);
  const std::string token = object.at("token");
  EXPECT_TRUE(std::regex_match(token, kToken)) << token;
  ASSERT_EQ(object.at("masters").size(), 3u);
  for (const auto& master : object.at("masters")) {
    EXPECT_TRUE(master.contains("endpoint"));
    EXPECT_TRUE(master.contains("latency_ms"));
    EXPECT_TRUE(master.contains("error"));
    const std::string status = master.at("status");
    EXPECT_TRUE(status == "ok" || status == "pending") << status;
  }
  EXPECT_TRUE(eventually([&] { return value_on(0, "redlock:job") == token; }));

  const Finished taken = redlock({"--json", "--retry-count", "0", "acquire", "job"});
  EXPECT_EQ(taken.exit_code, 73);
  const auto refusal = nlohmann::json::parse(taken.out);
  EXPECT_EQ(refusal.at("outcome"), "taken");
  EXPECT_TRUE(refusal.at("token").is_null());
}

TEST_F(CliTest, ExtendWithTheTokenRenewsTheLease) {
  const std::string token = acquire_token("job", {"--ttl", "5s"});
  ASSERT_TRUE(eventually([&] { return masters_holding("redlock:job") == 3; }));
  const Finished f = redlock({"--ttl", "60s", "extend", "job", token});
  EXPECT_EQ(f.exit_code, 0) << describe(f);
  EXPECT_GT(masters_[0].command({"PTTL", "redlock:job"}).integer, 30000);

  const Finished wrong = redlock({"extend", "job", "0123456789abcdef0123456789abcdef"});
  EXPECT_EQ(wrong.exit_code, 75) << describe(wrong);
  const Finished gone = redlock({"extend", "never-acquired", token});
  EXPECT_EQ(gone.exit_code, 75) << describe(gone);
}

TEST_F(CliTest, AcquireWaitsForAnExpiringLock) {
  acquire_token("job", {"--ttl", "500ms"});
  const Finished f = redlock({"acquire", "--wait", "10s", "job"});
  EXPECT_EQ(f.exit_code, 0) << describe(f);
  EXPECT_TRUE(std::regex_match(f.out.substr(0, 32), kToken)) << f.out;
}

TEST_F(CliTest, UnreachableQuorumExits69) {
  masters_[1].stop();
  masters_[2].stop();
  const Finished f = redlock({"--retry-count", "0", "acquire", "job"});
  EXPECT_EQ(f.exit_code, 69) << describe(f);
  EXPECT_NE(f.err.find("quorum_unreachable"), std::string::npos) << f.err;
}

TEST_F(CliTest, RestartGuardIgnoresFreshMastersByDefault) {
  std::vector<std::string> args;
  for (const auto& uri : masters_.uris()) {
    args.emplace_back("-m");
    args.push_back(uri);
  }
  args.insert(args.end(), {"--retry-count", "0", "run", "job", "--", "true"});
  Process process(args);
  const Finished f = process.wait();
  EXPECT_EQ(f.exit_code, 69) << describe(f);
  EXPECT_NE(f.err.find("restart guard"), std::string::npos) << f.err;
  EXPECT_TRUE(eventually([&] { return masters_holding("redlock:job") == 0; }));
}

TEST_F(CliTest, HelpDocumentsTheExitCodes) {
  Process process({"--help"});
  const Finished f = process.wait();
  EXPECT_EQ(f.exit_code, 0) << describe(f);
  for (const char* text : {"64", "69", "73", "75", "EX_USAGE", "EX_TEMPFAIL", "REDLOCK_MASTERS", "run"}) {
    EXPECT_NE(f.out.find(text), std::string::npos) << text;
  }
}

}  // namespace
