// The remote data path end to end: unmodified nvcc-built programs run under gp-run on slices of real agents.
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "client/session_client.h"
#include "core/mapping.h"
#include "integration/helpers.h"
#include "support/proc_status.h"

namespace gpupool::testing {
namespace {

using std::chrono::seconds;

std::string Example(const std::string& name) { return std::string(GPUPOOL_EXAMPLES_DIR) + "/" + name; }
std::string Program(const std::string& name) { return std::string(GPUPOOL_REMOTE_PROGRAM_DIR) + "/" + name; }

// A clean environment for gp-run: no pool from the caller's environment or home directory.
std::vector<std::string> NoPoolEnv(const TempDir& home) {
  return {"GPUPOOL_SERVERS", "GPUPOOL_POOL", "HOME=" + home.path()};
}

TEST(Remote, VectorAddRunsOnTheEmbeddedDefault) {
  TempDir home;
  RunResult r = RunCommand({ToolPath("gp-run"), "--", Example("vector_add"), "100000"}, NoPoolEnv(home), seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("vector_add: 100000 elements, 0 wrong: PASSED"), std::string::npos) << r.out << r.err;
}

// `gp-run -n 2` with no pool on a machine without a GPU: the private agent emulates as many GPUs as the command asks
// for (it used to emulate one and refuse: "asked for 2 devices; the pool has 1"), up to its limit, past which the
// refusal says how to get more. GPUPOOL_REQUEST without a pool gets such a private agent too (it was refused: no
// pool configured).
TEST(Remote, TheEmbeddedDefaultEmulatesAsManyGpusAsTheCommandAsks) {
  TempDir home;
  RunResult two = RunCommand({ToolPath("gp-run"), "-n", "2", "-p", "0.5", "--", Example("two_devices")},
                             NoPoolEnv(home), seconds(120));
  EXPECT_EQ(two.code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("two_devices: sum"), std::string::npos) << two.out << two.err;
  EXPECT_NE(two.err.find("runs the command on 2 emulated GPUs"), std::string::npos) << two.err;

  // A program taking its slices itself (GPUPOOL_REQUEST, as a notebook or gpupool.attach() does), with no pool.
  const std::string driver = GPUPOOL_DRIVER_LIBRARY;
  std::vector<std::string> env = NoPoolEnv(home);
  env.insert(env.end(), {"LD_LIBRARY_PATH=" + driver.substr(0, driver.rfind('/')), "GPUPOOL_REQUEST=-n 2 -p 0.5",
                         "GPUPOOL_LEASE="});
  RunResult requested = RunCommand({Example("two_devices")}, env, seconds(120));
  EXPECT_EQ(requested.code, 0) << requested.out << requested.err;
  EXPECT_NE(requested.out.find("two_devices: sum"), std::string::npos) << requested.out << requested.err;

  RunResult many = RunCommand({ToolPath("gp-run"), "-n", "9", "--", "/bin/true"}, NoPoolEnv(home), seconds(60));
  EXPECT_EQ(many.code, 125) << many.out << many.err;
  EXPECT_NE(many.err.find("asked for 9 devices; the pool has 8; no pool is configured, and the private gp-agent "
                          "emulates at most 8 GPUs: name a pool's agents for more"),
            std::string::npos)
      << many.err;
}

TEST(Remote, ExamplesRunOnTwoAgentsOnLoopback) {
  AgentGroup agents(2, AgentOptions{.name = "remote", .emulated = 1, .emulated_memory = "4GiB"});
  for (const char* example : {"vector_add", "matrix_multiply", "streams_events"}) {
    RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agents.Servers(), "--", Example(example)}, {},
                             seconds(120));
    EXPECT_EQ(r.code, 0) << example << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("PASSED"), std::string::npos) << example << ": " << r.out << r.err;
  }
  // Both slices in one program, one on each agent.
  RunResult two = RunCommand(
      {ToolPath("gp-run"), "--servers", agents.Servers(), "-n", "2", "--spread", "--", Example("two_devices")}, {},
      seconds(120));
  EXPECT_EQ(two.code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("two_devices: sum"), std::string::npos) << two.out << two.err;
  EXPECT_NE(two.out.find("PASSED"), std::string::npos) << two.out << two.err;
  ExpectAllFree(Connect(agents.Addresses()).State());
}

TEST(Remote, LessCommonRuntimeCallsAcrossTwoServers) {
  // 2D/3D copies and memsets, peer copies staged through the client, pointer attributes, occupancy,
  // cudaLaunchKernelEx and host functions, with the two slices on two agents.
  AgentGroup agents(2, AgentOptions{.name = "apicov", .emulated = 1, .emulated_memory = "2GiB"});
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agents.Servers(), "-n", "2", "--spread", "--",
                            Program("api_coverage")},
                           {}, seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("api_coverage: 0 failure(s): PASSED"), std::string::npos) << r.out << r.err;
  ExpectAllFree(Connect(agents.Addresses()).State());
}

TEST(Remote, DynamicSharedMemoryAboveTheDefaultNeedsTheOptInAndOccupancyFollowsIt) {
  Agent agent(AgentOptions{.name = "optin", .emulated = 1, .emulated_memory = "1GiB"});
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "--", Program("shared_optin")}, {},
                           seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("0 failure(s): PASSED"), std::string::npos) << r.out << r.err;
}

// cuFuncGetAttribute(MAX_THREADS_PER_BLOCK) on a remote slice is the kernel's real bound, not the device's 1024:
// __launch_bounds__(256), and a kernel whose 320 KiB of local memory per thread the emulator holds for fewer than
// 1024 threads a block; launches beyond either bound are refused at once.
TEST(Remote, KernelMaxThreadsPerBlockIsTheBoundItsLaunchesAreCheckedAgainst) {
  Agent agent(AgentOptions{.name = "bounds", .emulated = 1, .emulated_memory = "1GiB"});
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "--", Program("launch_bounds")}, {},
                           seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("launch_bounds: bounded 256, heavy "), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("0 failure(s): PASSED"), std::string::npos) << r.out << r.err;
}

// A program built with -rdc=true for sm_80: its translation units' PTX is linked on the emulated device, which
// must report compute capability 8.0 to pick it (--emu-cc); at 7.5 there is nothing it may run, as on a T4.
TEST(Remote, SeparatelyCompiledProgramsLinkTheirUnitsOnAnEmulatedSm80) {
  Agent sm80(AgentOptions{.name = "sm80", .emulated = 1, .emulated_memory = "1GiB", .extra_args = {"--emu-cc", "8.0"}});
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", sm80.address(), "--", Program("separate_compilation")},
                           {}, seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("0 failure(s): PASSED"), std::string::npos) << r.out << r.err;

  Agent sm75(AgentOptions{.name = "sm75", .emulated = 1, .emulated_memory = "1GiB", .extra_args = {"--emu-cc", "7.5"}});
  RunResult old = RunCommand({ToolPath("gp-run"), "--servers", sm75.address(), "--", Program("separate_compilation")},
                             {}, seconds(120));
  EXPECT_NE(old.code, 0) << old.out << old.err;
  EXPECT_NE(old.err.find("compute_80"), std::string::npos) << old.out << old.err;
}

