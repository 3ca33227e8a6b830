// What an operator must be able to trust (issue 41): an agent never takes a live agent's Unix socket, the tools end
// quietly when their reader goes away (and gp-run keeps its program), an explicit but empty pool is an error, and
// administration refusals say what was refused and how to be allowed. Real agents and tools, real pipes.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <capnp/ez-rpc.h>

#include "client/lease_core.h"
#include "client/session_client.h"
#include "integration/fake_agent.h"
#include "integration/helpers.h"
#include "pool.capnp.h"

namespace gpupool::testing {
namespace {

using std::chrono::seconds;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool IsSocket(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// Whether an agent answers at `address`.
bool Answers(const std::string& address) {
  PoolState state = Connect({address}).State();
  return state.servers.size() == 1 && state.servers[0].up;
}

// A socket file nobody listens on: what a SIGKILLed agent leaves.
void LeaveDeadSocket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  close(fd);
  ASSERT_TRUE(IsSocket(path));
}

std::vector<std::string> AgentArgs(const std::string& listen, const std::string& name) {
  return {ToolPath("gp-agent"), "--no-nvml", "--emu", "1", "--emu-memory", "1GiB", "--listen", listen, "--name", name};
}

TEST(OperatorsTrust, AnAgentRefusesALiveAgentsUnixSocket) {
  TempDir dir;
  const std::string path = dir.path() + "/agent.sock";
  Agent first(AgentOptions{.name = "first", .emulated = 1, .emulated_memory = "1GiB", .listen = "unix:" + path});
  ASSERT_TRUE(Answers(first.address()));

  Process second(AgentArgs("unix:" + path, "second"));
  ASSERT_EQ(second.Wait(seconds(20)), 1) << "a second agent took the path of a live one: " << second.Stderr();
  const std::string err = second.Stderr();
  EXPECT_NE(err.find("unix:" + path + " is in use"), std::string::npos) << err;
  EXPECT_NE(err.find("(pid " + std::to_string(first.process().pid()) + ")"), std::string::npos) << err;
  EXPECT_NE(err.find("Stop it first"), std::string::npos) << err;
  // The first agent and its socket are untouched, also after the second has exited.
  EXPECT_TRUE(IsSocket(path));
  EXPECT_TRUE(Answers(first.address()));
  EXPECT_EQ(Connect({first.address()}).State().servers[0].name, "first");
}

TEST(OperatorsTrust, AnAgentReplacesADeadSocketButNoOtherFile) {
  TempDir dir;
  const std::string path = dir.path() + "/agent.sock";
  LeaveDeadSocket(path);
  {
    Agent agent(AgentOptions{.name = "after-crash", .emulated = 1, .emulated_memory = "1GiB", .listen = "unix:" + path});
    EXPECT_TRUE(Answers(agent.address()));
  }

  // A regular file is somebody's data: it stays, and the agent says what is there.
  const std::string file = dir.Write("notes.txt", "precious\n");
  RunResult on_file = RunCommand(AgentArgs("unix:" + file, "file"), {}, seconds(20));
  EXPECT_EQ(on_file.code, 1) << on_file.err;
  EXPECT_NE(on_file.err.find("unix:" + file + " is a regular file, not a socket"), std::string::npos) << on_file.err;
  std::ifstream kept(file);
  std::string content;
  std::getline(kept, content);
  EXPECT_EQ(content, "precious");

  RunResult no_path = RunCommand(AgentArgs("unix:", "nowhere"), {}, seconds(20));
  EXPECT_EQ(no_path.code, 1) << no_path.err;
  EXPECT_NE(no_path.err.find("unix: names no socket path"), std::string::npos) << no_path.err;

  const std::string sub = dir.path() + "/sub";
  ASSERT_EQ(mkdir(sub.c_str(), 0700), 0);
  RunResult on_dir = RunCommand(AgentArgs("unix:" + sub, "dir"), {}, seconds(20));
  EXPECT_EQ(on_dir.code, 1) << on_dir.err;
  EXPECT_NE(on_dir.err.find("unix:" + sub + " is a directory"), std::string::npos) << on_dir.err;
  EXPECT_NE(on_dir.err.find("unix:" + sub + "/agent.sock"), std::string::npos) << on_dir.err;
}

TEST(OperatorsTrust, AnAgentRemovesOnExitOnlyTheSocketItBound) {
  TempDir dir;
  const std::string path = dir.path() + "/agent.sock";
  Agent first(AgentOptions{.name = "first", .emulated = 1, .emulated_memory = "1GiB", .listen = "unix:" + path});
  // Somebody removed the first agent's socket file, and a second agent now serves at the path.
  ASSERT_EQ(unlink(path.c_str()), 0);
  Agent second(AgentOptions{.name = "second", .emulated = 1, .emulated_memory = "1GiB", .listen = "unix:" + path});
  ASSERT_TRUE(Answers(second.address()));
  first.process().Signal(SIGTERM);
  ASSERT_EQ(first.process().Wait(seconds(20)), 0) << first.process().Stderr();
  // The first agent's exit left the second agent's socket where it was.
  EXPECT_TRUE(IsSocket(path));
  EXPECT_TRUE(Answers(second.address()));
  second.process().Signal(SIGTERM);
  ASSERT_EQ(second.process().Wait(seconds(20)), 0) << second.process().Stderr();
  EXPECT_FALSE(Exists(path)) << "an agent removes its own socket on exit";
}

// A tool run with stdout and/or stderr on a pipe whose reader has gone: exit code (128+signal) and whatever it wrote
// on stderr when stderr is kept.
struct ClosedRun {
  int code = -1;
  std::string err;
};

ClosedRun RunWithClosedOutput(const std::vector<std::string>& argv, bool close_stdout, bool close_stderr,
                              std::vector<std::string> env = {}) {
  int gone[2];
  EXPECT_EQ(pipe(gone), 0);
  close(gone[0]);  // Nobody will ever read: every write fails with EPIPE (or SIGPIPE).
  char err_path[] = "/tmp/gpupool-test-closed-XXXXXX";
  int err_fd = mkstemp(err_path);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);  // As from a shell, whatever the test runner does.
    dup2(close_stdout ? gone[1] : open("/dev/null", O_WRONLY), 1);
    dup2(close_stderr ? gone[1] : err_fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    execv(args[0], args.data());
    _exit(127);
  }
  close(gone[1]);
  close(err_fd);
  ClosedRun r;
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.err = "TIMEOUT\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream text;
  text << std::ifstream(err_path).rdbuf();
  r.err += text.str();
  unlink(err_path);
  return r;
}

TEST(OperatorsTrust, ToolsEndQuietlyWhenTheirReaderIsGone) {
  // Enough GPUs that every listing is longer than a pipe's buffer and stdio's.
  Agent agent(AgentOptions{.name = "big", .emulated = 300, .emulated_memory = "1GiB"});
  const std::string server = agent.address();
  const std::vector<std::vector<std::string>> tools = {
      {ToolPath("gp-ls"), "--servers", server},
      {ToolPath("gp-ls"), "--json", "--leases", "--servers", server},
      {ToolPath("gp-top"), "--json", "--servers", server},
      {ToolPath("gp-top"), "--once", "--servers", server},
      {ToolPath("gp-agent"), "ctl", "--server", server, "list"},
      {ToolPath("gp-bench"), "latency", "--servers", server},  // Short output, which stdio holds until exit.
  };
  for (const auto& argv : tools) {
    ClosedRun r = RunWithClosedOutput(argv, true, false);
    // As `yes | head`: ended by SIGPIPE, and nothing said about it.
    EXPECT_EQ(r.code, 128 + SIGPIPE) << argv[0] << " " << argv[1] << ": " << r.err;
    EXPECT_EQ(r.err, "") << argv[0] << " " << argv[1];
  }
  // Stdout and stderr both gone, as `gp-ls |& head -c1`: the same quiet end.
  ClosedRun both = RunWithClosedOutput({ToolPath("gp-ls"), "--servers", server}, true, true);
  EXPECT_EQ(both.code, 128 + SIGPIPE);
  // gp-top as `top -b`, a screen every interval: its reader's end ends it.
  ClosedRun loop = RunWithClosedOutput({ToolPath("gp-top"), "--interval", "0.2", "--servers", server}, true, false);
  EXPECT_EQ(loop.code, 128 + SIGPIPE) << loop.err;
  ExpectAllFree(Connect({server}).State());
}

TEST(OperatorsTrust, GpRunKeepsItsProgramAndLeaseWhenItsOutputIsGone) {
  Agent agent(AgentOptions{.name = "keep", .emulated = 1, .emulated_memory = "1GiB"});
  TempDir dir;
  const std::string mark = dir.path() + "/finished";
  // -v: gp-run writes on stderr as it allocates, while the program runs (its lease is renewed meanwhile) and after.
  ClosedRun r = RunWithClosedOutput({ToolPath("gp-run"), "-v", "--servers", agent.address(), "--", "/bin/sh", "-c",
                                     "sleep 2; echo done > " + mark + "; exit 3"},
                                    true, true, {"GPUPOOL_LOG=debug"});
  EXPECT_EQ(r.code, 3) << "gp-run did not wait for its program and return its status";
  EXPECT_TRUE(Exists(mark)) << "the program did not run to its end";
  ExpectAllFree(Connect({agent.address()}).State());
}

TEST(OperatorsTrust, GpLeaseHoldsAndReleasesWhenItsStderrIsGone) {
  Agent agent(AgentOptions{.name = "hold", .emulated = 1, .emulated_memory = "1GiB"});
  int out[2], gone[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(gone), 0);
  close(gone[0]);
  const std::vector<std::string> argv = {ToolPath("gp-lease"), "hold", "-v", "--servers", agent.address()};
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);
    dup2(out[1], 1);
    dup2(gone[1], 2);  // -v: it logs what it holds, and what it releases, on a stderr nobody reads.
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(gone[1]);
  std::string token;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') token += c;
  close(out[0]);
  EXPECT_EQ(token.rfind("gpl1:", 0), 0u) << token;
  EXPECT_EQ(LeaseCount(Connect({agent.address()}).State()), 1u);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  ExpectAllFree(Connect({agent.address()}).State());
}

