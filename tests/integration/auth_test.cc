// Who the agent says a lease belongs to: the kernel's word on a Unix socket, a token's over TCP, and the client's
// own claim only where the agent requires nothing (and then marked unverified). Real agents, real clients, a
// Unix user created by the test.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "core/util.h"
#include "integration/helpers.h"
#include "pool.capnp.h"

namespace gpupool::testing {
namespace {

using std::chrono::seconds;

constexpr char kAliceToken[] = "alice-token-0123456789abcdef";

// A reservation (committed) of half of device 0 whose owner claims to be `claimed`, sent over the wire as a modified
// client would; `token`, if any, goes in the handshake. `note`: what the agent said with its grant.
Status ReserveClaiming(const std::string& address, const std::string& claimed,
                       const std::string& lease_id = "claimed-lease", const std::string& token = "",
                       std::string* note = nullptr) {
  auto io = kj::setupAsyncIo();
  auto addr = io.provider->getNetwork().parseAddress(address).wait(io.waitScope);
  auto stream = addr->connect().wait(io.waitScope);
  capnp::TwoPartyClient rpc(*stream);
  auto agent = rpc.bootstrap().castAs<wire::Agent>();
  auto hello = agent.helloRequest();
  hello.setClientVersion(wire::PROTOCOL_VERSION);
  if (!token.empty()) hello.setToken(token);
  auto said = hello.send().wait(io.waitScope);
  if (said.getRefused().size() > 0) return Status(StatusCode::kPermissionDenied, said.getRefused());
  auto req = agent.reserveRequest();
  req.initLease().setId(lease_id);
  req.getLease().setSecret("claimed-secret");
  auto owner = req.initOwner();
  owner.setUser(claimed);
  owner.setHost("nowhere");
  auto slices = req.initSlices(1);
  slices[0].setDevice(0);
  slices[0].setMemoryBytes(1u << 30);
  slices[0].setShareMicros(250000);
  auto r = req.send().wait(io.waitScope);
  if (r.getOutcome().getCode() != wire::Outcome::Code::OK) {
    return Status(StatusCode::kPermissionDenied, r.getOutcome().getMessage());
  }
  if (note) *note = r.getOutcome().getMessage();
  auto commit = agent.commitRequest();
  commit.initLease().setId(lease_id);
  commit.getLease().setSecret("claimed-secret");
  commit.send().wait(io.waitScope);
  return Status::Ok();
}

const LeaseInfo* Only(const PoolState& state) {
  return state.servers.size() == 1 && state.servers[0].leases.size() == 1 ? &state.servers[0].leases[0] : nullptr;
}

std::string Me() { return CurrentIdentity().user; }

TEST(Auth, UnixSocketPeersAreWhoTheKernelSays) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  Agent agent(AgentOptions{.name = "auth", .emulated = 1, .emulated_memory = "4GiB",
                           .listen = "unix:" + dir.path() + "/agent.sock", .extra_args = {"--require-auth"}});
  // Anyone may connect (the kernel says who); a modified client's claim to be someone else changes nothing.
  struct stat st;
  ASSERT_EQ(stat((dir.path() + "/agent.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  ASSERT_TRUE(ReserveClaiming(agent.address(), "mallory").ok());
  const LeaseInfo* lease = nullptr;
  PoolState state = Connect({agent.address()}).State();
  lease = Only(state);
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->user, Me());
  EXPECT_TRUE(lease->user_verified);

  // Another Unix user, created here: its lease is its own, whatever $USER says.
  if (geteuid() != 0) GTEST_SKIP() << "creating a second Unix user needs root";
  const std::string user = "gptest-auth";
  RunCommand({"/usr/sbin/useradd", "-M", "-r", "-s", "/usr/sbin/nologin", user});
  RunResult ls = RunCommand({"/usr/sbin/runuser", "-u", user, "--", "/usr/bin/env", "USER=mallory", ToolPath("gp-run"),
                             "--servers", agent.address(), "-p", "0.25", "--", ToolPath("gp-ls"), "--servers",
                             agent.address(), "--leases", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_NE(ls.out.find("\"user\":\"" + user + "\",\"user_verified\":true"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("mallory"), std::string::npos) << ls.out;
}

TEST(Auth, TcpClientsProveWhoTheyAreWithATokenOrAreRefused) {
  TempDir dir;
  std::string tokens = dir.Write("tokens.toml", std::string("[tokens]\nalice = \"") + kAliceToken + "\"\n");
  chmod(tokens.c_str(), 0600);
  Agent agent(AgentOptions{.name = "auth", .emulated = 1, .emulated_memory = "4GiB",
                           .extra_args = {"--require-auth", "--tokens", tokens}});
  const std::string home = dir.path() + "/home";
  RunResult none = RunCommand({ToolPath("gp-ls"), "--servers", agent.address()}, {"HOME=" + home, "GPUPOOL_TOKEN="});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.out.find("requires authentication"), std::string::npos) << none.out;
  RunResult wrong = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "--", "/bin/true"},
                               {"HOME=" + home, "GPUPOOL_TOKEN=not-the-token-000000"});
  EXPECT_EQ(wrong.code, 125);
  EXPECT_NE(wrong.err.find("does not know this client's token"), std::string::npos) << wrong.err;
  EXPECT_EQ(ReserveClaiming(agent.address(), "alice").code(), StatusCode::kPermissionDenied);

  // The right token: the lease is alice's, verified, though the process runs as someone else.
  RunResult right = RunCommand({ToolPath("gp-run"), "--servers", agent.address(), "--", ToolPath("gp-ls"), "--servers",
                                agent.address(), "--leases", "--json"},
                               {"HOME=" + home, std::string("GPUPOOL_TOKEN=") + kAliceToken});
  ASSERT_EQ(right.code, 0) << right.err;
  EXPECT_NE(right.out.find("\"user\":\"alice\",\"user_verified\":true"), std::string::npos) << right.out;

  // The token file in the user's home: used only if nobody else can read it.
  mkdir(home.c_str(), 0700);
  mkdir((home + "/.config").c_str(), 0700);
  mkdir((home + "/.config/gpupool").c_str(), 0700);
  std::string file = home + "/.config/gpupool/token";
  { std::ofstream(file) << kAliceToken << "\n"; }
  chmod(file.c_str(), 0644);
  RunResult loose = RunCommand({ToolPath("gp-ls"), "--servers", agent.address()}, {"HOME=" + home, "GPUPOOL_TOKEN="});
  EXPECT_EQ(loose.code, 1);
  EXPECT_NE(loose.err.find("readable by others"), std::string::npos) << loose.err;
  chmod(file.c_str(), 0600);
  RunResult tight = RunCommand({ToolPath("gp-ls"), "--servers", agent.address()}, {"HOME=" + home, "GPUPOOL_TOKEN="});
  EXPECT_EQ(tight.code, 0) << tight.out << tight.err;
  // This process too, with the token: everything went back.
  setenv("GPUPOOL_TOKEN", kAliceToken, 1);
  ExpectAllFree(Connect({agent.address()}).State());
  unsetenv("GPUPOOL_TOKEN");
}

TEST(Auth, WithoutRequirementAnUnverifiedClaimIsAnonymousAndToldSo) {
  Agent agent(AgentOptions{.name = "open", .emulated = 1, .emulated_memory = "4GiB"});
  std::string note;
  ASSERT_TRUE(ReserveClaiming(agent.address(), "mallory", "claimed-lease", "", &note).ok());
  EXPECT_NE(note.find("agent open could not verify that this client is mallory: the lease is held as user anonymous"),
            std::string::npos)
      << note;
  PoolState state = Connect({agent.address()}).State();
  const LeaseInfo* lease = Only(state);
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->user, "anonymous");
  EXPECT_EQ(lease->user_claimed, "mallory");
  EXPECT_FALSE(lease->user_verified);
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--servers", agent.address(), "--leases"});
  EXPECT_NE(ls.out.find("anonymous (claims mallory)"), std::string::npos) << ls.out;
  RunResult json = RunCommand({ToolPath("gp-ls"), "--servers", agent.address(), "--leases", "--json"});
  EXPECT_NE(json.out.find("\"user\":\"anonymous\",\"user_verified\":false,\"user_claimed\":\"mallory\""),
            std::string::npos)
      << json.out;
  EXPECT_NE(agent.process().Stderr().find("authentication not required"), std::string::npos)
      << agent.process().Stderr();
}

// The agent's token file: alice's token.
std::string AliceTokens(const TempDir& dir) {
  std::string tokens = dir.Write("tokens.toml", std::string("[tokens]\nalice = \"") + kAliceToken + "\"\n");
  chmod(tokens.c_str(), 0600);
  return tokens;
}

// Without --require-auth, policy rules naming alice apply to a client only once the agent verified it is alice (her
// token): a TCP client merely claiming to be alice is user "anonymous" for the policy, without alice's rights.
TEST(Auth, PoliciesForAUserGiveTheirRightsOnlyToClientsVerifiedAsThatUser) {
  TempDir dir;
  std::string tokens = AliceTokens(dir);
  // GPUs of class a100 are alice's alone.
  std::string only_alice = dir.Write("only_alice.toml", R"(
[[personality]]
name = "always"
[personality.classes]
a100 = ["alice"]
)");
  Agent agent(AgentOptions{.name = "rights", .emulated = 1, .emulated_memory = "4GiB", .device_class = "a100",
                           .extra_args = {"--config", only_alice, "--tokens", tokens}});
  Status claimed = ReserveClaiming(agent.address(), "alice", "claim-1");
  EXPECT_EQ(claimed.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(claimed.message().find("GPUs of class a100 are for alice; anonymous is not among them"),
            std::string::npos)
      << claimed.message();
  EXPECT_TRUE(ReserveClaiming(agent.address(), "whoever", "proved-1", kAliceToken).ok());
  PoolState state = Connect({agent.address()}).State();
  const LeaseInfo* lease = Only(state);
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->user, "alice");
  EXPECT_TRUE(lease->user_verified);
}

// Holdings: one slice per user at once; alice (verified) holds one. A claim to be alice counts as anonymous's,
// neither refused for alice's lease nor adding to it, and anonymous's own limit applies to it.
TEST(Auth, PoliciesCountAClaimInAnonymousHoldingsNotInTheClaimedUsers) {
  TempDir dir;
  std::string tokens = AliceTokens(dir);
  std::string one_each = dir.Write("one_each.toml", R"(
[[personality]]
name = "always"
max_gpus_per_user = 1
)");
  Agent agent(AgentOptions{.name = "holdings", .emulated = 1, .emulated_memory = "4GiB",
                           .extra_args = {"--config", one_each, "--tokens", tokens}});
  ASSERT_TRUE(ReserveClaiming(agent.address(), "alice", "alice-1", kAliceToken).ok());
  Status first = ReserveClaiming(agent.address(), "alice", "claim-1");
  EXPECT_TRUE(first.ok()) << first.ToString();
  Status second = ReserveClaiming(agent.address(), "alice", "claim-2");
  EXPECT_EQ(second.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(second.message().find("allows anonymous at most 1 GPU slice(s) at once on this agent; 1 held"),
            std::string::npos)
      << second.message();
  Status alice_again = ReserveClaiming(agent.address(), "alice", "alice-2", kAliceToken);
  EXPECT_NE(alice_again.message().find("allows alice at most 1 GPU slice(s) at once on this agent; 1 held"),
            std::string::npos)
      << alice_again.ToString();
}

// A CA, an agent certificate for localhost and client certificates, made with openssl in `dir`.
void MakeCertificates(const TempDir& dir) {
  std::string script = R"(set -e
cd ")" + dir.path() + R"("
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=gpupool test CA"
openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -days 2 -subj "/CN=another CA"
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\n" > san.ext
openssl req -newkey rsa:2048 -nodes -keyout agent.key -out agent.csr -subj "/CN=localhost"
openssl x509 -req -in agent.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out agent.crt -days 2 -extfile san.ext
printf "subjectAltName=DNS:localhost,DNS:127.0.0.1\n" > dns-only.ext
openssl req -newkey rsa:2048 -nodes -keyout dns-only.key -out dns-only.csr -subj "/CN=127.0.0.1"
openssl x509 -req -in dns-only.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out dns-only.crt -days 2 \
  -extfile dns-only.ext
openssl req -newkey rsa:2048 -nodes -keyout alice.key -out alice.csr -subj "/CN=alice"
openssl x509 -req -in alice.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out alice.crt -days 2
openssl req -newkey rsa:2048 -nodes -keyout eve.key -out eve.csr -subj "/CN=eve"
openssl x509 -req -in eve.csr -CA other-ca.crt -CAkey other-ca.key -CAcreateserial -out eve.crt -days 2
)";
  RunResult made = RunCommand({"/bin/sh", "-c", script});
  ASSERT_EQ(made.code, 0) << made.err;
}

TEST(Auth, TlsWithClientCertificatesCarriesPoolAndSessions) {
  TempDir dir;
  MakeCertificates(dir);
  if (HasFatalFailure()) return;
  const std::string d = dir.path() + "/";
  Agent agent(AgentOptions{.name = "tls", .emulated = 1, .emulated_memory = "4GiB",
                           .extra_args = {"--tls-cert", d + "agent.crt", "--tls-key", d + "agent.key", "--tls-ca",
                                          d + "ca.crt"}});
  const std::string port = agent.address().substr(agent.address().rfind(':') + 1);
  const std::string server = "tls:localhost:" + port;
  std::vector<std::string> alice = {"GPUPOOL_TLS_CA=" + d + "ca.crt", "GPUPOOL_TLS_CERT=" + d + "alice.crt",
                                    "GPUPOOL_TLS_KEY=" + d + "alice.key"};
  // A real CUDA program's session runs through the TLS connection; the lease is alice's, as her certificate says.
  RunResult run = RunCommand({ToolPath("gp-run"), "--servers", server, "--", "/bin/sh", "-c",
                              ToolPath("gp-ls") + " --servers " + server + " --leases --json && " +
                                  std::string(GPUPOOL_EXAMPLES_DIR) + "/vector_add 100000"},
                             alice, seconds(120));
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("\"user\":\"alice\",\"user_verified\":true"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("PASSED"), std::string::npos) << run.out;
  // No certificate, a certificate of another CA, an untrusted agent, or plain TCP: refused, each saying why.
  RunResult none = RunCommand({ToolPath("gp-ls"), "--servers", server}, {"GPUPOOL_TLS_CA=" + d + "ca.crt"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.out.find("client certificate"), std::string::npos) << none.out;
  RunResult eve = RunCommand({ToolPath("gp-ls"), "--servers", server},
                             {"GPUPOOL_TLS_CA=" + d + "ca.crt", "GPUPOOL_TLS_CERT=" + d + "eve.crt",
                              "GPUPOOL_TLS_KEY=" + d + "eve.key"});
  EXPECT_EQ(eve.code, 1) << eve.out;
  RunResult untrusted = RunCommand({ToolPath("gp-ls"), "--servers", server},
                                   {"GPUPOOL_TLS_CA=" + d + "other-ca.crt", "GPUPOOL_TLS_CERT=" + d + "alice.crt",
                                    "GPUPOOL_TLS_KEY=" + d + "alice.key"});
  EXPECT_EQ(untrusted.code, 1);
  EXPECT_NE(untrusted.out.find("not trusted"), std::string::npos) << untrusted.out;
  RunResult plain = RunCommand({ToolPath("gp-ls"), "--servers", "localhost:" + port});
  EXPECT_EQ(plain.code, 1);
  EXPECT_NE(plain.out.find("name it tls:localhost:" + port), std::string::npos) << plain.out;
}

// Issue 41 item 7: an agent reached by IP address is checked against its certificate's IP SANs ("hostname mismatch"
// before), and only against those: a DNS name or a common name that reads like the address is no IP SAN.
TEST(Auth, TlsToAnAgentNamedByItsIpAddressChecksItsIpSans) {
  TempDir dir;
  MakeCertificates(dir);
  if (HasFatalFailure()) return;
  const std::string d = dir.path() + "/";
  const std::vector<std::string> alice = {"GPUPOOL_TLS_CA=" + d + "ca.crt", "GPUPOOL_TLS_CERT=" + d + "alice.crt",
                                          "GPUPOOL_TLS_KEY=" + d + "alice.key"};
  auto port_of = [](Agent& agent) { return agent.address().substr(agent.address().rfind(':') + 1); };
  Agent agent(AgentOptions{.name = "by-ip", .emulated = 1, .emulated_memory = "1GiB",
                           .extra_args = {"--tls-cert", d + "agent.crt", "--tls-key", d + "agent.key", "--tls-ca",
                                          d + "ca.crt"}});
  const std::string by_ip = "tls:127.0.0.1:" + port_of(agent);
  RunResult ls = RunCommand({ToolPath("gp-ls"), "--servers", by_ip}, alice);
  EXPECT_EQ(ls.code, 0) << ls.out << ls.err;
  EXPECT_NE(ls.out.find("by-ip"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("mismatch"), std::string::npos) << ls.out;
  RunResult run = RunCommand({ToolPath("gp-run"), "--servers", by_ip, "--", "/bin/true"}, alice);
  EXPECT_EQ(run.code, 0) << run.err;

  Agent dns_only(AgentOptions{.name = "dns-only", .emulated = 1, .emulated_memory = "1GiB",
                              .extra_args = {"--tls-cert", d + "dns-only.crt", "--tls-key", d + "dns-only.key",
                                             "--tls-ca", d + "ca.crt"}});
  RunResult refused = RunCommand({ToolPath("gp-ls"), "--servers", "tls:127.0.0.1:" + port_of(dns_only)}, alice);
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_NE(refused.out.find("TLS failed: the agent's certificate is not trusted (IP address mismatch)"),
            std::string::npos) << refused.out;
  RunResult by_name = RunCommand({ToolPath("gp-ls"), "--servers", "tls:localhost:" + port_of(dns_only)}, alice);
  EXPECT_EQ(by_name.code, 0) << by_name.out << by_name.err;
}

TEST(Auth, AnAgentRefusesATokenFileOthersCanRead) {
  TempDir dir;
  std::string tokens = dir.Write("tokens.toml", std::string("[tokens]\nalice = \"") + kAliceToken + "\"\n");
  chmod(tokens.c_str(), 0644);
  RunResult r = RunCommand({ToolPath("gp-agent"), "--no-nvml", "--emu", "1", "--listen", "127.0.0.1:0", "--tokens",
                            tokens});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("readable by others"), std::string::npos) << r.err;
  chmod(tokens.c_str(), 0600);
  dir.Write("short.toml", "[tokens]\nbob = \"short\"\n");
  chmod((dir.path() + "/short.toml").c_str(), 0600);
  RunResult short_token = RunCommand({ToolPath("gp-agent"), "--no-nvml", "--emu", "1", "--listen", "127.0.0.1:0",
                                      "--tokens", dir.path() + "/short.toml"});
  EXPECT_EQ(short_token.code, 2);
  EXPECT_NE(short_token.err.find("shorter than 16"), std::string::npos) << short_token.err;
}

// Several Unix users created here, one of them in a Unix group that a policy names: the kernel says who connects,
// the policy's "@group" says who may use the class.
TEST(Auth, PoliciesSeeUnixUsersAndGroupsAsTheKernelReportsThem) {
  if (geteuid() != 0) GTEST_SKIP() << "creating Unix users and groups needs root";
  RunCommand({"/usr/sbin/groupadd", "-f", "gptest-gpu"});
  RunCommand({"/usr/sbin/useradd", "-M", "-r", "-s", "/usr/sbin/nologin", "-G", "gptest-gpu", "gptest-member"});
  RunCommand({"/usr/sbin/useradd", "-M", "-r", "-s", "/usr/sbin/nologin", "gptest-outsider"});
  RunCommand({"/usr/sbin/usermod", "-a", "-G", "gptest-gpu", "gptest-member"});  // If it existed already.
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  std::string config = dir.Write("agent.toml", R"(
[[personality]]
name = "always"
max_fraction = 0.5
[personality.classes]
a100 = ["@gptest-gpu"]
)");
  chmod(config.c_str(), 0644);
  Agent agent(AgentOptions{.name = "groups", .emulated = 1, .emulated_memory = "4GiB", .device_class = "a100",
                           .listen = "unix:" + dir.path() + "/agent.sock",
                           .extra_args = {"--config", config, "--require-auth"}});
  auto as = [&](const std::string& user, const std::string& fraction) {
    return RunCommand({"/usr/sbin/runuser", "-u", user, "--", ToolPath("gp-run"), "--servers", agent.address(), "-p",
                       fraction, "--", ToolPath("gp-ls"), "--servers", agent.address(), "--leases", "--json"});
  };
  RunResult member = as("gptest-member", "0.5");
  EXPECT_EQ(member.code, 0) << member.err;
  EXPECT_NE(member.out.find("\"user\":\"gptest-member\",\"user_verified\":true"), std::string::npos) << member.out;
  RunResult too_big = as("gptest-member", "1");
  EXPECT_EQ(too_big.code, 125);
  EXPECT_NE(too_big.err.find("personality always allows slices of at most 0.5 of a GPU, not 1"), std::string::npos)
      << too_big.err;
  EXPECT_NE(too_big.err.find("no personality of the week allows it"), std::string::npos) << too_big.err;
  RunResult outsider = as("gptest-outsider", "0.5");
  EXPECT_NE(outsider.code, 0);
  EXPECT_NE(outsider.err.find("GPUs of class a100 are for @gptest-gpu; gptest-outsider is not among them"),
            std::string::npos)
      << outsider.err;
}

}  // namespace
}  // namespace gpupool::testing