// An emulated device of capability X.Y reports what a real GPU of it does, so that programs sizing tiles and
// occupancy from the attributes take a GPU's code paths (issue 48: 8.0 reported 64 KiB of shared memory per SM).
// Expected: NVIDIA's "Technical Specifications per Compute Capability" (CUDA C++ Programming Guide) and CCCL's
// cuda/__device/arch_traits.h for the per-SM limits; the named product's datasheet for SMs and L2. Read end to end:
// cudaDeviceGetAttribute in a program under gp-run, through the session, from an agent started with --emu-cc.
TEST(Remote, EmulatedDevicesReportTheAttributesOfARealGpuOfTheirCapability) {
  struct Expected {
    const char* cc;
    const char* product;
    std::map<std::string, long> values;
  };
  const std::vector<Expected> expected = {
      {"7.5", "Tesla T4", {{"multiprocessor_count", 40}, {"max_threads_per_multiprocessor", 1024},
                           {"max_blocks_per_multiprocessor", 16}, {"max_shared_memory_per_multiprocessor", 64 << 10},
                           {"max_shared_memory_per_block_optin", 64 << 10}, {"reserved_shared_memory_per_block", 0},
                           {"l2_cache_size", 4 << 20}}},
      {"8.0", "A100", {{"multiprocessor_count", 108}, {"max_threads_per_multiprocessor", 2048},
                       {"max_blocks_per_multiprocessor", 32}, {"max_shared_memory_per_multiprocessor", 164 << 10},
                       {"max_shared_memory_per_block_optin", 163 << 10}, {"reserved_shared_memory_per_block", 1024},
                       {"l2_cache_size", 40 << 20}}},
      {"8.6", "A10", {{"multiprocessor_count", 72}, {"max_threads_per_multiprocessor", 1536},
                      {"max_blocks_per_multiprocessor", 16}, {"max_shared_memory_per_multiprocessor", 100 << 10},
                      {"max_shared_memory_per_block_optin", 99 << 10}, {"reserved_shared_memory_per_block", 1024},
                      {"l2_cache_size", 6 << 20}}},
      {"9.0", "H100 SXM", {{"multiprocessor_count", 132}, {"max_threads_per_multiprocessor", 2048},
                           {"max_blocks_per_multiprocessor", 32}, {"max_shared_memory_per_multiprocessor", 228 << 10},
                           {"max_shared_memory_per_block_optin", 227 << 10}, {"reserved_shared_memory_per_block", 1024},
                           {"l2_cache_size", 50 << 20}}},
      {"12.0", "GeForce RTX 5090", {{"multiprocessor_count", 170}, {"max_threads_per_multiprocessor", 1536},
                                    {"max_blocks_per_multiprocessor", 24},
                                    {"max_shared_memory_per_multiprocessor", 100 << 10},
                                    {"max_shared_memory_per_block_optin", 99 << 10},
                                    {"reserved_shared_memory_per_block", 1024}, {"l2_cache_size", 96 << 20}}},
  };
  // Every capability: what CUDA fixes for all of them.
  const std::map<std::string, long> common = {{"warp_size", 32},           {"max_threads_per_block", 1024},
                                              {"max_shared_memory_per_block", 48 << 10},
                                              {"max_registers_per_block", 65536},
                                              {"max_registers_per_multiprocessor", 65536},
                                              {"max_grid_dim_x", 2147483647}, {"max_block_dim_z", 64},
                                              {"total_constant_memory", 64 << 10}};
  for (const Expected& e : expected) {
    SCOPED_TRACE(std::string(e.cc) + " (" + e.product + ")");
    Agent agent(AgentOptions{.name = "attributes", .emulated = 1, .emulated_memory = "1GiB",
                             .extra_args = {"--emu-cc", e.cc}});
    RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "--", Program("device_attributes")},
                             {}, seconds(60));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    std::map<std::string, long> got;
    std::istringstream lines(r.out);
    for (std::string name, value; lines >> name >> value;) got[name] = std::strtol(value.c_str(), nullptr, 10);
    const std::string cc = e.cc;
    EXPECT_EQ(got["compute_capability_major"], std::stol(cc.substr(0, cc.find('.'))));
    EXPECT_EQ(got["compute_capability_minor"], std::stol(cc.substr(cc.find('.') + 1)));
    for (const auto& values : {e.values, common}) {
      for (const auto& [name, value] : values) EXPECT_EQ(got[name], value) << name;
    }
  }
}

TEST(Remote, TexturesAndSurfacesRunOnAnEmulatedSlice) {
  // cudaCreateTextureObject over a CUDA array (linear filtering, normalised coordinates) and linear memory,
  // cudaCreateSurfaceObject, surf2Dwrite read back with cudaMemcpy2DFromArray; the slice's memory comes back.
  Agent agent(AgentOptions{.name = "textures", .emulated = 1, .emulated_memory = "1GiB"});
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "--", Program("textures")}, {},
                           seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("textures: 0+0+0 wrong, 0 failure(s): PASSED"), std::string::npos) << r.out << r.err;
  ExpectAllFree(Connect({agent.address()}).State());
}

TEST(Remote, SessionsAreAuthenticatedByTheLeaseAndIsolatedFromEachOther) {
  Agent agent(AgentOptions{.name = "tenants", .emulated = 1, .emulated_memory = "2GiB"});
  Pool pool = Connect({agent.address()});
  auto a = pool.Allocate(Slices(1, 0.5));
  auto b = pool.Allocate(Slices(1, 0.5));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->slices()[0].device, b->slices()[0].device) << "both tenants share the one GPU";
  // A token with the wrong secret opens nothing.
  std::string forged = a->Token();
  size_t secret_at = forged.find(':', 5) + 1;
  forged[secret_at] = forged[secret_at] == 'a' ? 'b' : 'a';
  auto stolen = internal::RemoteSession::OpenLease(forged);
  EXPECT_EQ(stolen.status().code(), StatusCode::kPermissionDenied) << stolen.status().ToString();
  // Tenant B cannot read or write tenant A's memory, even knowing its address.
  auto sa = internal::RemoteSession::OpenLease(a->Token());
  auto sb = internal::RemoteSession::OpenLease(b->Token());
  ASSERT_TRUE(sa.ok() && sb.ok());
  internal::RemoteSession& ta = *sa->front();
  internal::RemoteSession& tb = *sb->front();
  uint64_t secret_page = 0;
  ASSERT_EQ(ta.MemAlloc(4096, &secret_page), 0);
  std::vector<uint8_t> secret(4096, 0x5a), seen(4096, 0);
  ta.CopyToDevice(secret_page, secret.data(), secret.size(), 0);
  ASSERT_EQ(ta.Synchronize(), 0);
  EXPECT_NE(tb.CopyFromDevice(seen.data(), secret_page, seen.size(), 0), 0) << "read another tenant's memory";
  EXPECT_EQ(seen, std::vector<uint8_t>(4096, 0));
  tb.CopyToDevice(secret_page, seen.data(), seen.size(), 0);
  EXPECT_NE(tb.Synchronize(), 0) << "wrote another tenant's memory";
  ASSERT_EQ(ta.CopyFromDevice(seen.data(), secret_page, seen.size(), 0), 0);
  EXPECT_EQ(seen, secret) << "tenant A's memory was changed";
  // Each tenant sees its own slice as its device's total memory.
  uint64_t free_bytes = 0, total = 0;
  ASSERT_EQ(tb.MemGetInfo(&free_bytes, &total), 0);
  EXPECT_EQ(total, 1ull << 30);
}

// A slice's window holds the program's device pointers, so no host memory of the program may lie inside it: a host
// pointer there is taken for the device's (interpose.remote.arrays, about 1 run in 100, copied the wrong side when the
// random window fell on the program's heap). Windows are drawn in [32 TiB, 96 TiB); the test maps that range but a
// 16 TiB hole, so a session opens where nothing else is, or fails saying why.
TEST(Remote, ASessionsWindowNeverCoversMemoryTheProgramUses) {
  Agent agent(AgentOptions{.name = "windows", .emulated = 1, .emulated_memory = "2GiB"});
  Pool pool = Connect({agent.address()});
  auto lease = pool.Allocate(Slices(1, 1.0));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  constexpr uint64_t kTiB = 1ull << 40;
  std::vector<uint64_t> chunks;  // Mapped by the test, a TiB each.
  for (uint64_t at = 32 * kTiB; at < 96 * kTiB; at += kTiB) {
    if (at >= 40 * kTiB && at < 56 * kTiB) continue;  // The hole.
    // Not taken where part of it is in use already (this binary, its heap), which counts below.
    if (MapAnonymousAt(at, kTiB, PROT_NONE) != nullptr) chunks.push_back(at);
  }
  ASSERT_GT(chunks.size(), 30u);
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // [start, end): the test's chunks and the program's memory.
  for (uint64_t at : chunks) taken.emplace_back(at, at + kTiB);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    unsigned long long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %4s", &start, &end, perms) == 3 && std::string(perms) != "---p") {
      taken.emplace_back(start, end);
    }
  }
  auto sessions = internal::RemoteSession::OpenLease(lease->Token());
  if (sessions.ok()) {
    const internal::RemoteSession& s = *sessions->front();
    for (const auto& [start, end] : taken) {
      EXPECT_FALSE(s.window_base() < end && start < s.window_base() + s.window_bytes())
          << fmt::format("window [0x{:x}, 0x{:x}) covers [0x{:x}, 0x{:x})", s.window_base(),
                         s.window_base() + s.window_bytes(), start, end);
    }
  } else {
    EXPECT_NE(sessions.status().message().find("already uses the addresses"), std::string::npos)
        << sessions.status().ToString();
  }
  for (uint64_t at : chunks) munmap(reinterpret_cast<void*>(at), kTiB);
}

TEST(Remote, DevicePrintfReachesTheProgramsStdout) {
  Agent agent(AgentOptions{.name = "printf", .emulated = 1, .emulated_memory = "2GiB"});
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "--", Example("streams_events")}, {},
                           seconds(120));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("stream 0: kernel ran on the device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stream 1: kernel ran on the device"), std::string::npos) << r.out;
}

TEST(Remote, ProgramKilledMidKernelLeavesNoSessionMemoryOrLease) {
  Agent agent(AgentOptions{.name = "victim", .emulated = 1, .emulated_memory = "2GiB", .lease_ttl = "2s"});
  Process run({ToolPath("gp-run"), "--servers", agent.address(), "--", Program("spin")});
  ASSERT_EQ(run.ReadLine(seconds(60)), "spin: running") << run.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // The kernel is running now.
  Pool pool = Connect({agent.address()});
  EXPECT_EQ(LeaseCount(pool.State()), 1u);
  kill(-run.pid(), SIGKILL);  // gp-run and the program: nobody releases anything.
  run.Wait();
  // The session ends with its connection (the endless kernel is cancelled); the lease by its TTL.
  ASSERT_TRUE(Eventually([&] { return agent.process().Stderr().find("closed: its memory and modules are freed") !=
                                      std::string::npos; },
                         seconds(10)))
      << agent.process().Stderr();
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)));
  ExpectAllFree(pool.State());
  EXPECT_TRUE(agent.process().running()) << "the agent must survive its client's death";
}