// No pool from the caller's environment or home directory: unset, which is not the same as set but empty.
std::vector<std::string> NoPool(const TempDir& home) {
  return {"GPUPOOL_SERVERS", "GPUPOOL_POOL", "HOME=" + home.path()};
}

TEST(OperatorsTrust, AnExplicitButEmptyPoolIsAnErrorNotAPrivateAgent) {
  TempDir home;
  const std::string no_servers = home.Write("empty.toml", "# a pool file that names no server\n");
  struct Case {
    std::vector<std::string> env, flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"GPUPOOL_SERVERS=", "GPUPOOL_POOL"}, {}, "GPUPOOL_SERVERS is set but empty"},
      {{"GPUPOOL_SERVERS", "GPUPOOL_POOL="}, {}, "GPUPOOL_POOL is set but empty"},
      {{"GPUPOOL_SERVERS", "GPUPOOL_POOL=" + no_servers}, {}, no_servers + " names no servers"},
      {{"GPUPOOL_SERVERS", "GPUPOOL_POOL"}, {"--servers", ""}, "--servers names no servers"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> env = c.env;
    env.push_back("HOME=" + home.path());
    std::vector<std::string> argv = {ToolPath("gp-run")};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    argv.insert(argv.end(), {"--", "/bin/echo", "ran"});
    RunResult run = RunCommand(argv, env);
    EXPECT_EQ(run.code, 125) << c.says << ": " << run.err;
    EXPECT_EQ(run.out, "") << c.says << ": the command ran on a private agent";
    EXPECT_NE(run.err.find("gp-run: " + c.says), std::string::npos) << run.err;
    for (const char* tool : {"gp-ls", "gp-top", "gp-bench"}) {
      std::vector<std::string> tool_argv = {ToolPath(tool)};
      if (std::string(tool) == "gp-top") tool_argv.push_back("--json");
      tool_argv.insert(tool_argv.end(), c.flags.begin(), c.flags.end());
      RunResult r = RunCommand(tool_argv, env);
      EXPECT_EQ(r.code, 2) << tool << ", " << c.says << ": " << r.out << r.err;
      EXPECT_NE(r.err.find(std::string(tool) + ": " + c.says), std::string::npos) << tool << ": " << r.err;
    }
  }
}