// A program that takes its slice itself at its first CUDA call, as a Jupyter kernel does: gpupool's libcuda first
// on the library path, gp-run's request options in GPUPOOL_REQUEST, no lease handed over.
std::vector<std::string> RequestEnv(const std::string& request) {
  const std::string driver = GPUPOOL_DRIVER_LIBRARY;
  return {"LD_LIBRARY_PATH=" + driver.substr(0, driver.rfind('/')), "GPUPOOL_REQUEST=" + request, "GPUPOOL_LEASE="};
}

// Regression: the lease libcuda allocated from GPUPOOL_REQUEST outlived the program by its TTL (20 s), so a program
// run twice in a row against a full pool, or a restarted Jupyter kernel, was refused. It is released as the program
// exits: checked at once after each exit, each run taking the whole GPU without --wait, under the default TTL.
TEST(Remote, AGpupoolRequestLeaseIsReleasedAsTheProgramExits) {
  Agent agent(AgentOptions{.name = "request", .emulated = 1, .emulated_memory = "2GiB", .lease_ttl = "20s"});
  Pool pool = Connect({agent.address()});
  const std::string servers = " --servers " + agent.address();
  RunResult half = RunCommand({Example("vector_add"), "1000"}, RequestEnv("-n 1 -p 0.5" + servers), seconds(60));
  ASSERT_EQ(half.code, 0) << half.out << half.err;
  EXPECT_NE(half.out.find("PASSED"), std::string::npos) << half.out << half.err;
  EXPECT_EQ(LeaseCount(pool.State()), 0u) << "vector_add's lease outlived it\n" << agent.process().Stderr();
  // `atexit`: an exit handler the program registered before its first CUDA call still finds its slice at exit.
  for (const char* mode : {"return", "exit", "atexit", "return"}) {
    SCOPED_TRACE(mode);
    RunResult r = RunCommand({Program("exit_paths"), mode}, RequestEnv("-n 1 -p 1" + servers), seconds(60));
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("exit_paths: ") + mode + ": ok"), std::string::npos) << r.out << r.err;
    EXPECT_EQ(LeaseCount(pool.State()), 0u) << "the lease outlived the program\n" << agent.process().Stderr();
  }
  ExpectAllFree(pool.State());
}

// A thread calls exit() while the main thread computes; main returns while three threads compute: the program
// ends at once, with its status, and its lease with it (the threads' calls fail once the lease is gone).
TEST(Remote, AGpupoolRequestLeaseIsReleasedWhenOtherThreadsStillCompute) {
  Agent agent(AgentOptions{.name = "threads", .emulated = 1, .emulated_memory = "2GiB", .lease_ttl = "20s"});
  Pool pool = Connect({agent.address()});
  for (const char* mode : {"thread_exit", "busy_threads"}) {
    SCOPED_TRACE(mode);
    auto start = std::chrono::steady_clock::now();
    RunResult r =
        RunCommand({Program("exit_paths"), mode}, RequestEnv("-n 1 -p 1 --servers " + agent.address()), seconds(60));
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("exit_paths: ") + mode + ": ok"), std::string::npos) << r.out << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(30)) << "the program's exit waited";
    EXPECT_EQ(LeaseCount(pool.State()), 0u) << "the lease outlived the program\n" << agent.process().Stderr();
  }
  ExpectAllFree(pool.State());
}

// A child forked after cuInit that calls exit() runs libcuda's exit code too: it must leave its parent's lease (and
// the parent's threads, which it does not have) alone. The parent computes on after its child exited.
TEST(Remote, AForkedChildLeavesItsParentsGpupoolRequestLeaseAlone) {
  Agent agent(AgentOptions{.name = "fork", .emulated = 1, .emulated_memory = "2GiB", .lease_ttl = "20s"});
  Pool pool = Connect({agent.address()});
  RunResult r =
      RunCommand({Program("exit_paths"), "fork"}, RequestEnv("-n 1 -p 1 --servers " + agent.address()), seconds(60));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("exit_paths: fork: ok"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(LeaseCount(pool.State()), 0u) << "the parent's lease outlived it\n" << agent.process().Stderr();
}

// Killed, a program releases nothing: its lease ends with its TTL, as before.
TEST(Remote, AKilledProgramsGpupoolRequestLeaseEndsWithItsTtl) {
  Agent agent(AgentOptions{.name = "killed", .emulated = 1, .emulated_memory = "2GiB", .lease_ttl = "3s"});
  Pool pool = Connect({agent.address()});
  Process run({Program("exit_paths"), "hold"}, RequestEnv("-n 1 -p 1 --servers " + agent.address()));
  ASSERT_EQ(run.ReadLine(seconds(60)), "exit_paths: holding") << run.Stderr();
  run.Signal(SIGKILL);
  EXPECT_EQ(run.Wait(), 128 + SIGKILL);
  EXPECT_EQ(LeaseCount(pool.State()), 1u) << "nobody released the killed program's lease";
  EXPECT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(15))) << agent.process().Stderr();
  ExpectAllFree(pool.State());
}

// A lease handed over in GPUPOOL_LEASE (gp-run's) is its allocator's: the program's exit leaves it held.
TEST(Remote, AProgramLeavesALeaseHandedOverInGpupoolLeaseHeld) {
  Agent agent(AgentOptions{.name = "handed", .emulated = 1, .emulated_memory = "2GiB", .lease_ttl = "20s"});
  Pool pool = Connect({agent.address()});
  auto lease = pool.Allocate(Slices(1, 1.0));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  // GPUPOOL_REQUEST too, as in a Jupyter kernel spec started under gp-run: the lease handed over wins.
  std::vector<std::string> env = RequestEnv("-n 1 -p 1 --servers " + agent.address());
  env.push_back("GPUPOOL_LEASE=" + lease->Token());  // Overrides RequestEnv's empty one.
  for (const char* mode : {"return", "exit"}) {
    SCOPED_TRACE(mode);
    RunResult r = RunCommand({Program("exit_paths"), mode}, env, seconds(60));
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("exit_paths: ") + mode + ": ok"), std::string::npos) << r.out << r.err;
    EXPECT_EQ(LeaseCount(pool.State()), 1u) << "the program released a lease that was not its own";
    EXPECT_TRUE(lease->Health().ok()) << lease->Health().ToString();
  }
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_EQ(LeaseCount(pool.State()), 0u);
}

// The session workers (one process per session) that the agent `agent_pid` runs now.
std::vector<pid_t> SessionWorkers(pid_t agent_pid) {
  std::ifstream in("/proc/" + std::to_string(agent_pid) + "/task/" + std::to_string(agent_pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t pid; in >> pid;) out.push_back(pid);
  return out;
}

TEST(Remote, AKilledWorkerOrAFaultingKernelEndsOnlyItsOwnSession) {
  Agent agent(AgentOptions{.name = "tenants", .emulated = 1, .emulated_memory = "4GiB"});
  Pool pool = Connect({agent.address()});
  // Tenant A: a kernel that never ends.
  Process a({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.25", "--", Program("spin")});
  ASSERT_EQ(a.ReadLine(seconds(60)), "spin: running") << a.Stderr();
  std::vector<pid_t> workers = SessionWorkers(agent.process().pid());
  ASSERT_EQ(workers.size(), 1u) << "one session, one worker process";
  // Tenant C: kernels back to back on the same GPU for 3 s, running while its neighbours die and fault.
  Process c({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.25", "--", Program("busy"), "3"});
  ASSERT_TRUE(Eventually([&] { return SessionWorkers(agent.process().pid()).size() == 2; }, seconds(30)))
      << c.Stderr();
  kill(workers[0], SIGKILL);
  // A's program learns it at its pending call, with an error, and does not hang.
  EXPECT_EQ(a.Wait(seconds(30)), 1) << a.Stderr();
  std::string a_out = a.ReadAll();
  EXPECT_NE(a_out.find("spin: cuda"), std::string::npos) << a_out << a.Stderr();
  // Tenant B: a kernel that writes through a wild pointer gets the GPU's error, not the agent's crash.
  RunResult b = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.25", "--",
                            Program("bad_kernel")},
                           {}, seconds(120));
  EXPECT_EQ(b.code, 3) << b.out << b.err;
  EXPECT_NE(b.out.find("bad_kernel: cudaErrorIllegalAddress"), std::string::npos) << b.out << b.err;
  EXPECT_EQ(c.Wait(seconds(120)), 0) << c.Stderr();
  std::string c_out = c.ReadAll();
  EXPECT_NE(c_out.find("busy: "), std::string::npos) << c_out << c.Stderr();
  // And the GPU still computes correctly for the next tenant.
  RunResult d = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.25", "--",
                            Example("matrix_multiply")},
                           {}, seconds(120));
  EXPECT_EQ(d.code, 0) << d.out << d.err;
  EXPECT_NE(d.out.find("PASSED"), std::string::npos) << d.out << d.err;
  EXPECT_TRUE(agent.process().running()) << agent.process().Stderr();
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)));
  ExpectAllFree(pool.State());
  EXPECT_TRUE(Eventually([&] { return SessionWorkers(agent.process().pid()).empty(); }, seconds(10)))
      << "every session worker exits with its session";
}

// Two 0.05 leases with 65 processes each (130 sessions on one device) overflowed the device's 128-slot turns table:
// the extra sessions died as their workers started ("Broken pipe"; the program read "no CUDA-capable device").
// Capacity is declared ([limits] sessions_per_device, sessions_per_lease; 128 and 64 by default) and checked
// before a worker starts: each extra session is refused with a message naming its limit, and the device serves on.
TEST(Remote, SessionsBeyondTheDeclaredLimitsAreRefusedNamingThemAndTheDeviceServesOn) {
  Agent agent(AgentOptions{.name = "crowd", .emulated = 1, .emulated_memory = "8GiB"});
  Pool pool = Connect({agent.address()});
  auto a = pool.Allocate(Slices(1, 0.05));
  auto b = pool.Allocate(Slices(1, 0.05));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->slices()[0].device, b->slices()[0].device);
  std::vector<std::unique_ptr<internal::RemoteSession>> of_a, of_b;
  // Lease a's 65th session passes its lease's limit; lease b's 65th would be the device's 129th, and the device's
  // limit is checked first.
  for (auto [lease, held, limit] : {std::make_tuple(&*a, &of_a, "[limits] sessions_per_lease = 64"),
                                    std::make_tuple(&*b, &of_b, "[limits] sessions_per_device = 128")}) {
    std::vector<Status> refused;
    for (int i = 0; i < 65; ++i) {  // As 65 processes of the lease would, one session each.
      auto opened = internal::RemoteSession::OpenLease(lease->Token());
      if (opened.ok()) {
        held->push_back(std::move(opened->front()));
      } else {
        refused.push_back(opened.status());
      }
    }
    EXPECT_EQ(held->size(), 64u);
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0].code(), StatusCode::kResourceExhausted) << refused[0].ToString();
    EXPECT_NE(refused[0].message().find(limit), std::string::npos) << refused[0].ToString();
  }
  // 128 sessions on the device: a third lease's first is refused by the device's limit, before any worker starts.
  auto c = pool.Allocate(Slices(1, 0.5));
  ASSERT_TRUE(c.ok());
  auto refused = internal::RemoteSession::OpenLease(c->Token());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("[limits] sessions_per_device = 128"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(SessionWorkers(agent.process().pid()).size(), 128u) << "a refused session started a worker";
  // The sessions held all serve.
  for (auto* held : {&of_a, &of_b}) {
    for (auto& session : *held) {
      uint64_t address = 0;
      ASSERT_EQ(session->MemAlloc(4096, &address), 0);
    }
  }
  // Room again: the device computes for the next tenant, taking turns with the sessions still open.
  of_a.clear();
  RunResult next = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.25", "--", Program("busy"),
                               "1"},
                              {}, seconds(120));
  EXPECT_EQ(next.code, 0) << next.out << next.err;
  EXPECT_NE(next.out.find("busy: "), std::string::npos) << next.out << next.err;
  EXPECT_TRUE(agent.process().running()) << agent.process().Stderr();
}

// Clients reach their session's worker directly: once the session is open, its calls no longer pass through the
// agent, so a program keeps computing while the agent process is stopped (SIGSTOP), and gets its results.
// GPUPOOL_DIRECT_SESSIONS=0 keeps every call on the agent's connection: then the stopped agent holds it up.
TEST(Remote, SessionCallsGoStraightToTheWorkerNotThroughTheAgent) {
  Agent agent(AgentOptions{.name = "direct", .emulated = 1, .emulated_memory = "2GiB"});
  for (bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "direct" : "through the agent");
    Process run({ToolPath("gp-run"), "--servers", agent.address(), "--", Program("busy"), "1", "trace"},
                {direct ? "GPUPOOL_DIRECT_SESSIONS=1" : "GPUPOOL_DIRECT_SESSIONS=0"});
    ASSERT_EQ(run.ReadLine(seconds(60)).rfind("busy: at ", 0), 0u) << run.Stderr();  // Session open, module loaded.
    kill(agent.process().pid(), SIGSTOP);
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + seconds(direct ? 30 : 4);
    while (line.find("kernels in") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      line = run.ReadLine(seconds(1));
    }
    kill(agent.process().pid(), SIGCONT);
    if (direct) {
      EXPECT_NE(line.find("busy: "), std::string::npos) << "the program stalled with its agent: " << run.Stderr();
    } else {
      EXPECT_EQ(line.find("kernels in"), std::string::npos) << "calls through a stopped agent completed: " << line;
    }
    EXPECT_EQ(run.Wait(seconds(60)), 0) << run.Stderr();
  }
}

// Compute shares under contention: two busy tenants with 0.75 and 0.25 of one emulated GPU. The achieved shares
// are bench/share_bench.sh's business; this checks only that the bigger share gets more done.
// Two busy tenants with 0.75 and 0.25 of one device: the bigger share gets more work done (the achieved ratio is
// bench/share_bench.sh's to measure). `agent_env` picks how the device is shared.
void ExpectTheBiggerShareGetsMoreWork(std::vector<std::string> agent_env) {
  Agent agent(AgentOptions{.name = "shares", .emulated = 1, .emulated_memory = "4GiB", .env = std::move(agent_env)});
  Process big({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.75", "--", Program("busy"), "4"});
  Process small({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.25", "--", Program("busy"), "4"});
  ASSERT_EQ(big.Wait(seconds(60)), 0) << big.Stderr();
  ASSERT_EQ(small.Wait(seconds(60)), 0) << small.Stderr();
  std::string big_out = big.ReadAll(), small_out = small.ReadAll();
  long big_kernels = 0, small_kernels = 0;
  ASSERT_EQ(std::sscanf(big_out.c_str(), "busy: %ld kernels", &big_kernels), 1) << big_out;
  ASSERT_EQ(std::sscanf(small_out.c_str(), "busy: %ld kernels", &small_kernels), 1) << small_out;
  EXPECT_GT(big_kernels, small_kernels) << "0.75: " << big_out << "0.25: " << small_out;
}

// `busy SECONDS trace` progress ("busy: at MS N" lines): the kernels done by time `ms`, linear between lines.
double KernelsBy(const std::vector<std::pair<double, double>>& progress, double ms) {
  if (progress.empty() || ms <= progress.front().first) return 0;
  for (size_t i = 1; i < progress.size(); ++i) {
    const auto& [t0, k0] = progress[i - 1];
    const auto& [t1, k1] = progress[i];
    if (t1 >= ms) return k0 + (k1 - k0) * (ms - t0) / std::max(t1 - t0, 1e-9);
  }
  return progress.back().second;
}

std::vector<std::pair<double, double>> Progress(const std::string& out) {
  std::vector<std::pair<double, double>> progress;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    double ms = 0, kernels = 0;
    if (std::sscanf(line.c_str(), "busy: at %lf %lf", &ms, &kernels) == 2) progress.emplace_back(ms, kernels);
  }
  return progress;
}

// Eight processes of one 0.05 lease took eight shares of the device: a 0.5 neighbour got about half of the work,
// not 0.5 / 0.55. All sessions of a lease on a device share the lease's one weight. Counted while all run; the
// small lease picks up the big one's gaps between batches (work-conserving), so the test asks only for well over
// twice the work (eight shares gave the big tenant about as much as the eight processes together).
void ExpectEightProcessesOfALeaseToShareItsWeight(std::vector<std::string> agent_env) {
  Agent agent(AgentOptions{.name = "crowd", .emulated = 1, .emulated_memory = "4GiB", .env = std::move(agent_env)});
  TempDir dir;
  Process small({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.05", "--", "bash", "-c",
                 "for i in 0 1 2 3 4 5 6 7; do \"$0\" 5 trace >\"$1.$i\" & done; wait", Program("busy"),
                 dir.path() + "/small"});
  // All eight are running before the big tenant starts.
  ASSERT_TRUE(Eventually(
      [&] {
        for (int i = 0; i < 8; ++i) {
          std::ifstream f(dir.path() + "/small." + std::to_string(i));
          std::string first;
          if (!std::getline(f, first) || first.rfind("busy: at ", 0) != 0) return false;
        }
        return true;
      },
      seconds(60)))
      << small.Stderr();
  RunResult big = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.5", "--", Program("busy"),
                              "2", "trace"},
                             {}, seconds(60));
  ASSERT_EQ(big.code, 0) << big.out << big.err;
  ASSERT_EQ(small.Wait(seconds(60)), 0) << small.Stderr();
  auto big_progress = Progress(big.out);
  ASSERT_GE(big_progress.size(), 2u) << big.out;
  const double from = big_progress.front().first, to = big_progress.back().first;
  double small_kernels = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f(dir.path() + "/small." + std::to_string(i));
    std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto progress = Progress(out);
    ASSERT_GE(progress.size(), 2u) << out;
    EXPECT_GE(progress.back().first, to) << "small process " << i << " ended before the big one";
    small_kernels += KernelsBy(progress, to) - KernelsBy(progress, from);
  }
  const double big_kernels = big_progress.back().second;
  EXPECT_GT(big_kernels, 2 * small_kernels) << "0.5 lease: " << big_kernels << " kernels; the 0.05 lease's 8 "
                                            << "processes: " << small_kernels << " kernels while it ran";
}