TEST(OperatorsTrust, APrivateAgentSaysWhereTheCommandRuns) {
  TempDir home;
  RunResult r = RunCommand({ToolPath("gp-run"), "--", "/bin/echo", "ran"}, NoPool(home));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ran\n");
  EXPECT_EQ(r.err.rfind("gp-run: no pool configured, so a private gp-agent runs the command on ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line:\n" << r.err;
  RunResult quiet = RunCommand({ToolPath("gp-run"), "-q", "--", "/bin/echo", "ran"}, NoPool(home));
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.out, "ran\n");
  EXPECT_EQ(quiet.err, "");
}

// The Unix socket directory of the private agent that gp-run `pid` started ("" if none is found).
std::string PrivateAgentDirectory(pid_t gp_run) {
  DIR* proc = opendir("/proc");
  std::string found;
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string pid, comm, state;
    pid_t ppid = 0;
    if (!(stat >> pid >> comm >> state >> ppid) || ppid != gp_run) continue;
    std::ifstream cmdline(std::string("/proc/") + e->d_name + "/cmdline");
    for (std::string arg; std::getline(cmdline, arg, '\0');) {
      if (arg.rfind("unix:", 0) == 0) found = arg.substr(5, arg.rfind('/') - 5);
    }
  }
  if (proc) closedir(proc);
  return found;
}

TEST(OperatorsTrust, AKilledGpRunLeavesNoPrivateAgentDirectory) {
  TempDir home;
  Process run({ToolPath("gp-run"), "--", "/bin/sh", "-c", "echo ready; exec sleep 30"}, NoPool(home));
  ASSERT_EQ(run.ReadLine(seconds(20)), "ready") << run.Stderr();
  const std::string dir = PrivateAgentDirectory(run.pid());
  ASSERT_EQ(dir.rfind("/tmp/gpupool-local-", 0), 0u) << "no private agent found under gp-run " << run.pid();
  ASSERT_TRUE(Exists(dir));
  kill(run.pid(), SIGKILL);  // gp-run alone: nothing of it runs its destructors.
  EXPECT_TRUE(Eventually([&] { return !Exists(dir); }, seconds(15))) << dir << " is left behind";
}