// The emulated device's turns per kernel. (Throttled submissions share by lease too, but each process's batch of
// queued kernels runs once submitted, so there the split is bench/share_bench.sh's to measure.)
TEST(Remote, EightProcessesOfALeaseShareItsComputeShare) { ExpectEightProcessesOfALeaseToShareItsWeight({}); }

// The emulated device takes turns per kernel, pausing a running kernel at its checkpoints.
TEST(Remote, TheBiggerComputeShareGetsMoreWorkDone) { ExpectTheBiggerShareGetsMoreWork({}); }

// The session server takes turns per submission, as it does for a physical GPU without MPS.
TEST(Remote, TheBiggerComputeShareGetsMoreWorkDoneWhenTheServerTakesTurnsPerSubmission) {
  ExpectTheBiggerShareGetsMoreWork({"GPUPOOL_EMU_SUBMISSION_TURNS=1"});
}

// With turns per submission (a GPU without MPS), a turn was handed back only once the running work completed: a
// 0.05 tenant's kernel that runs for minutes kept a 0.5 tenant's short program waiting as long. Now the work of
// both runs side by side (the device time-slicing, as a GPU's driver does between contexts) and only a lease over
// its share is held back: the short program finishes while the long kernel still runs.
TEST(Remote, ANeighboursLongKernelHoldsNoWorkBackWhenTheServerTakesTurnsPerSubmission) {
  Agent agent(AgentOptions{.name = "long-kernel", .emulated = 1, .emulated_memory = "4GiB",
                           .env = {"GPUPOOL_EMU_SUBMISSION_TURNS=1"}});
  Process spin({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.05", "--", Program("spin")});
  ASSERT_EQ(spin.ReadLine(seconds(60)), "spin: running") << spin.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Its kernel is on the device.
  Process quick({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.5", "--", Program("busy"), "0.3"});
  EXPECT_EQ(quick.Wait(seconds(60)), 0) << "the 0.5 tenant waited on its neighbour's kernel: " << quick.Stderr();
  EXPECT_TRUE(spin.running()) << "the long kernel ended: the test proves nothing";
  std::string out = quick.ReadAll();
  EXPECT_NE(out.find("busy: "), std::string::npos) << out << quick.Stderr();
}

// Two agents in two network namespaces joined to this one by veth pairs: a real network between client and
// servers. Needs root (CI runs as root); skipped, with the reason, elsewhere.
class NetNamespaces : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    suffix_ = std::to_string(getpid() % 100000);
    for (int i = 0; i < 2; ++i) {
      std::string ns = Ns(i), host_if = "gph" + std::to_string(i) + suffix_, ns_if = "gpn" + std::to_string(i) + suffix_;
      std::string net = "10.231." + std::to_string(10 + i);
      std::vector<std::string> cmds = {
          "ip netns add " + ns,
          "ip link add " + host_if + " type veth peer name " + ns_if,
          "ip link set " + ns_if + " netns " + ns,
          "ip addr add " + net + ".1/24 dev " + host_if,
          "ip link set " + host_if + " up",
          "ip netns exec " + ns + " ip addr add " + net + ".2/24 dev " + ns_if,
          "ip netns exec " + ns + " ip link set " + ns_if + " up",
          "ip netns exec " + ns + " ip link set lo up",
      };
      for (const auto& c : cmds) {
        if (std::system(c.c_str()) != 0) GTEST_SKIP() << "cannot set up network namespaces: '" << c << "' failed";
      }
      created_ = true;
    }
  }
  void TearDown() override {
    agents_.clear();
    if (!created_) return;
    for (int i = 0; i < 2; ++i) {
      std::system(("ip netns del " + Ns(i) + " 2>/dev/null").c_str());
      std::system(("ip link del gph" + std::to_string(i) + suffix_ + " 2>/dev/null").c_str());
    }
  }
  std::string Ns(int i) const { return "gpns" + std::to_string(i) + "-" + suffix_; }
  std::string suffix_;
  bool created_ = false;
  std::vector<std::unique_ptr<Process>> agents_;
};

TEST_F(NetNamespaces, TwoSlicesOnTwoHostsInOneProgram) {
  std::string servers;
  for (int i = 0; i < 2; ++i) {
    std::string address = "10.231." + std::to_string(10 + i) + ".2:7450";
    agents_.push_back(std::make_unique<Process>(std::vector<std::string>{
        "/usr/sbin/ip", "netns", "exec", Ns(i), ToolPath("gp-agent"), "--no-nvml", "--emu", "1", "--emu-memory",
        "2GiB", "--name", "host" + std::to_string(i), "--listen", address}));
    ASSERT_NE(agents_.back()->ReadLine(seconds(20)).find("listening on"), std::string::npos)
        << agents_.back()->Stderr();
    servers += (servers.empty() ? "" : ",") + address;
  }
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", servers, "-n", "2", "--spread", "-v", "--",
                            Example("two_devices")},
                           {}, seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASSED"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("host0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("host1"), std::string::npos) << r.err;
}

// The network between client and agent dies (the veth link goes down) in the middle of copies: the program gets an
// error within the lease TTL instead of hanging, and the agent frees the capacity within the TTL.
TEST_F(NetNamespaces, ACutNetworkFailsTheProgramAndFreesTheSliceWithinTheLeaseTtl) {
  const std::string address = "10.231.10.2:7450";
  agents_.push_back(std::make_unique<Process>(std::vector<std::string>{
      "/usr/sbin/ip", "netns", "exec", Ns(0), ToolPath("gp-agent"), "--no-nvml", "--emu", "1", "--emu-memory",
      "2GiB", "--name", "cut", "--listen", address, "--lease-ttl", "20s"}));
  ASSERT_NE(agents_.back()->ReadLine(seconds(20)).find("listening on"), std::string::npos) << agents_.back()->Stderr();
  Process run({ToolPath("gp-run"), "--servers", address, "--", Program("copy_loop")});
  ASSERT_EQ(run.ReadLine(seconds(60)), "copy_loop: running") << run.Stderr();
  const std::string link = "gph0" + suffix_;
  ASSERT_EQ(std::system(("ip link set " + link + " down").c_str()), 0);
  auto cut = std::chrono::steady_clock::now();
  std::string line = run.ReadLine(seconds(20));
  auto noticed = std::chrono::steady_clock::now() - cut;
  EXPECT_NE(line.find("copy_loop: cuda"), std::string::npos)
      << "no error within the 20 s lease TTL: '" << line << "' " << run.Stderr();
  EXPECT_LT(noticed, seconds(20));
  ASSERT_EQ(std::system(("ip link set " + link + " up").c_str()), 0);
  EXPECT_NE(run.Wait(seconds(40)), -1) << "gp-run hung after its program failed";
  Pool pool = Connect({address});
  EXPECT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(25))) << agents_.back()->Stderr();
  ExpectAllFree(pool.State());
}

// The cuda backend (lib/backend/cuda) for real without a GPU: an agent whose CUDA driver is gpupool's own
// libcuda.so.1, run under gp-run holding both emulated devices of a second agent (a test configuration, README).
// Threads the default emulated device (compute capability 12.1: a GB10's 48 SMs x 1536 threads) holds at once: the
// driver below keeps a 1 KiB stack for each from a context's start, and a launch's local memory for each.
constexpr uint64_t kResidentThreads = 48 * 1536;

class Stacked : public ::testing::Test {
 protected:
  Agent gpus_{AgentOptions{.name = "gpus", .emulated = 2, .emulated_memory = "4GiB"}};
  Agent agent_{AgentOptions{.name = "stacked",
                            .emulated = 0,
                            .lease_ttl = "2s",
                            .extra_args = {"--cuda-driver", GPUPOOL_DRIVER_LIBRARY},
                            .launcher = {ToolPath("gp-run"), "--servers", gpus_.address(), "-n", "2", "--"}}};