TEST(OperatorsTrust, GpRunChecksTheCommandBeforeAllocating) {
  // No agent answers there: a command gp-run cannot run is reported before it asks the pool for anything.
  const std::vector<std::string> gp_run = {ToolPath("gp-run"), "--servers", "127.0.0.1:1", "--"};
  TempDir dir;
  const std::string not_executable = dir.Write("script.sh", "#!/bin/sh\necho hi\n");
  chmod(not_executable.c_str(), 0644);
  struct Case {
    std::string command;
    int code;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{{"/nonexistent/program", 127, "no such file"},
                                         {"gpupool-no-such-command", 127, "command not found in $PATH"},
                                         {dir.path(), 126, "it is a directory"},
                                         {not_executable, 126, "permission denied (not executable)"}}) {
    std::vector<std::string> argv = gp_run;
    argv.push_back(c.command);
    RunResult r = RunCommand(argv);
    EXPECT_EQ(r.code, c.code) << c.command << ": " << r.err;
    EXPECT_NE(r.err.find("gp-run: cannot run '" + c.command + "': " + c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nothing was allocated"), std::string::npos) << r.err;
  }
}

TEST(OperatorsTrust, ADirectoryIsNoConfigurationFile) {
  TempDir dir;
  RunResult agent = RunCommand({ToolPath("gp-agent"), "--config", dir.path(), "--no-nvml", "--emu", "1", "--listen",
                                "127.0.0.1:0"},
                               {}, seconds(20));
  EXPECT_EQ(agent.code, 2) << agent.out << agent.err;
  EXPECT_NE(agent.err.find(dir.path() + " is a directory; name the TOML file itself"), std::string::npos) << agent.err;
  RunResult run = RunCommand({ToolPath("gp-run"), "--", "/bin/echo", "ran"},
                             {"GPUPOOL_SERVERS", "GPUPOOL_POOL=" + dir.path()});
  EXPECT_EQ(run.code, 125) << run.err;
  EXPECT_NE(run.err.find(dir.path() + " is a directory"), std::string::npos) << run.err;
}

TEST(OperatorsTrust, TheReadmesAgentTomlStartsAsWritten) {
  std::ifstream readme(std::string(GPUPOOL_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << readme.rdbuf();
  const std::string all = text.str();
  size_t section = all.find("### agent.toml");
  ASSERT_NE(section, std::string::npos);
  size_t begin = all.find("```toml\n", section);
  ASSERT_NE(begin, std::string::npos);
  begin += 8;
  size_t end = all.find("\n```", begin);
  ASSERT_NE(end, std::string::npos);
  TempDir dir;
  const std::string config = dir.Write("agent.toml", all.substr(begin, end - begin + 1));
  // Its addresses moved to free loopback ports (tests run side by side), and no physical GPU looked for.
  Process agent({ToolPath("gp-agent"), "--config", config, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                 "--no-nvml"});
  std::string line = agent.ReadLine(seconds(30));
  EXPECT_NE(line.find("gp-agent gpu-a listening on 127.0.0.1:"), std::string::npos) << line << agent.Stderr();
  EXPECT_NE(line.find("with 8 device(s) (8 emulated)"), std::string::npos) << line;
}

// `gp-agent ctl` against `server`, with `token` in GPUPOOL_TOKEN ("": none).
RunResult Ctl(const std::string& server, const std::string& token, std::vector<std::string> verb,
              const TempDir& home) {
  std::vector<std::string> argv = {ToolPath("gp-agent"), "ctl", "--server", server};
  argv.insert(argv.end(), verb.begin(), verb.end());
  return RunCommand(argv, {"HOME=" + home.path(), token.empty() ? "GPUPOOL_TOKEN" : "GPUPOOL_TOKEN=" + token});
}

TEST(OperatorsTrust, AdministrationRefusalsSayWhatWasRefusedAndHowToBeAllowed) {
  TempDir dir;
  const std::string alice = "alice-token-0123456789", root = "root-token-0123456789";
  std::string tokens = dir.Write("tokens.toml", "[tokens]\nalice = \"" + alice + "\"\nroot = \"" + root + "\"\n");
  chmod(tokens.c_str(), 0600);
  Agent agent(AgentOptions{.name = "ops", .emulated = 2, .emulated_memory = "1GiB", .extra_args = {"--tokens", tokens}});
  const std::string server = agent.address();

  // Over TCP without a token, even root on this host: refused, naming the verb, and saying how to be allowed.
  RunResult none = Ctl(server, "", {"uncordon", "0"}, dir);
  EXPECT_EQ(none.code, 1);
  EXPECT_EQ(none.err.rfind("gp-agent ctl uncordon: ", 0), 0u) << none.err;
  EXPECT_NE(none.err.find("uncordon refused: over TCP an administrator proves who they are with a token, root "
                          "included"),
            std::string::npos)
      << none.err;
  EXPECT_NE(none.err.find("Unix socket"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("GPUPOOL_TOKEN"), std::string::npos) << none.err;
  RunResult drain = Ctl(server, "", {"drain"}, dir);
  EXPECT_EQ(drain.code, 1);
  EXPECT_EQ(drain.err.rfind("gp-agent ctl drain: ", 0), 0u) << drain.err;

  // A user the token proves, who is no administrator.
  RunResult not_admin = Ctl(server, alice, {"revoke", "L1"}, dir);
  EXPECT_EQ(not_admin.code, 1);
  EXPECT_NE(not_admin.err.find("revoke refused: it is for agent ops's administrators"), std::string::npos)
      << not_admin.err;
  EXPECT_NE(not_admin.err.find("alice is not one: ask for alice to be added to [auth] admins"), std::string::npos)
      << not_admin.err;
  EXPECT_FALSE(Connect({server}).State().servers[0].devices[0].cordoned);

  // Root's token: allowed over TCP.
  RunResult allowed = Ctl(server, root, {"cordon", "0"}, dir);
  EXPECT_EQ(allowed.code, 0) << allowed.err;
  EXPECT_TRUE(Connect({server}).State().servers[0].devices[0].cordoned);
  EXPECT_EQ(Ctl(server, root, {"uncordon", "0"}, dir).code, 0);

  // A verb ctl does not know is named, with the ones it knows.
  RunResult bogus = Ctl(server, root, {"uncordonn"}, dir);
  EXPECT_EQ(bogus.code, 2);
  EXPECT_NE(bogus.err.find("gp-agent ctl: unknown command 'uncordonn'; the commands are cordon, uncordon, drain, "
                           "revoke, migrate, suspend, resume and list"),
            std::string::npos)
      << bogus.err;
}

// Issue 41 item 9: one agent listed at two addresses (127.0.0.1:P and localhost:P) is one agent: gp-ls shows it
// once, its one GPU is counted once, and a two-slice request is placed on it, not "on both" (which reserved one
// lease id twice: "lease id ... is already in use").
TEST(OperatorsTrust, OneAgentListedTwiceIsCountedOnce) {
  Agent agent(AgentOptions{.name = "twice", .emulated = 2, .emulated_memory = "1GiB"});
  const std::string port = agent.address().substr(agent.address().rfind(':') + 1);
  const std::string servers = "127.0.0.1:" + port + ",localhost:" + port;

  PoolState state = Connect({"127.0.0.1:" + port, "localhost:" + port}).State();
  ASSERT_EQ(state.servers.size(), 1u);
  EXPECT_EQ(state.servers[0].address, "127.0.0.1:" + port);
  EXPECT_EQ(state.device_count(), 2);
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--servers", servers});
  EXPECT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.out.find("localhost:" + port), std::string::npos) << ls.out;

  RunResult two = RunCommand({ToolPath("gp-run"), "--servers", servers, "-n", "2", "--", "/bin/true"});
  EXPECT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(two.err.find("already in use"), std::string::npos) << two.err;
  // Three whole GPUs: the pool has two, whichever way it is listed.
  RunResult three = RunCommand({ToolPath("gp-run"), "--servers", servers, "-n", "3", "--", "/bin/true"});
  EXPECT_EQ(three.code, 125);
  EXPECT_NE(three.err.find("the pool has 2"), std::string::npos) << three.err;
  ExpectAllFree(Connect({"127.0.0.1:" + port}).State());
}

// What KJ, CLI11 or our own code's internals put in a message, and no user should read.
const char* const kLibraryText[] = {"e.getDescription()", "segmentCount", "params.host", "gai_strerror", "toString()",
                                    "::bind", "sockfd", "Run with --help", "required TEXT", "above 0"};

void ExpectUserWords(const std::string& tool, const std::string& message) {
  EXPECT_NE(message.find(tool), std::string::npos) << "does not name " << tool << ": " << message;
  for (const char* text : kLibraryText) {
    EXPECT_EQ(message.find(text), std::string::npos) << "library text '" << text << "' in: " << message;
  }
}

// Issue 41 item 10: each message names the tool, says what happened in a user's words and what to do.
TEST(OperatorsTrust, MessagesSayWhatHappenedWithoutLibraryText) {
  // A server that is not a gp-agent.
  auto http = StartHttpServer();
  RunResult not_agent = RunCommand({ToolPath("gp-ls"), "--servers", http->address()});
  EXPECT_EQ(not_agent.code, 1);
  EXPECT_NE(not_agent.out.find("did not answer the gpupool handshake: it is not a gp-agent"), std::string::npos)
      << not_agent.out;
  for (const char* text : kLibraryText) EXPECT_EQ(not_agent.out.find(text), std::string::npos) << not_agent.out;

  // A host name that does not resolve.
  RunResult dns = RunCommand({ToolPath("gp-run"), "--servers", "no-such-host.invalid:7450", "--", "/bin/true"});
  EXPECT_EQ(dns.code, 125);
  ExpectUserWords("gp-run", dns.err);
  EXPECT_NE(dns.err.find("its host name no-such-host.invalid cannot be resolved"), std::string::npos) << dns.err;

  // A server that refuses the connection answered nothing, and is not said to be silent.
  RunResult refused = RunCommand({ToolPath("gp-run"), "--servers", "127.0.0.1:1", "--", "/bin/true"});
  EXPECT_EQ(refused.code, 125);
  ExpectUserWords("gp-run", refused.err);
  EXPECT_EQ(refused.err.find("no server answered"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("refused the connection: no gp-agent listens there"), std::string::npos) << refused.err;

  // An agent asked to listen where it cannot: a missing directory, a regular file.
  TempDir dir;
  RunResult no_dir = RunCommand({ToolPath("gp-agent"), "--no-nvml", "--emu", "1", "--listen",
                                 "unix:" + dir.path() + "/missing/agent.sock"});
  EXPECT_EQ(no_dir.code, 1);
  ExpectUserWords("gp-agent", no_dir.err);
  EXPECT_NE(no_dir.err.find("its directory does not exist"), std::string::npos) << no_dir.err;
  const std::string file = dir.Write("not-a-socket", "data\n");
  RunResult regular = RunCommand({ToolPath("gp-agent"), "--no-nvml", "--emu", "1", "--listen", "unix:" + file});
  EXPECT_EQ(regular.code, 1);
  ExpectUserWords("gp-agent", regular.err);
  EXPECT_EQ(regular.err.find("Address already in use"), std::string::npos) << regular.err;

  // Option errors name the tool and where its options are listed.
  RunResult bogus = RunCommand({ToolPath("gp-ls"), "--bogus"});
  EXPECT_EQ(bogus.code, 2);
  ExpectUserWords("gp-ls", bogus.err);
  EXPECT_NE(bogus.err.find("gp-ls: unexpected argument(s): --bogus (gp-ls --help lists the options)"),
            std::string::npos) << bogus.err;
  RunResult no_value = RunCommand({ToolPath("gp-run"), "-p"});
  EXPECT_EQ(no_value.code, 125);
  ExpectUserWords("gp-run", no_value.err);
  EXPECT_NE(no_value.err.find("gp-run: --fraction needs a value"), std::string::npos) << no_value.err;

  // The smallest fraction is named as it is.
  RunResult zero = RunCommand({ToolPath("gp-run"), "--servers", "127.0.0.1:1", "-p", "0", "--", "/bin/true"});
  EXPECT_EQ(zero.code, 125);
  ExpectUserWords("gp-run", zero.err);
  EXPECT_NE(zero.err.find("it must be at least 0.05 (1/20 of a GPU)"), std::string::npos) << zero.err;
}

// Issue 41 item 10: `gp-lease release` of a held lease is what its holder waits for: the holder ends with 0, without
// a "heartbeat failed: not_found" warning.
TEST(OperatorsTrust, GpLeaseHoldEndsQuietlyWhenReleasedWithItsToken) {
  Agent agent(AgentOptions{.name = "hold", .emulated = 1, .emulated_memory = "1GiB", .lease_ttl = "2s"});
  Process holder({ToolPath("gp-lease"), "hold", "--servers", agent.address()});
  const std::string token = holder.ReadLine(std::chrono::seconds(20));
  ASSERT_EQ(token.rfind("gpl1:", 0), 0u) << token << holder.Stderr();
  RunResult released = RunCommand({ToolPath("gp-lease"), "release"}, {"GPUPOOL_LEASE=" + token});
  EXPECT_EQ(released.code, 0) << released.err;
  EXPECT_EQ(holder.Wait(std::chrono::seconds(20)), 0) << holder.Stderr();
  EXPECT_EQ(holder.Stderr().find("not_found"), std::string::npos) << holder.Stderr();
  EXPECT_EQ(holder.Stderr().find("heartbeat"), std::string::npos) << holder.Stderr();
  ExpectAllFree(Connect({agent.address()}).State());
}

// A server on loopback that accepts connections and never says a word; counts what it accepted.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ListenOnLoopback(&address_);
    thread_ = std::thread([this] {
      for (;;) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shutdown() below.
        std::lock_guard<std::mutex> lock(mu_);
        accepted_.push_back(c);
      }
    });
  }
  ~SilentServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
    for (int c : accepted_) close(c);
  }
  const std::string& address() const { return address_; }
  size_t accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_.size();
  }

 private:
  int fd_ = -1;
  std::string address_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> accepted_;
};

// Issue 41 item 6: a server that accepts and never answers is reported down with why, the live agents answer, and
// a long-lived client does not ask it again at every look (it probes it in the background instead).
TEST(OperatorsTrust, ASilentServerIsSkippedNotWaitedForAtEveryLook) {
  SilentServer silent;
  Agent agent(AgentOptions{.name = "live", .emulated = 1, .emulated_memory = "1GiB"});
  Pool pool = Connect({silent.address(), agent.address()});
  PoolState first = pool.State();
  ASSERT_EQ(first.servers.size(), 2u);
  EXPECT_FALSE(first.servers[0].up);
  EXPECT_NE(first.servers[0].error.find("did not answer within 1500 ms"), std::string::npos) << first.servers[0].error;
  EXPECT_TRUE(first.servers[1].up) << first.servers[1].error;
  const size_t asked = silent.accepted();
  EXPECT_GE(asked, 1u);
  // Looks within its quiet time skip it, saying why: no connection of theirs reaches it (the background probe may
  // make one meanwhile).
  for (int i = 0; i < 3; ++i) {
    PoolState again = pool.State();
    EXPECT_FALSE(again.servers[0].up);
    EXPECT_NE(again.servers[0].error.find("server " + silent.address() + " is skipped for"), std::string::npos)
        << again.servers[0].error;
    EXPECT_NE(again.servers[0].error.find("it did not answer within 1500 ms"), std::string::npos)
        << again.servers[0].error;
    EXPECT_TRUE(again.servers[1].up);
  }
  EXPECT_LE(silent.accepted(), asked + 1);
  auto lease = pool.Allocate(Slices(1, 0.5));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->slices()[0].server, agent.address());
  // The tools say the same, and gp-run runs on the live agent.
  RunResult run = RunCommand({ToolPath("gp-run"), "--servers", silent.address() + "," + agent.address(), "-p", "0.5",
                              "--", "/bin/echo", "ran"});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.out, "ran\n");
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--servers", silent.address() + "," + agent.address()});
  EXPECT_NE(ls.out.find("did not answer within 1500 ms"), std::string::npos) << ls.out;
}