  // The stacked agent's process (agent_.process() is gp-run, its parent).
  pid_t AgentPid() {
    std::vector<pid_t> children = SessionWorkers(agent_.process().pid());
    return children.size() == 1 ? children[0] : -1;
  }
  // A whole stacked GPU's memory can be had again (once the sessions below have noticed their client's end):
  // nothing of an earlier session stays held on the device below. All of it but what the driver holds for the
  // context from the session's start, which the slice pays for: heap and printf buffer (8 + 1 MiB) and 1 KiB stacks
  // for the threads the emulated device holds at once (kResidentThreads).
  void ExpectTheWholeGpuAllocatable() {
    Pool pool = Connect({agent_.address()});
    auto lease = pool.Allocate(Slices(1, 1.0));
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    auto sessions = internal::RemoteSession::OpenLease(lease->Token());
    ASSERT_TRUE(sessions.ok()) << sessions.status().ToString();
    internal::RemoteSession& session = *sessions->front();
    uint64_t free_bytes = 0, total = 0;
    ASSERT_EQ(session.MemGetInfo(&free_bytes, &total), 0) << session.last_error();
    EXPECT_EQ(free_bytes, (4ull << 30) - (9ull << 20) - kResidentThreads * 1024);
    // In whole 2 MiB pieces, the granularity of the device below.
    const uint64_t whole_pieces = free_bytes / (2ull << 20) * (2ull << 20);
    uint64_t address = 0;
    EXPECT_TRUE(Eventually([&] { return session.MemAlloc(whole_pieces, &address) == 0; }, seconds(10)))
        << session.last_error() << "\n" << gpus_.process().Stderr();
  }
};

TEST_F(Stacked, ProgramKilledMidKernelLeavesNoSessionMemoryOrLease) {
  Process run({ToolPath("gp-run"), "--servers", agent_.address(), "--", Program("spin")});
  ASSERT_EQ(run.ReadLine(seconds(60)), "spin: running") << run.Stderr() << agent_.process().Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // The kernel runs on the device below now.
  kill(-run.pid(), SIGKILL);
  run.Wait();
  ASSERT_TRUE(Eventually([&] { return agent_.process().Stderr().find("closed: its memory and modules are freed") !=
                                      std::string::npos; },
                         seconds(10)))
      << agent_.process().Stderr();
  Pool pool = Connect({agent_.address()});
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)));
  ExpectAllFree(pool.State());
  ExpectTheWholeGpuAllocatable();
  EXPECT_TRUE(agent_.process().running()) << agent_.process().Stderr();
}

// Surfaces on the cuda backend: the client keeps CUDA arrays as pitched memory, which a GPU makes no surface over, so
// a real array shadows it, filled before each launch and copied back after (CudaBackend::CreateOverShadow). The
// textures program (a surface written by a kernel and read back as an array; a surface over an array made without
// the surface flag; textures over arrays and linear memory) passes as on an emulated slice, and gives its memory back.
TEST_F(Stacked, SurfacesAndArrayTexturesRunOverRealArrays) {
  RunResult r = RunCommand({ToolPath("gp-run"), "--servers", agent_.address(), "--", Program("textures")}, {},
                           seconds(120));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("textures: 0+0+0 wrong, 0 failure(s): PASSED"), std::string::npos) << r.out << r.err;
  Pool pool = Connect({agent_.address()});
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)));
  ExpectAllFree(pool.State());
}

TEST_F(Stacked, AKilledWorkerEndsOnlyItsOwnSession) {
  pid_t agent_pid = AgentPid();
  ASSERT_GT(agent_pid, 0) << "gp-run runs the stacked agent";
  Process a({ToolPath("gp-run"), "--servers", agent_.address(), "-p", "0.5", "--", Program("spin")});
  ASSERT_EQ(a.ReadLine(seconds(60)), "spin: running") << a.Stderr();
  std::vector<pid_t> workers = SessionWorkers(agent_pid);
  ASSERT_EQ(workers.size(), 1u);
  Process c({ToolPath("gp-run"), "--servers", agent_.address(), "-p", "0.5", "--", Program("busy"), "2"});
  ASSERT_TRUE(Eventually([&] { return SessionWorkers(agent_pid).size() == 2; }, seconds(30))) << c.Stderr();
  kill(workers[0], SIGKILL);
  EXPECT_EQ(a.Wait(seconds(30)), 1) << a.Stderr();
  EXPECT_NE(a.ReadAll().find("spin: cuda"), std::string::npos) << a.Stderr();
  EXPECT_EQ(c.Wait(seconds(120)), 0) << c.Stderr();
  EXPECT_NE(c.ReadAll().find("busy: "), std::string::npos) << c.Stderr();
  RunResult d = RunCommand({ToolPath("gp-run"), "--servers", agent_.address(), "--", Example("matrix_multiply")}, {},
                           seconds(120));
  EXPECT_EQ(d.code, 0) << d.out << d.err;
  Pool pool = Connect({agent_.address()});
  ASSERT_TRUE(Eventually([&] { return LeaseCount(pool.State()) == 0; }, seconds(10)));
  ExpectTheWholeGpuAllocatable();
  EXPECT_TRUE(Eventually([&] { return SessionWorkers(agent_pid).empty(); }, seconds(10)))
      << SessionWorkers(agent_pid).size() << " worker(s) left: " << agent_.process().Stderr() << [&] {
           std::string out;
           for (pid_t p : SessionWorkers(agent_pid)) {
             std::ifstream st("/proc/" + std::to_string(p) + "/status");
             std::string line;
             for (int i = 0; i < 3 && std::getline(st, line); ++i) out += line + "; ";
             out += "\n";
           }
           return out;
         }();
}

// What the CUDA driver takes for a session beyond its allocations is the slice's memory too (issue "Tenant
// isolation, hardened", item 7): the heap, printf buffer and stacks from the start, a module's variables at its
// load, a kernel's local memory for every resident thread at its launch; past the slice, the load or the launch is
// refused, naming the slice. Through the cuda backend for real: the stacked agent's driver is gpupool's libcuda
// over emulated devices.
constexpr char kDriverMemoryPtx[] = R"(
.version 7.0
.target sm_50
.address_size 64
.global .align 8 .b8 table[67108864];
.visible .entry small_local(.param .u64 out)
{
  .local .align 4 .b8 scratch[1024];
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  mov.u32 %r1, 7;
  st.local.u32 [scratch], %r1;
  ld.local.u32 %r1, [scratch];
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd2, %rd2;
  st.global.u32 [%rd2], %r1;
  ret;
}
.visible .entry big_local(.param .u64 out)
{
  .local .align 4 .b8 scratch[16384];
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  mov.u32 %r1, 9;
  st.local.u32 [scratch], %r1;
  ld.local.u32 %r1, [scratch];
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd2, %rd2;
  st.global.u32 [%rd2], %r1;
  ret;
}
)";
constexpr char kHugeModulePtx[] = R"(
.version 7.0
.target sm_50
.address_size 64
.global .align 8 .b8 huge[629145600];
.visible .entry nothing()
{
  ret;
}
)";

TEST_F(Stacked, TheDriversMemoryForASessionIsChargedToTheSliceAndRefusedPastIt) {
  constexpr uint64_t kMiB = 1ull << 20;
  constexpr int kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY.
  Pool pool = Connect({agent_.address()});
  auto lease = pool.Allocate(Slices(1, 0.125));  // 512 MiB of a 4 GiB GPU.
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  auto sessions = internal::RemoteSession::OpenLease(lease->Token());
  ASSERT_TRUE(sessions.ok()) << sessions.status().ToString();
  internal::RemoteSession& session = *sessions->front();
  uint64_t free_bytes = 0, total = 0;
  ASSERT_EQ(session.MemGetInfo(&free_bytes, &total), 0) << session.last_error();
  ASSERT_EQ(total, 512 * kMiB);
  // The heap (8 MiB) and the printf buffer (1 MiB) the backend set when the session began, and a 1 KiB stack for
  // every thread the device holds at once (kResidentThreads).
  EXPECT_EQ(free_bytes, total - 9 * kMiB - kResidentThreads * 1024);

  // The module's 64 MiB variable, as the device's free memory below moved at its load.
  uint64_t module = 0;
  ASSERT_EQ(session.ModuleLoad(kDriverMemoryPtx, sizeof(kDriverMemoryPtx), &module), 0) << session.last_error();
  uint64_t after_load = 0;
  ASSERT_EQ(session.MemGetInfo(&after_load, &total), 0);
  EXPECT_GE(free_bytes - after_load, 64 * kMiB);
  EXPECT_LT(free_bytes - after_load, 72 * kMiB);

  // A launch: the kernel's own 1 KiB of local memory, for every thread the device holds at once.
  internal::RemoteFunctionInfo small, big;
  ASSERT_EQ(session.GetFunction(module, "small_local", &small), 0) << session.last_error();
  ASSERT_EQ(session.GetFunction(module, "big_local", &big), 0) << session.last_error();
  uint64_t out = 0;
  ASSERT_EQ(session.MemAlloc(4096, &out), 0) << session.last_error();
  uint64_t after_alloc = 0;
  ASSERT_EQ(session.MemGetInfo(&after_alloc, &total), 0);
  const uint32_t one[3] = {1, 1, 1};
  ASSERT_EQ(session.Launch(small.handle, one, one, 0, 0, &out, sizeof(out)), 0) << session.last_error();
  ASSERT_EQ(session.Synchronize(), 0) << session.last_error();
  uint32_t value = 0;
  ASSERT_EQ(session.CopyFromDevice(&value, out, sizeof(value), 0), 0) << session.last_error();
  EXPECT_EQ(value, 7u);
  uint64_t after_launch = 0;
  ASSERT_EQ(session.MemGetInfo(&after_launch, &total), 0);
  EXPECT_EQ(after_alloc - after_launch, kResidentThreads * 1024);

  // 16 KiB of local memory a thread (and the stack): 1224 MiB for the device's threads, past the 512 MiB slice.
  // Refused before it runs; the session goes on.
  ASSERT_EQ(session.Launch(big.handle, one, one, 0, 0, &out, sizeof(out)), 0);  // Not waited for.
  EXPECT_EQ(session.Synchronize(), kOutOfMemory);
  EXPECT_NE(session.last_error().find("16384 bytes per thread"), std::string::npos) << session.last_error();
  EXPECT_NE(session.last_error().find("do not fit in the slice's memory"), std::string::npos) << session.last_error();
  ASSERT_EQ(session.CopyFromDevice(&value, out, sizeof(value), 0), 0) << session.last_error();
  EXPECT_EQ(value, 7u) << "the refused kernel ran";

  // A module whose 600 MiB variable does not fit: refused, and nothing of it stays charged.
  uint64_t huge = 0;
  EXPECT_EQ(session.ModuleLoad(kHugeModulePtx, sizeof(kHugeModulePtx), &huge), kOutOfMemory);
  EXPECT_NE(session.last_error().find("module load"), std::string::npos) << session.last_error();
  EXPECT_NE(session.last_error().find("do not fit in the slice's memory"), std::string::npos) << session.last_error();
  uint64_t after_refusal = 0;
  ASSERT_EQ(session.MemGetInfo(&after_refusal, &total), 0);
  EXPECT_EQ(after_refusal, after_launch);

  // Unloaded, the module's memory is the slice's again.
  ASSERT_EQ(session.ModuleUnload(module), 0) << session.last_error();
  uint64_t after_unload = 0;
  ASSERT_EQ(session.MemGetInfo(&after_unload, &total), 0);
  EXPECT_EQ(after_unload - after_launch, free_bytes - after_load);
}