// Atomically (a rename): the agent reads the policy clock's file at any moment.
void SetPolicyClock(const std::string& path, const std::string& local) {
  { std::ofstream(path + ".new") << local << "\n"; }
  std::rename((path + ".new").c_str(), path.c_str());
}

// agent.toml with a day personality (08:00-20:00, slices of at most half a GPU; `day_extra` lines added to it) and a
// night one (whole GPUs), for the tests of leases and waits across a change of personality.
std::string WriteDayNightPolicy(TempDir& dir, const std::string& day_extra = "") {
  return dir.Write("agent.toml", "[[personality]]\nname = \"day\"\nhours = \"08:00-20:00\"\nmax_fraction = 0.5\n" +
                                     day_extra + "\n[[personality]]\nname = \"night\"\nhours = \"20:00-08:00\"\n");
}

size_t Occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Issue 41: a lease that a change of personality will end after its grace is announced by its holders (gp-run and
// gp-lease hold) on stderr, once, with the time left and why, while there is still time to save work.
TEST(OperatorsTrust, HoldersWarnBeforeAPolicysGraceEnds) {
  TempDir dir;
  const std::string config = WriteDayNightPolicy(dir, "on_change = \"40s\"\n");
  const std::string clock = dir.path() + "/clock";
  SetPolicyClock(clock, "2026-11-23 21:00:00");  // Night: whole GPUs.
  Agent agent(AgentOptions{.name = "graceful", .emulated = 2, .emulated_memory = "1GiB", .lease_ttl = "2s",
                           .extra_args = {"--config", config},
                           .env = {"GPUPOOL_POLICY_CLOCK=" + clock, "TZ=UTC"}});
  const std::string server = agent.address();
  Pool pool = Connect({server});
  Process run({ToolPath("gp-run"), "--servers", server, "-p", "1", "--", "sleep", "60"});
  Process hold({ToolPath("gp-lease"), "hold", "-p", "1", "--servers", server});
  ASSERT_EQ(hold.ReadLine(seconds(20)).rfind("gpl1:", 0), 0u) << hold.Stderr();
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 2; }, seconds(20))) << run.Stderr();
  std::this_thread::sleep_for(seconds(2));  // Renewals at night announce nothing.
  EXPECT_EQ(run.Stderr(), "");
  EXPECT_EQ(hold.Stderr(), "");

  // Day begins (the injected clock stands still at 08:00:05): both leases break its rules and end when its 40 s
  // grace does, 35 s from now by the policy's clock.
  SetPolicyClock(clock, "2026-11-24 08:00:05");
  const std::string why = "s: agent graceful's policy: personality day allows slices of at most 0.5 of a GPU, not 1, "
                          "and its grace of 40s for leases granted under other rules ends then";
  for (const auto& [holder, tool] : std::vector<std::pair<Process*, std::string>>{{&run, "gp-run"}, {&hold, "gp-lease"}}) {
    ASSERT_TRUE(Eventually([&] { return holder->Stderr().find(why) != std::string::npos; }, seconds(10)))
        << tool << ": " << holder->Stderr();
    const std::string err = holder->Stderr();
    EXPECT_EQ(err.rfind(tool + ": warning: lease ", 0), 0u) << err;
    // The time left, as the last renewal said it (the renewals come every 0.5 s).
    EXPECT_TRUE(err.find(" ends in 35 s: ") != std::string::npos || err.find(" ends in 34 s: ") != std::string::npos)
        << err;
  }
  // Once, however many renewals say it again.
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(Occurrences(run.Stderr(), "ends in"), 1u) << run.Stderr();
  EXPECT_EQ(Occurrences(hold.Stderr(), "ends in"), 1u) << hold.Stderr();
  EXPECT_EQ(LeaseCount(pool.State()), 2u);

  // The grace is over: both leases end, and their holders say why.
  SetPolicyClock(clock, "2026-11-24 08:00:41");
  EXPECT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)));
  EXPECT_TRUE(Eventually([&] { return run.Stderr().find("lost: ended by agent graceful's policy at 08:00") !=
                                       std::string::npos; },
                         seconds(10)))
      << run.Stderr();
  EXPECT_EQ(hold.Wait(seconds(20)), 1) << hold.Stderr();
  EXPECT_NE(hold.Stderr().find("lost: ended by agent graceful's policy at 08:00"), std::string::npos)
      << hold.Stderr();
  EXPECT_EQ(Occurrences(run.Stderr(), "ends in"), 1u) << run.Stderr();
}

// Issue 41: a client waiting with --wait retries every second or so; the agent logs its first refusal, not one line
// per retry (186 lines in 136 s), and a line when the policy allows it at last.
TEST(OperatorsTrust, AWaitingClientsRetriesAreLoggedOnce) {
  TempDir dir;
  const std::string config = WriteDayNightPolicy(dir);
  const std::string clock = dir.path() + "/clock";
  SetPolicyClock(clock, "2026-11-23 10:00:00");
  Agent agent(AgentOptions{.name = "patient", .emulated = 1, .emulated_memory = "1GiB",
                           .extra_args = {"--config", config, "--metrics", "127.0.0.1:0"},
                           .env = {"GPUPOOL_POLICY_CLOCK=" + clock, "TZ=UTC"}});
  const std::string metrics_line = agent.process().ReadLine(seconds(10));
  ASSERT_NE(metrics_line.find("http://"), std::string::npos) << metrics_line;
  const std::string url = metrics_line.substr(metrics_line.find("http://"));

  RunResult waited = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "-p", "1", "--wait", "6s", "--",
                                 "/bin/true"});
  EXPECT_EQ(waited.code, 125) << waited.err;
  EXPECT_NE(waited.err.find("waited 6s for"), std::string::npos) << waited.err;
  // It did ask again and again...
  const std::string text = RunCommand({"/usr/bin/env", "curl", "-sS", "--max-time", "5", url}).out;
  const std::string series = "gpupool_reservations_refused_total{reason=\"busy\"} ";
  const size_t at = text.find(series);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_GE(std::stod(text.substr(at + series.size())), 4) << text.substr(at, 80);
  // ...and the log said so once.
  const std::string log = agent.process().Stderr();
  EXPECT_EQ(Occurrences(log, "refused "), 1u) << log;
  EXPECT_NE(log.find("personality day allows slices of at most 0.5 of a GPU, not 1"), std::string::npos) << log;

  // Waiting across the change of personality: one refusal line again (a new run of refusals), then the grant.
  Process waiting({ToolPath("gp-run"), "--servers", agent.address(), "-p", "1", "--wait", "30s", "--", "/bin/echo",
                   "whole"});
  ASSERT_TRUE(Eventually([&] { return Occurrences(agent.process().Stderr(), "refused ") == 2; }, seconds(10)))
      << agent.process().Stderr();
  std::this_thread::sleep_for(seconds(3));
  SetPolicyClock(clock, "2026-11-23 20:30:00");
  EXPECT_EQ(waiting.ReadLine(seconds(20)), "whole") << waiting.Stderr();
  EXPECT_EQ(waiting.Wait(seconds(10)), 0);
  const std::string after = agent.process().Stderr();
  EXPECT_EQ(Occurrences(after, "refused "), 2u) << after;
  EXPECT_NE(after.find("reservation after "), std::string::npos) << after;
}