// The soft and hard RLIMIT_AS of `pid` as /proc/PID/limits shows them ("unlimited" or bytes).
std::pair<std::string, std::string> AddressSpaceLimit(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/limits");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Max address space", 0) == 0) {
      std::istringstream words(line.substr(std::string("Max address space").size()));
      std::string soft, hard;
      words >> soft >> hard;
      return {soft, hard};
    }
  }
  return {"", ""};
}

// The issue's done-criterion: under a root agent, `ps` shows the session workers as the workers' user, confined
// (no new privileges, the seccomp filter, no capabilities, not in root's group) and capped, while a program runs
// through them; on a Unix-socket agent, whose door the worker bound before it gave up root.
TEST(Remote, SessionWorkersOfARootAgentRunAsTheWorkersUserConfinedAndCapped) {
  if (geteuid() != 0) GTEST_SKIP() << "needs a root agent: a non-root agent's workers run as the agent's own user";
  struct passwd* user = getpwnam("gpupool");
  if (user == nullptr) GTEST_SKIP() << "no 'gpupool' user: scripts/setup.sh (or cmake --install) creates it";
  const uid_t uid = user->pw_uid;
  TempDir dir;
  std::string config = dir.Write("agent.toml", "[workers]\nmemory_limit = \"1GiB\"\n");
  Agent agent(AgentOptions{.name = "confined", .emulated = 1, .emulated_memory = "2GiB",
                           .listen = "unix:" + dir.path() + "/agent.sock", .extra_args = {"--config", config}});
  Process spin({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.5", "--", Program("spin")});
  ASSERT_EQ(spin.ReadLine(seconds(60)), "spin: running") << spin.Stderr() << agent.process().Stderr();
  std::vector<pid_t> workers = SessionWorkers(agent.process().pid());
  ASSERT_EQ(workers.size(), 1u);
  const pid_t worker = workers[0];
  EXPECT_EQ(ProcStatusField(agent.process().pid(), "Uid").substr(0, 2), "0\t") << "the agent itself stays root";
  RunResult ps = RunCommand({"/bin/sh", "-c", "ps -o uid= -p " + std::to_string(worker)});
  EXPECT_EQ(std::atoi(ps.out.c_str()), static_cast<int>(uid)) << ps.out << ps.err;
  EXPECT_EQ(ProcStatusField(worker, "Uid"), fmt::format("{0}\t{0}\t{0}\t{0}", uid));
  EXPECT_EQ(ProcStatusField(worker, "Gid"), fmt::format("{0}\t{0}\t{0}\t{0}", user->pw_gid));
  std::istringstream groups(ProcStatusField(worker, "Groups"));
  for (std::string g; groups >> g;) EXPECT_NE(g, "0") << "a worker in root's group";
  EXPECT_EQ(ProcStatusField(worker, "NoNewPrivs"), "1");
  EXPECT_EQ(ProcStatusField(worker, "Seccomp"), "2");
  EXPECT_EQ(ProcStatusField(worker, "CapEff"), "0000000000000000");
  EXPECT_EQ(ProcStatusField(worker, "CapPrm"), "0000000000000000");
  // RLIMIT_AS: the device's window (at least the slice's 1 GiB) plus the configured 1 GiB, soft and hard.
  auto [soft, hard] = AddressSpaceLimit(worker);
  EXPECT_EQ(soft, hard);
  EXPECT_GE(std::strtoull(soft.c_str(), nullptr, 10), 2ull << 30) << soft;
  EXPECT_LT(std::strtoull(soft.c_str(), nullptr, 10), 1ull << 40) << soft;
  // The client entered through the worker's own door, which the worker bound as root, beside the agent's socket.
  EXPECT_EQ(agent.process().Stderr().find("direct connection"), std::string::npos) << agent.process().Stderr();
  spin.Signal(SIGTERM);  // gp-run passes it on and releases the lease.
  EXPECT_TRUE(Eventually([&] { return SessionWorkers(agent.process().pid()).empty(); }, seconds(30)))
      << "the worker still ends with its session: " << agent.process().Stderr();
}

// /proc/PID/cgroup's cgroup v2 group ("0::PATH"), or "".
std::string UnifiedGroupOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// Where the cgroup v2 hierarchy is mounted, or "".
std::string UnifiedMountPoint() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    size_t dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream fields(line);
    std::string id, parent, device, root, mount;
    fields >> id >> parent >> device >> root >> mount;
    return mount;
  }
  return "";
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Where the agent cannot give each worker a memory-capped cgroup (told not to here; or a group not delegated to it,
// a read-only /sys/fs/cgroup), a worker of an emulated device keeps
// its RLIMIT_AS, stays in the agent's group, and the agent says once, at start, that workers of GPUs are not
// memory-capped and why. A configured group that cannot be one refuses the start (exit 2), saying what is missing.
TEST(Remote, WithoutACgroupWorkersFallBackToRlimitAsAndTheAgentSaysWhy) {
  TempDir dir;
  std::string config = dir.Write("agent.toml", "[workers]\nmemory_limit = \"1GiB\"\ncgroup = \"off\"\n");
  Agent agent(AgentOptions{.name = "fallback", .emulated = 1, .emulated_memory = "2GiB",
                           .extra_args = {"--config", config}});
  const std::string started = agent.process().Stderr();
  const std::string said = "workers of GPUs are not memory-capped (RLIMIT_AS would break the CUDA driver's "
                           "address-space reservations)";
  EXPECT_NE(started.find("session workers' memory: no cgroup per worker ([workers] cgroup = \"off\")"),
            std::string::npos)
      << started;
  EXPECT_NE(started.find(said), std::string::npos) << started;
  for (int run = 0; run < 2; ++run) {
    Process spin({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.5", "--", Program("spin")});
    ASSERT_EQ(spin.ReadLine(seconds(60)), "spin: running") << spin.Stderr() << agent.process().Stderr();
    std::vector<pid_t> workers = SessionWorkers(agent.process().pid());
    ASSERT_EQ(workers.size(), 1u);
    auto [soft, hard] = AddressSpaceLimit(workers[0]);
    EXPECT_EQ(soft, hard);
    EXPECT_GE(std::strtoull(soft.c_str(), nullptr, 10), 2ull << 30) << "the window plus 1 GiB: " << soft;
    EXPECT_EQ(UnifiedGroupOf(workers[0]), UnifiedGroupOf(agent.process().pid())) << "no group of its own";
    spin.Signal(SIGTERM);
    EXPECT_TRUE(Eventually([&] { return SessionWorkers(agent.process().pid()).empty(); }, seconds(30)));
  }
  const std::string log = agent.process().Stderr();
  EXPECT_EQ(log.find(said), log.rfind(said)) << "said once, not per worker: " << log;

  const std::string mount = UnifiedMountPoint();
  if (mount.empty()) return;  // Nothing more to refuse: no cgroup v2 group exists here.
  if (FileText(mount + "/cgroup.controllers").find("memory") != std::string::npos) return;
  std::string named = dir.Write("named.toml", "[workers]\ncgroup = \"" + mount + "\"\n");
  RunResult refused = RunCommand({ToolPath("gp-agent"), "--config", named, "--listen", "unix:" + dir.path() + "/a.sock",
                                  "--no-nvml", "--emu", "1", "--emu-memory", "1GiB"},
                                 {}, seconds(30));
  EXPECT_EQ(refused.code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("[workers] cgroup: the memory controller is not available in " + mount),
            std::string::npos)
      << refused.err;
}

// The cgroup v1 memory hierarchy's group of `pid` ("N:...memory...:PATH" in /proc/PID/cgroup) and where that
// hierarchy is mounted, or "".
std::string MemoryV1GroupOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(in, line);) {
    size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    if (controllers.find(",memory,") != std::string::npos) return line.substr(second + 1);
  }
  return "";
}
std::string MemoryV1MountPoint() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    size_t dash = line.find(" - cgroup ");
    if (dash == std::string::npos) continue;
    std::string options = "," + line.substr(line.rfind(' ') + 1) + ",";
    if (options.find(",memory,") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string id, parent, device, root, mount;
    fields >> id >> parent >> device >> root >> mount;
    return root == "/" ? mount : "";  // A container's mounted subtree: its paths are not the mount's; not tested.
  }
  return "";
}

// On a cgroup v1 or hybrid system (memory is a v1 controller; this VM and many GPU servers), a root agent with
// `cgroup = "auto"` puts each worker in a group of its own under its own group of the v1 memory hierarchy, memory
// and memory+swap limited to the cap (an emulated device's window plus [workers] memory_limit, as its RLIMIT_AS),
// and the group goes when the worker ends.
TEST(Remote, SessionWorkersGetMemoryCappedCgroupV1Groups) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make groups in the cgroup v1 memory hierarchy";
  const std::string mount = MemoryV1MountPoint();
  if (mount.empty()) GTEST_SKIP() << "no cgroup v1 memory hierarchy (a pure cgroup v2 system)";
  const std::string unified = UnifiedMountPoint();
  if (!unified.empty() && FileText(unified + "/cgroup.controllers").find("memory") != std::string::npos) {
    GTEST_SKIP() << "memory is a cgroup v2 controller here: Remote.SessionWorkersGetMemoryCappedCgroupV2Groups";
  }
  const std::string own = MemoryV1GroupOf(getpid());
  const std::string parent = own == "/" ? mount : mount + own;
  TempDir dir;
  std::string config = dir.Write("agent.toml", "[workers]\nmemory_limit = \"1GiB\"\n");
  Agent agent(AgentOptions{.name = "cgroupsv1", .emulated = 1, .emulated_memory = "2GiB",
                           .extra_args = {"--config", config}});
  EXPECT_NE(agent.process().Stderr().find("a cgroup each under " + parent + ", memory.limit_in_bytes (v1"),
            std::string::npos)
      << agent.process().Stderr();
  Process spin({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.5", "--", Program("spin")});
  ASSERT_EQ(spin.ReadLine(seconds(60)), "spin: running") << spin.Stderr() << agent.process().Stderr();
  std::vector<pid_t> workers = SessionWorkers(agent.process().pid());
  ASSERT_EQ(workers.size(), 1u);
  const std::string group = mount + MemoryV1GroupOf(workers[0]);
  EXPECT_EQ(group, parent + "/worker-" + std::to_string(workers[0]));
  auto [soft, hard] = AddressSpaceLimit(workers[0]);
  EXPECT_EQ(FileText(group + "/memory.limit_in_bytes"), soft) << "the emulated device's window plus 1 GiB";
  if (access((group + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0) {
    EXPECT_EQ(FileText(group + "/memory.memsw.limit_in_bytes"), soft) << "no swap beyond the cap";
  }
  EXPECT_EQ(MemoryV1GroupOf(agent.process().pid()), own) << "the agent stays where it was started";
  spin.Signal(SIGTERM);
  EXPECT_TRUE(Eventually([&] { return SessionWorkers(agent.process().pid()).empty(); }, seconds(30)));
  EXPECT_TRUE(Eventually([&] { return access(group.c_str(), F_OK) != 0; }, seconds(10)))
      << group << " is left after its worker ended";
}

// Where a cgroup v2 group with the memory controller can be made for the workers (a root test on a cgroup v2
// system whose root group delegates memory), each worker goes into a group of its own under the configured one,
// with memory.max its cap (an emulated device's window plus [workers] memory_limit, as its RLIMIT_AS) and
// memory.swap.max 0, and the group goes when the worker ends.
TEST(Remote, SessionWorkersGetMemoryCappedCgroupV2Groups) {
  const std::string mount = UnifiedMountPoint();
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a cgroup v2 group for the workers";
  if (mount.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy is mounted";
  const std::string root_controllers = FileText(mount + "/cgroup.subtree_control");
  if (root_controllers.find("memory") == std::string::npos) {
    GTEST_SKIP() << "the cgroup v2 hierarchy at " << mount << " has no memory controller for its groups "
                 << "(cgroup.subtree_control: '" << root_controllers << "'; a hybrid or v1 system): "
                 << "Remote.SessionWorkersGetMemoryCappedCgroupV1Groups or Remote.WithoutACgroupWorkersFallBackToRlimitAsAndTheAgentSaysWhy cover it";
  }
  const std::string parent = mount + "/gpupool-test-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(parent.c_str(), 0755), 0) << parent << ": " << std::strerror(errno);
  TempDir dir;
  std::string config = dir.Write("agent.toml", "[workers]\nmemory_limit = \"1GiB\"\ncgroup = \"" + parent + "\"\n");
  {
    Agent agent(AgentOptions{.name = "cgroups", .emulated = 1, .emulated_memory = "2GiB",
                             .extra_args = {"--config", config}});
    EXPECT_NE(agent.process().Stderr().find("a cgroup each under " + parent), std::string::npos)
        << agent.process().Stderr();
    Process spin({ToolPath("gp-run"), "--servers", agent.address(), "-p", "0.5", "--", Program("spin")});
    ASSERT_EQ(spin.ReadLine(seconds(60)), "spin: running") << spin.Stderr() << agent.process().Stderr();
    std::vector<pid_t> workers = SessionWorkers(agent.process().pid());
    ASSERT_EQ(workers.size(), 1u);
    const std::string group = mount + UnifiedGroupOf(workers[0]);
    EXPECT_EQ(group, parent + "/worker-" + std::to_string(workers[0]));
    auto [soft, hard] = AddressSpaceLimit(workers[0]);
    EXPECT_EQ(FileText(group + "/memory.max"), soft) << "the emulated device's window plus 1 GiB";
    if (access((group + "/memory.swap.max").c_str(), F_OK) == 0) {
      EXPECT_EQ(FileText(group + "/memory.swap.max"), "0");
    }
    spin.Signal(SIGTERM);
    EXPECT_TRUE(Eventually([&] { return SessionWorkers(agent.process().pid()).empty(); }, seconds(30)));
    EXPECT_TRUE(Eventually([&] { return access(group.c_str(), F_OK) != 0; }, seconds(10)))
        << group << " is left after its worker ended";
  }
  EXPECT_EQ(rmdir(parent.c_str()), 0) << parent << ": " << std::strerror(errno);
}

// A root agent whose workers' user does not exist refuses to start, saying how to create it; told to run them as
// root it does (still with no new privileges), and `seccomp = false` turns the filter off for debugging.
TEST(Remote, ARootAgentRunsWorkersAsRootOnlyWhenTold) {
  if (geteuid() != 0) GTEST_SKIP() << "needs a root agent";
  TempDir dir;
  std::string missing = dir.Write("missing.toml", "[workers]\nuser = \"gpupool-no-such-user\"\n");
  RunResult refused = RunCommand({ToolPath("gp-agent"), "--config", missing, "--listen", "unix:" + dir.path() + "/a.sock",
                                  "--no-nvml", "--emu", "1", "--emu-memory", "1GiB"},
                                 {}, seconds(30));
  EXPECT_EQ(refused.code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("user 'gpupool-no-such-user' ([workers] user) does not exist"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("useradd --system --no-create-home"), std::string::npos) << refused.err;

  std::string as_root = dir.Write("root.toml", "[workers]\nuser = \"root\"\nseccomp = false\n");
  Agent agent(AgentOptions{.name = "rootworkers", .emulated = 1, .emulated_memory = "1GiB",
                           .extra_args = {"--config", as_root}});
  Process spin({ToolPath("gp-run"), "--servers", agent.address(), "--", Program("spin")});
  ASSERT_EQ(spin.ReadLine(seconds(60)), "spin: running") << spin.Stderr() << agent.process().Stderr();
  std::vector<pid_t> workers = SessionWorkers(agent.process().pid());
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(ProcStatusField(workers[0], "Uid"), "0\t0\t0\t0");
  EXPECT_EQ(ProcStatusField(workers[0], "NoNewPrivs"), "1");
  EXPECT_EQ(ProcStatusField(workers[0], "Seccomp"), "0");
  EXPECT_NE(agent.process().Stderr().find("session workers run as root"), std::string::npos)
      << agent.process().Stderr();
}

}  // namespace
}  // namespace gpupool::testing