// Issue 41: gp-run --wait and gp-lease hold --wait say on stderr, once, what they wait for and why (the policy's
// refusal), not at every retry; -q says nothing of it.
TEST(OperatorsTrust, WaitingSaysOnceWhatItWaitsForAndWhy) {
  TempDir dir;
  const std::string config = WriteDayNightPolicy(dir);
  const std::string clock = dir.path() + "/clock";
  SetPolicyClock(clock, "2026-11-23 10:00:00");
  Agent agent(AgentOptions{.name = "queue", .emulated = 1, .emulated_memory = "1GiB", .extra_args = {"--config", config},
                           .env = {"GPUPOOL_POLICY_CLOCK=" + clock, "TZ=UTC"}});
  const std::string server = agent.address();
  const std::string why = ": " + server + ": agent queue: personality day allows slices of at most 0.5 of a GPU, not 1; "
                          "from Mon 20:00 personality night would allow it\n";

  RunResult run = RunCommand({ToolPath("gp-run"), "--servers", server, "-p", "1", "--wait", "5s", "--", "/bin/true"});
  EXPECT_EQ(run.code, 125) << run.err;
  EXPECT_EQ(run.err.rfind("gp-run: waiting up to 5s for 1 x GPU" + why, 0), 0u) << run.err;
  EXPECT_EQ(Occurrences(run.err, "waiting"), 1u) << run.err;
  EXPECT_NE(run.err.find("gp-run: waited 5s for"), std::string::npos) << run.err;

  RunResult hold = RunCommand({ToolPath("gp-lease"), "hold", "--servers", server, "-p", "1", "--wait", "3s"});
  EXPECT_EQ(hold.code, 1) << hold.err;
  EXPECT_EQ(hold.err.rfind("gp-lease: waiting up to 3s for 1 x GPU" + why, 0), 0u) << hold.err;
  EXPECT_EQ(Occurrences(hold.err, "waiting"), 1u) << hold.err;

  // -q: only the outcome.
  RunResult quiet = RunCommand({ToolPath("gp-run"), "-q", "--servers", server, "-p", "1", "--wait", "2s", "--",
                                "/bin/true"});
  EXPECT_EQ(quiet.code, 125) << quiet.err;
  EXPECT_EQ(quiet.err.find("waiting"), std::string::npos) << quiet.err;
  EXPECT_EQ(quiet.err.rfind("gp-run: waited 2s for", 0), 0u) << quiet.err;
  RunResult quiet_hold = RunCommand({ToolPath("gp-lease"), "hold", "-q", "--servers", server, "-p", "1", "--wait",
                                     "2s"});
  EXPECT_EQ(quiet_hold.code, 1) << quiet_hold.err;
  EXPECT_EQ(quiet_hold.err.find("waiting"), std::string::npos) << quiet_hold.err;

  // Without --wait nothing is waited for, and nothing said of waiting.
  RunResult now = RunCommand({ToolPath("gp-run"), "--servers", server, "-p", "1", "--", "/bin/true"});
  EXPECT_EQ(now.code, 125);
  EXPECT_EQ(now.err.find("waiting"), std::string::npos) << now.err;
}

// A raw loopback TCP connection to `address` ("127.0.0.1:PORT"), or -1.
int ConnectRaw(const std::string& address) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// Whether the agent closed `fd` within `timeout` (a read sees the end of the stream, or a reset).
bool ClosedByPeer(int fd, std::chrono::seconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char byte;
  ssize_t n = recv(fd, &byte, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Issue 41: a TCP client that connects and says nothing, or stops in the middle of its first message, is closed
// after [limits] hello_timeout; clients that said hello keep their connections, however long they are quiet.
TEST(OperatorsTrust, ConnectionsThatSayNothingAreClosed) {
  TempDir dir;
  const std::string config = dir.Write("agent.toml", "[limits]\nhello_timeout = \"2s\"\n");
  Agent agent(AgentOptions{.name = "brisk", .emulated = 1, .emulated_memory = "1GiB",
                           .extra_args = {"--config", config}});
  Pool pool = Connect({agent.address()});
  ASSERT_TRUE(pool.State().servers[0].up);
  // A connection that says hello, then nothing for longer than the timeout.
  capnp::EzRpcClient quiet(agent.address());
  auto quiet_agent = quiet.getMain<wire::Agent>();
  {
    auto hello = quiet_agent.helloRequest();
    hello.setClientVersion(wire::PROTOCOL_VERSION);
    EXPECT_EQ(hello.send().wait(quiet.getWaitScope()).getName(), "brisk");
  }
  Process holder({ToolPath("gp-run"), "--servers", agent.address(), "--", "sleep", "6"});

  const int silent = ConnectRaw(agent.address());
  ASSERT_GE(silent, 0) << std::strerror(errno);
  const int half = ConnectRaw(agent.address());
  ASSERT_GE(half, 0) << std::strerror(errno);
  // The start of a Cap'n Proto frame: one segment of 64 words, of which nothing follows.
  const uint32_t header[2] = {0, 64};
  ASSERT_EQ(send(half, header, sizeof(header), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(header)));
  EXPECT_TRUE(ClosedByPeer(silent, seconds(20))) << "a silent connection is still open";
  EXPECT_TRUE(ClosedByPeer(half, seconds(20))) << "a half-sent message's connection is still open";
  close(silent);
  close(half);
  EXPECT_NE(agent.process().Stderr().find("closed a client connection that made no call in 2s ([limits] "
                                          "hello_timeout)"),
            std::string::npos)
      << agent.process().Stderr();

  // Quiet for longer than the timeout, the clients that spoke are still served: the connection that said hello (on
  // which a call still gets its answer), the pool's, and gp-run's lease, whose command ends well.
  std::this_thread::sleep_for(seconds(3));
  {
    auto describe = quiet_agent.describeRequest();
    EXPECT_EQ(describe.send().wait(quiet.getWaitScope()).getState().getName(), "brisk");
  }
  PoolState state = pool.State();
  ASSERT_TRUE(state.servers[0].up) << state.servers[0].error;
  EXPECT_EQ(LeaseCount(state), 1u);
  EXPECT_EQ(holder.Wait(seconds(20)), 0) << holder.Stderr();

  // The limit is checked: a bad value names it.
  const std::string bad = dir.Write("bad.toml", "[limits]\nhello_timeout = \"0s\"\n");
  RunResult refused = RunCommand({ToolPath("gp-agent"), "--config", bad, "--no-nvml", "--emu", "1", "--listen",
                                  "127.0.0.1:0"},
                                 {}, seconds(20));
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_NE(refused.err.find("[limits] hello_timeout must be within 1s..1h"), std::string::npos) << refused.err;
}

// What an agent answers openSession of `lease`'s first slice with the window [base, base + bytes), asked over the
// wire itself (a RemoteSession would try other windows).
struct RawOpen {
  wire::Outcome::Code code = wire::Outcome::Code::OK;
  std::string message;
  bool window_taken = false;
  bool has_session = false;
};
RawOpen OpenSessionAt(const std::string& address, const Lease& lease, uint64_t base, uint64_t bytes) {
  auto fields = internal::DecodeToken(lease.Token());
  EXPECT_TRUE(fields.ok()) << fields.status().ToString();
  if (!fields.ok()) return {wire::Outcome::Code::INTERNAL, "the lease's token does not decode"};
  capnp::EzRpcClient client(address);
  auto req = client.getMain<wire::Agent>().openSessionRequest();
  req.initLease().setId(fields->id);
  req.getLease().setSecret(fields->secret);
  req.setDevice(lease.slices()[0].device);
  req.setWindowBase(base);
  req.setWindowBytes(bytes);
  auto reply = req.send().wait(client.getWaitScope());
  return {reply.getOutcome().getCode(), reply.getOutcome().getMessage(), reply.getOutcome().getWindowTaken(),
          reply.hasSession()};
}

// Issue 41: the agent tells a window taken (worth another window) apart from its other refusals of a session on the
// wire (Outcome.windowTaken), and the client tries another window only then, whatever a refusal's words: it used to
// look for "[limits]" in the message, and tried 16 windows on any other busy refusal.
TEST(OperatorsTrust, OnlyATakenWindowIsTriedAgain) {
  auto open = [](const std::string& server) {
    return internal::RemoteSession::OpenLease(internal::EncodeToken({"0123456789abcdef", "0123456789abcdef0123456789abcdef", {server}}));
  };
  std::atomic<int> asked{0};
  auto full = StartSessionRefusingAgent(false, "device 0 has 9 sessions open, the most this agent allows", &asked);
  auto refused = open(full->address());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("device 0 has 9 sessions open"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(asked.load(), 1) << "a refusal that is not about the window was met with other windows";

  std::atomic<int> asked_taken{0};
  auto taken = StartSessionRefusingAgent(true, "the address window is taken on this GPU server", &asked_taken);
  auto never = open(taken->address());
  ASSERT_FALSE(never.ok());
  EXPECT_NE(never.status().message().find("window is taken"), std::string::npos) << never.status().message();
  EXPECT_GT(asked_taken.load(), 1) << "a taken window was not followed by another";

  // A real agent's [limits] refusal says it is not about the window.
  TempDir dir;
  const std::string config = dir.Write("agent.toml", "[limits]\nsessions_per_lease = 1\n");
  Agent agent(AgentOptions{.name = "limited", .emulated = 1, .emulated_memory = "1GiB",
                           .extra_args = {"--config", config}});
  auto lease = Connect({agent.address()}).Allocate(Slices(1, 0.5));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  auto first = internal::RemoteSession::OpenLease(lease->Token());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  RawOpen reply = OpenSessionAt(agent.address(), *lease, uint64_t{40} << 40, uint64_t{2} << 30);
  EXPECT_EQ(reply.code, wire::Outcome::Code::BUSY);
  EXPECT_NE(reply.message.find("[limits] sessions_per_lease = 1"), std::string::npos) << reply.message;
  EXPECT_FALSE(reply.window_taken);
}

// A session worker's refusal reaches the client in the shape the agent answers with (worker.capnp's open answers an
// Outcome): here the worker's emulated device cannot have its window, which holds the worker's own program (a PIE
// binary loads in [0x555555554000, +1 TiB)), so the answer is busy with windowTaken, in the worker's words.
TEST(OperatorsTrust, AWorkersRefusalReachesTheClientAsItsOutcome) {
  Agent agent(AgentOptions{.name = "taken", .emulated = 1, .emulated_memory = "2TiB"});
  auto lease = Connect({agent.address()}).Allocate(Slices(1, 1.0));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  RawOpen reply = OpenSessionAt(agent.address(), *lease, uint64_t{0x5540} << 32, uint64_t{2} << 40);
  EXPECT_EQ(reply.code, wire::Outcome::Code::BUSY) << reply.message;
  EXPECT_TRUE(reply.window_taken);
  EXPECT_NE(reply.message.find("could not reserve"), std::string::npos) << reply.message;
  EXPECT_FALSE(reply.has_session);
}

}  // namespace
}  // namespace gpupool::testing
