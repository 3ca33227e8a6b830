// The session protocol and the session server's checks, with sessions hosted in this process
// (support/session_host.h): the interposer's client code (internal::RemoteSession, which passes handles and
// addresses unchecked) and raw frames send stale and foreign handles, pointers outside their window, absurd sizes,
// hostile virtual memory calls, batches, stream waits and texture objects, bad launch configurations and corrupt
// frames. Each attack must get its specific CUDA error, and afterwards a second tenant (a session of its own on an
// emulated device of its own, as each session worker has; opened before the attack) must still compute correctly,
// and the attacker's own session must still be served and work where the error was not fatal for it. A crash of
// the server would end this process, and the test with it. What needs the agent's processes (doors, tickets,
// revocation, floods through the agent) is session_guard_test.cc's.
#include <cuda.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/serialize.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "client/session_channel.h"
#include "client/session_client.h"
#include "emu/texture.h"
#include "remote/session_checks.h"
#include "schema/session_frames.h"
#include "schema/session_wire.h"
#include "session.capnp.h"
#include "support/session_host.h"
#include "backend/session_image_stream.h"

namespace gpupool::testing {
namespace {

// One tenant: a session hosted here, with the test kernels loaded.
struct Tenant : GuardKernels {
  std::unique_ptr<SessionHost> host;
  std::unique_ptr<RemoteSession> session;

  RemoteSession& s() { return *session; }
};

std::unique_ptr<Tenant> OpenTenant() {
  auto t = std::make_unique<Tenant>();
  auto host = SessionHost::Start();
  EXPECT_TRUE(host.ok()) << host.status().ToString();
  if (!host.ok()) return nullptr;
  t->host = std::move(host).value();
  auto session = t->host->Connect();
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  if (!session.ok()) return nullptr;
  t->session = std::move(session).value();
  LoadGuardKernels(t->s(), t.get());
  return t;
}

// A hosted session's connection, for a test that speaks on it itself.
std::unique_ptr<SessionHost> StartRawHost() {
  auto host = SessionHost::Start();
  EXPECT_TRUE(host.ok()) << host.status().ToString();
  return host.ok() ? std::move(host).value() : nullptr;
}

class SessionProtocol : public ::testing::Test {
 protected:
  void SetUp() override {
    victim_ = OpenTenant();
    attacker_ = OpenTenant();
    ASSERT_TRUE(victim_ && attacker_);
    ASSERT_TRUE(Computes(victim_->s(), victim_->add_one));
    ASSERT_TRUE(Computes(attacker_->s(), attacker_->add_one));
  }

  void TearDown() override {
    attacker_.reset();
    victim_.reset();
  }

  // After an attack: the other tenant is still served and computes correctly.
  void ExpectOthersUnharmed() {
    EXPECT_TRUE(victim_->host->Serving()) << "the other tenant's session";
    EXPECT_TRUE(Computes(victim_->s(), victim_->add_one)) << "the other tenant";
  }

  // ... and the attacker's own session still does good work.
  void ExpectAllUnharmed() {
    ExpectOthersUnharmed();
    EXPECT_TRUE(attacker_->host->Serving()) << "the attacker's own session";
    EXPECT_TRUE(Computes(attacker_->s(), attacker_->add_one)) << "the attacker's own session";
  }

  RemoteSession& a() { return attacker_->s(); }

  std::unique_ptr<Tenant> victim_, attacker_;
};

// A connection of our own to a hosted session, speaking frames by hand: what no client of ours would
// send, or not in that order, or not at that pace.
class RawDirect {
 public:
  // Takes `host`'s connection: its session serves frames from the start (no door, no ticket).
  explicit RawDirect(SessionHost& host) : fd_(host.TakeClientFd()) {}
  ~RawDirect() {
    if (fd_ >= 0) close(fd_);
  }

  int fd() const { return fd_; }

  bool SendBytes(const void* bytes, size_t n) {
    return send(fd_, bytes, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  // Call `ordinal` (its reply numbered `seq`; 0: posted) as bytes of a frame, appended to `out`.
  static void Frame(uint32_t ordinal, uint32_t seq, capnp::MessageBuilder& message, std::vector<uint8_t>* out) {
    session::OutgoingFrame(ordinal, seq, message).AppendTo(out);
  }
  // The message of the reply to call `seq` (frames before it skipped); false if the connection ended first.
  bool ReplyTo(uint32_t seq, kj::Array<capnp::word>* words) {
    for (;;) {
      session::FrameHeader h;
      if (recv(fd_, &h, sizeof(h), MSG_WAITALL) != static_cast<ssize_t>(sizeof(h))) return false;
      *words = kj::heapArray<capnp::word>(h.words);
      const ssize_t want = static_cast<ssize_t>(h.words * sizeof(capnp::word));
      if (want > 0 && recv(fd_, words->begin(), want, MSG_WAITALL) != want) return false;
      if ((h.kind == session::kReplyFrame || h.kind == session::kQuietReplyFrame) && h.seq == seq) return true;
    }
  }

  // memAlloc's address, 0 if it failed.
  uint64_t Alloc(uint64_t bytes, uint32_t seq) {
    capnp::MallocMessageBuilder m;
    m.initRoot<wire::Session::MemAllocParams>().setBytes(bytes);
    std::vector<uint8_t> frame;
    Frame(session::calls::MemAlloc::kOrdinal, seq, m, &frame);
    kj::Array<capnp::word> words;
    if (!SendBytes(frame.data(), frame.size()) || !ReplyTo(seq, &words)) return 0;
    return capnp::FlatArrayMessageReader(words).getRoot<wire::Session::MemAllocResults>().getAddress();
  }
  static void Memset(uint64_t dst, uint64_t bytes, uint8_t value, std::vector<uint8_t>* out) {
    capnp::MallocMessageBuilder m;
    auto p = m.initRoot<wire::Session::MemsetParams>();
    p.setDst(dst);
    p.setValue(value);
    p.setElementSize(1);
    p.setCount(bytes);
    Frame(session::calls::Memset::kOrdinal, 0, m, out);
  }
  static void CopyBack(uint64_t src, uint64_t bytes, uint32_t seq, std::vector<uint8_t>* out) {
    capnp::MallocMessageBuilder m;
    auto p = m.initRoot<wire::Session::CopyFromDeviceParams>();
    p.setSrc(src);
    p.setBytes(bytes);
    Frame(session::calls::CopyFromDevice::kOrdinal, seq, m, out);
  }
  // The bytes of the reply to copy back `seq`, or a failure.
  ::testing::AssertionResult CopiedBack(uint32_t seq, std::vector<uint8_t>* bytes) {
    kj::Array<capnp::word> reply;
    if (!ReplyTo(seq, &reply)) return ::testing::AssertionFailure() << "no reply to call " << seq;
    capnp::ReaderOptions options;
    options.traversalLimitInWords = reply.size() * 2;
    capnp::FlatArrayMessageReader reader(reply, options);
    auto results = reader.getRoot<wire::Session::CopyFromDeviceResults>();
    if (results.getStatus().getCode() != kOk) {
      return ::testing::AssertionFailure() << results.getStatus().getMessage().cStr();
    }
    bytes->assign(results.getData().begin(), results.getData().end());
    return ::testing::AssertionSuccess();
  }

 private:
  int fd_ = -1;
};

// A module image from the wire is all the worker has of it: an empty one (which a loader would read as one of
// unknown length, past the message's end) and a fatbin wrapper (whose pointer into the client's process the worker
// would follow: here a wild one) are refused as invalid images, and the session goes on. Found by the wire fuzzer's
// door frames under AddressSanitizer.
TEST_F(SessionProtocol, EmptyImagesAndFatbinWrappersAreRefusedNotFollowed) {
  uint64_t module = 0;
  uint8_t none = 0;
  EXPECT_EQ(a().ModuleLoad(&none, 0, &module), CUDA_ERROR_INVALID_IMAGE);
  struct {
    uint32_t magic = 0x466243B1, version = 1;
    uint64_t container = 0x7e57000000001000;  // Nothing there: following it faults.
  } wrapper;
  EXPECT_EQ(a().ModuleLoad(&wrapper, sizeof(wrapper), &module), CUDA_ERROR_INVALID_IMAGE);
  ExpectAllUnharmed();
}

TEST_F(SessionProtocol, LaunchAfterModuleUnloadAnswersInvalidHandle) {
  uint64_t module = 0;
  std::vector<uint8_t> image = KernelImage();
  ASSERT_EQ(a().ModuleLoad(image.data(), image.size(), &module), kOk);
  RemoteFunctionInfo f;
  ASSERT_EQ(a().GetFunction(module, "add_one", &f), kOk);
  ASSERT_TRUE(Computes(a(), f));
  a().ModuleUnload(module);
  ASSERT_EQ(a().Synchronize(), kOk);

  // The function died with its module: launching it must not reach the freed code.
  uint64_t buffer = 0;
  ASSERT_EQ(a().MemAlloc(4096, &buffer), kOk);
  std::vector<uint8_t> params = AddOneParams(f, buffer, 1024);
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};
  a().Launch(f.handle, grid, block, 0, 0, params.data(), params.size());
  EXPECT_EQ(a().Synchronize(), kInvalidHandle) << a().last_error();
  // The module handle is stale for every module call.
  RemoteFunctionInfo again;
  EXPECT_EQ(a().GetFunction(module, "add_one", &again), kInvalidHandle);
  uint64_t address = 0, bytes = 0;
  EXPECT_EQ(a().GetGlobal(module, "guard_counter", &address, &bytes), kInvalidHandle);
  a().ModuleUnload(module);
  EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  a().MemFree(buffer);
  ASSERT_EQ(a().Synchronize(), kOk);
  // The attacker's other module (loaded before) still works, and so does everyone else.
  ExpectAllUnharmed();
}

TEST_F(SessionProtocol, DestroyedZeroAndHugeHandlesAnswerInvalidHandle) {
  uint64_t stream = 0, event = 0, buffer = 0;
  ASSERT_EQ(a().StreamCreate(&stream), kOk);
  ASSERT_EQ(a().EventCreate(&event), kOk);
  ASSERT_EQ(a().MemAlloc(4096, &buffer), kOk);
  a().StreamDestroy(stream);
  a().EventDestroy(event);
  ASSERT_EQ(a().Synchronize(), kOk);
  std::vector<uint8_t> data(4096, 1);
  std::vector<uint8_t> params = AddOneParams(attacker_->add_one, buffer, 1024);
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};
  uint64_t live_event = 0;
  ASSERT_EQ(a().EventCreate(&live_event), kOk);

  for (uint64_t bad_stream : {stream, uint64_t{1} << 63, kMax, stream + 1000}) {
    SCOPED_TRACE(bad_stream);
    a().CopyToDevice(buffer, data.data(), data.size(), bad_stream);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    EXPECT_EQ(a().CopyFromDevice(data.data(), buffer, data.size(), bad_stream), kInvalidHandle);
    a().CopyOnDevice(buffer, buffer + 2048, 1024, bad_stream);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    a().Memset(buffer, 0, 1, 4096, bad_stream);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    a().Launch(attacker_->add_one.handle, grid, block, 0, bad_stream, params.data(), params.size());
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    EXPECT_EQ(a().StreamSynchronize(bad_stream), kInvalidHandle);
    EXPECT_EQ(a().StreamQuery(bad_stream), kInvalidHandle);
    a().StreamWaitEvent(bad_stream, live_event);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    a().EventRecord(live_event, bad_stream);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    a().StreamDestroy(bad_stream);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  }
  // 0 is the default stream, never an event, module or function.
  for (uint64_t bad : {event, uint64_t{0}, uint64_t{1} << 63, kMax}) {
    SCOPED_TRACE(bad);
    a().EventRecord(bad, 0);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    EXPECT_EQ(a().EventQuery(bad), kInvalidHandle);
    EXPECT_EQ(a().EventSynchronize(bad), kInvalidHandle);
    float ms = 0;
    EXPECT_EQ(a().EventElapsed(bad, live_event, &ms), kInvalidHandle);
    EXPECT_EQ(a().EventElapsed(live_event, bad, &ms), kInvalidHandle);
    a().StreamWaitEvent(0, bad);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    a().EventDestroy(bad);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  }
  for (uint64_t bad : {uint64_t{0}, uint64_t{1} << 63, kMax}) {
    SCOPED_TRACE(bad);
    RemoteFunctionInfo f;
    EXPECT_EQ(a().GetFunction(bad, "add_one", &f), kInvalidHandle);
    uint64_t address = 0, bytes = 0;
    EXPECT_EQ(a().GetGlobal(bad, "guard_counter", &address, &bytes), kInvalidHandle);
    a().ModuleUnload(bad);
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
    a().Launch(bad, grid, block, 0, 0, params.data(), params.size());
    EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  }
  a().MemFree(buffer);
  ASSERT_EQ(a().Synchronize(), kOk);
  ExpectAllUnharmed();
}

TEST_F(SessionProtocol, AnotherSessionsHandlesNameNothingHere) {
  // Handles are per session: give the victim handles the attacker's session never issued.
  std::vector<uint64_t> streams, events, modules;
  std::vector<uint8_t> image = KernelImage();
  for (int i = 0; i < 8; ++i) {
    uint64_t h = 0;
    ASSERT_EQ(victim_->s().StreamCreate(&h), kOk);
    streams.push_back(h);
    ASSERT_EQ(victim_->s().EventCreate(&h), kOk);
    events.push_back(h);
    ASSERT_EQ(victim_->s().ModuleLoad(image.data(), image.size(), &h), kOk);
    modules.push_back(h);
  }
  RemoteFunctionInfo victim_fn;
  ASSERT_EQ(victim_->s().GetFunction(modules.back(), "add_one", &victim_fn), kOk);
  uint64_t buffer = 0;
  ASSERT_EQ(a().MemAlloc(4096, &buffer), kOk);
  std::vector<uint8_t> params = AddOneParams(attacker_->add_one, buffer, 1024);
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};

  EXPECT_EQ(a().StreamSynchronize(streams.back()), kInvalidHandle);
  a().StreamDestroy(streams.back());
  EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  EXPECT_EQ(a().EventSynchronize(events.back()), kInvalidHandle);
  a().EventDestroy(events.back());
  EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  RemoteFunctionInfo f;
  EXPECT_EQ(a().GetFunction(modules.back(), "add_one", &f), kInvalidHandle);
  a().ModuleUnload(modules.back());
  EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  a().Launch(victim_fn.handle, grid, block, 0, 0, params.data(), params.size());
  EXPECT_EQ(a().Synchronize(), kInvalidHandle);
  a().MemFree(buffer);
  ASSERT_EQ(a().Synchronize(), kOk);

  // The victim's objects are all still there and usable.
  EXPECT_TRUE(Computes(victim_->s(), victim_fn, streams.back()));
  victim_->s().EventRecord(events.back(), streams.back());
  EXPECT_EQ(victim_->s().EventSynchronize(events.back()), kOk) << victim_->s().last_error();
  for (uint64_t m : modules) victim_->s().ModuleUnload(m);
  for (uint64_t s : streams) victim_->s().StreamDestroy(s);
  for (uint64_t e : events) victim_->s().EventDestroy(e);
  EXPECT_EQ(victim_->s().Synchronize(), kOk) << victim_->s().last_error();
  ExpectAllUnharmed();
}

TEST_F(SessionProtocol, PointersOutsideTheSessionAnswerInvalidValue) {
  uint64_t mine = 0, theirs = 0;
  ASSERT_EQ(a().MemAlloc(4096, &mine), kOk);
  ASSERT_EQ(victim_->s().MemAlloc(4096, &theirs), kOk);
  std::vector<uint8_t> secret(4096, 0x5a);
  victim_->s().CopyToDevice(theirs, secret.data(), secret.size(), 0);
  ASSERT_EQ(victim_->s().Synchronize(), kOk);

  const uint64_t base = a().window_base(), end = base + a().window_bytes();
  struct Bad {
    const char* what;
    uint64_t address, bytes;
  };
  const Bad bad[] = {
      {"below the window", base - 4096, 4096},
      {"at the window's end", end, 16},
      {"straddling the window's end", end - 8, 16},
      {"straddling the end of the allocation", mine + 4096 - 8, 16},
      {"the other tenant's allocation", theirs, 4096},
      {"address + bytes overflowing", kMax - 15, 4096},
      {"address + bytes overflowing from inside", mine + 16, kMax - 15},
      {"address 0", 0, 16},
  };
  std::vector<uint8_t> buffer(4096, 0x11);
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    size_t n = static_cast<size_t>(std::min<uint64_t>(b.bytes, buffer.size()));
    // Through the client a copy carries at most what the message holds; memset and device copies take any size.
    EXPECT_EQ(a().CopyFromDevice(buffer.data(), b.address, n, 0), kInvalidValue) << a().last_error();
    EXPECT_EQ(buffer, std::vector<uint8_t>(4096, 0x11)) << "bytes came back";
    a().CopyToDevice(b.address, buffer.data(), n, 0);
    EXPECT_EQ(a().Synchronize(), kInvalidValue);
    a().Memset(b.address, 0, 1, b.bytes, 0);
    EXPECT_EQ(a().Synchronize(), kInvalidValue);
    a().CopyOnDevice(b.address, mine, std::min<uint64_t>(b.bytes, 4096), 0);
    EXPECT_EQ(a().Synchronize(), kInvalidValue);
    a().CopyOnDevice(mine, b.address, std::min<uint64_t>(b.bytes, 4096), 0);
    EXPECT_EQ(a().Synchronize(), kInvalidValue);
    a().CopyOnDevice(mine, mine, b.bytes, 0);
    if (b.bytes > 4096) {
      EXPECT_EQ(a().Synchronize(), kInvalidValue);
    }
    EXPECT_EQ(a().Synchronize(), kOk);
  }
  // Frees of anything but an allocation's start.
  for (uint64_t address : {mine + 256, theirs, base - 4096, end, kMax}) {
    SCOPED_TRACE(address);
    EXPECT_EQ(a().MemFree(address), kInvalidValue);  // Waited for: its own error, not the next synchronisation's.
    EXPECT_EQ(a().Synchronize(), kOk);
  }
  // A module variable is not the client's to free (the emulated device would free it under its module).
  uint64_t global = 0, global_bytes = 0;
  ASSERT_EQ(a().GetGlobal(attacker_->module, "guard_counter", &global, &global_bytes), kOk);
  EXPECT_EQ(a().MemFree(global), kInvalidValue);

  // Nothing of the victim's changed; the attacker's own allocation is intact and freeable.
  std::vector<uint8_t> seen(4096, 0);
  ASSERT_EQ(victim_->s().CopyFromDevice(seen.data(), theirs, seen.size(), 0), kOk);
  EXPECT_EQ(seen, secret);
  a().MemFree(mine);
  EXPECT_EQ(a().Synchronize(), kOk);
  victim_->s().MemFree(theirs);
  EXPECT_EQ(victim_->s().Synchronize(), kOk);
  ExpectAllUnharmed();
}

TEST_F(SessionProtocol, AbsurdSizesAnswerInvalidValue) {
  uint64_t address = 0;
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1} << 63, kMax, kMax - 255}) {
    SCOPED_TRACE(bytes);
    EXPECT_EQ(a().MemAlloc(bytes, &address), kInvalidValue) << a().last_error();
  }
  // More than the slice but not absurd: out of memory, as on a GPU.
  EXPECT_EQ(a().MemAlloc(uint64_t{4} << 30, &address), kOutOfMemory);

  uint64_t buffer = 0;
  ASSERT_EQ(a().MemAlloc(4096, &buffer), kOk);
  struct Set {
    uint8_t element_size;
    uint64_t count;
  };
  // count * elementSize wrapping to 0 (or to a small number) must not pass as an in-range memset.
  for (Set m : {Set{4, uint64_t{1} << 62}, Set{2, (uint64_t{1} << 63) + 8}, Set{4, kMax}, Set{3, 16}, Set{0, 16},
                Set{8, 16}, Set{255, 1}}) {
    SCOPED_TRACE(::testing::Message() << int{m.element_size} << " x " << m.count);
    a().Memset(buffer, 0x7f, m.element_size, m.count, 0);
    EXPECT_EQ(a().Synchronize(), kInvalidValue) << a().last_error();
  }
  a().MemFree(buffer);
  EXPECT_EQ(a().Synchronize(), kOk);
  ExpectAllUnharmed();
}

TEST_F(SessionProtocol, CopyFromDeviceOfMoreThanAMessageCarriesAnswersInvalidValue) {
  // RemoteSession cuts copies into chunks, so this request goes out on a connection of its own.
  uint64_t buffer = 0;
  ASSERT_EQ(a().MemAlloc(4096, &buffer), kOk);
  auto host = StartRawHost();
  ASSERT_TRUE(host);
  RawDirect raw(*host);
  const uint64_t own = raw.Alloc(4096, 1);
  ASSERT_NE(own, 0u);
  uint32_t seq = 2;
  for (uint64_t bytes : {(uint64_t{64} << 20) + 1, uint64_t{1} << 40, uint64_t{1} << 63, kMax}) {
    SCOPED_TRACE(bytes);
    std::vector<uint8_t> frame;
    RawDirect::CopyBack(own, bytes, seq, &frame);
    kj::Array<capnp::word> words;
    ASSERT_TRUE(raw.SendBytes(frame.data(), frame.size()) && raw.ReplyTo(seq++, &words));
    auto reply = capnp::FlatArrayMessageReader(words).getRoot<wire::Session::CopyFromDeviceResults>();
    EXPECT_EQ(reply.getStatus().getCode(), kInvalidValue) << reply.getStatus().getMessage().cStr();
    EXPECT_EQ(reply.getData().size(), 0u);
  }
  {
    std::vector<uint8_t> frame, back;
    RawDirect::CopyBack(own, 4096, seq, &frame);
    ASSERT_TRUE(raw.SendBytes(frame.data(), frame.size()));
    EXPECT_TRUE(raw.CopiedBack(seq, &back));
    EXPECT_EQ(back.size(), 4096u);
  }
  a().MemFree(buffer);
  EXPECT_EQ(a().Synchronize(), kOk);
  ExpectAllUnharmed();
}

TEST_F(SessionProtocol, BadLaunchConfigurationsAnswerAnErrorNotACrash) {
  uint64_t buffer = 0;
  ASSERT_EQ(a().MemAlloc(4096, &buffer), kOk);
  const RemoteFunctionInfo& f = attacker_->add_one;
  std::vector<uint8_t> params = AddOneParams(f, buffer, 1024);
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};
  // A parameter buffer shorter than the kernel's parameters: the missing pointer must not become 0 or garbage.
  for (size_t short_by : {size_t{1}, size_t{4}, params.size()}) {
    SCOPED_TRACE(short_by);
    a().Launch(f.handle, grid, block, 0, 0, params.data(), params.size() - short_by);
    EXPECT_EQ(a().Synchronize(), kInvalidValue) << a().last_error();
  }
  struct Shape {
    uint32_t grid[3], block[3];
  };
  for (const Shape& s : {Shape{{0, 1, 1}, {256, 1, 1}}, Shape{{4, 0, 1}, {256, 1, 1}}, Shape{{4, 1, 1}, {0, 1, 1}},
                         Shape{{4, 1, 1}, {256, 1, 0}}, Shape{{4, 1, 1}, {2048, 1, 1}}, Shape{{4, 1, 1}, {64, 64, 1}},
                         Shape{{4, 65536, 1}, {256, 1, 1}}, Shape{{4, 1, 1}, {1, 1, 65}},
                         Shape{{1, 1, 1}, {0xffffffffu, 0xffffffffu, 0xffffffffu}}}) {
    SCOPED_TRACE(::testing::Message() << s.grid[0] << "x" << s.grid[1] << "x" << s.grid[2] << " blocks of "
                                    << s.block[0] << "x" << s.block[1] << "x" << s.block[2]);
    a().Launch(f.handle, s.grid, s.block, 0, 0, params.data(), params.size());
    EXPECT_EQ(a().Synchronize(), kInvalidValue) << a().last_error();
  }
  // Dynamic shared memory beyond the limit, also where static + dynamic wraps around 2^32.
  std::vector<uint8_t> shared_params(attacker_->with_shared.params.at(0).offset + 8, 0);
  std::memcpy(shared_params.data() + attacker_->with_shared.params.at(0).offset, &buffer, 8);
  ASSERT_GT(attacker_->with_shared.shared_bytes, 0);
  const uint32_t one[3] = {1, 1, 1}, threads[3] = {64, 1, 1};
  for (uint32_t dynamic : {uint32_t{1} << 20, 0xffffffffu,
                           0u - static_cast<uint32_t>(attacker_->with_shared.shared_bytes)}) {
    SCOPED_TRACE(dynamic);
    a().Launch(attacker_->with_shared.handle, one, threads, dynamic, 0, shared_params.data(), shared_params.size());
    EXPECT_EQ(a().Synchronize(), kOutOfResources) << a().last_error();
  }
  // The same kernel with sane numbers runs.
  a().Launch(attacker_->with_shared.handle, one, threads, 0, 0, shared_params.data(), shared_params.size());
  int out = 0;
  ASSERT_EQ(a().CopyFromDevice(&out, buffer, sizeof(out), 0), kOk) << a().last_error();
  EXPECT_EQ(out, 1);
  a().MemFree(buffer);
  EXPECT_EQ(a().Synchronize(), kOk);
  ExpectAllUnharmed();
}

// Virtual memory calls with foreign handles, ranges outside reservations, partial unmaps and sizes beyond the slice:
// each refused; memory of another tenant never mapped; the attacker's session still works.
TEST_F(SessionProtocol, HostileVirtualMemoryCallsAreRefused) {
  namespace calls = session::calls;
  constexpr uint64_t kGran = 2ull << 20;
  RemoteSession& s = a();
  uint64_t free_before = 0, total = 0;
  ASSERT_EQ(s.MemGetInfo(&free_before, &total), kOk);
  calls::AddressReserve::Results reserved;
  EXPECT_EQ(s.Invoke<calls::AddressReserve>({0, 0, 0}, &reserved), kInvalidValue);
  EXPECT_EQ(s.Invoke<calls::AddressReserve>({kGran + 1, 0, 0}, &reserved), kInvalidValue);
  EXPECT_EQ(s.Invoke<calls::AddressReserve>({kMax - kGran + 1, 0, 0}, &reserved), kInvalidValue);
  EXPECT_EQ(s.Invoke<calls::AddressReserve>({4 * kGran, 3 * kGran, 0}, &reserved), kInvalidValue);  // Alignment.
  ASSERT_EQ(s.Invoke<calls::AddressReserve>({4 * kGran, 0, 0}, &reserved), kOk) << s.last_error();
  uint64_t va = reserved.address;
  EXPECT_TRUE(s.Owns(va)) << "reservations lie in the session's window";

  calls::MemCreate::Results created;
  EXPECT_EQ(s.Invoke<calls::MemCreate>({kGran / 2}, &created), kInvalidValue);
  EXPECT_EQ(s.Invoke<calls::MemCreate>({uint64_t{64} << 30}, &created), kOutOfMemory) << "beyond the slice";
  ASSERT_EQ(s.Invoke<calls::MemCreate>({2 * kGran}, &created), kOk) << s.last_error();
  session::PhysicalId memory = created.memory;

  // Foreign and stale handles, ranges that are not the session's reservations or not aligned.
  EXPECT_EQ(s.Invoke<calls::MemMap>({va, 2 * kGran, 0, session::PhysicalId{memory.value + 77}}), kInvalidHandle);
  EXPECT_EQ(s.Invoke<calls::MemMap>({va + 4 * kGran, 2 * kGran, 0, memory}), kInvalidValue);  // Past the end.
  EXPECT_EQ(s.Invoke<calls::MemMap>({va + 4096, 2 * kGran, 0, memory}), kInvalidValue);
  EXPECT_EQ(s.Invoke<calls::MemMap>({va, 2 * kGran, kGran, memory}), kInvalidValue);  // Beyond the memory.
  uint64_t victim_buffer = 0;
  ASSERT_EQ(victim_->s().MemAlloc(kGran, &victim_buffer), kOk);
  EXPECT_EQ(s.Invoke<calls::MemMap>({victim_buffer & ~(kGran - 1), 2 * kGran, 0, memory}), kInvalidValue);
  victim_->s().MemFree(victim_buffer);

  ASSERT_EQ(s.Invoke<calls::MemMap>({va, 2 * kGran, 0, memory}), kOk) << s.last_error();
  EXPECT_EQ(s.Invoke<calls::MemMap>({va + kGran * 0, 2 * kGran, 0, memory}), kInvalidValue) << "mapped already";
  // The mapping is the session's memory: a copy in and out works; one past it does not.
  std::vector<uint8_t> bytes(2 * kGran, 0x5a), back(2 * kGran, 0);
  s.CopyToDevice(va, bytes.data(), bytes.size(), 0);
  EXPECT_EQ(s.CopyFromDevice(back.data(), va, back.size(), 0), kOk) << s.last_error();
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(s.CopyFromDevice(back.data(), va + kGran, 2 * kGran, 0), kInvalidValue) << "past the mapping";
  s.TakeAsyncError();

  EXPECT_EQ(s.Invoke<calls::MemUnmap>({va, kGran}), kInvalidValue) << "half a mapping";
  s.Invoke<calls::AddressFree>({va, 4 * kGran});  // Still mapped.
  EXPECT_EQ(AsyncError(s), kInvalidValue);
  EXPECT_EQ(s.Invoke<calls::MemRelease>({memory}), kOk) << "released while mapped: kept until unmapped";
  EXPECT_EQ(s.Invoke<calls::MemMap>({va + 2 * kGran, 2 * kGran, 0, memory}), kInvalidHandle) << "released";
  EXPECT_EQ(s.Invoke<calls::MemUnmap>({va, 2 * kGran}), kOk) << s.last_error();
  s.Invoke<calls::AddressFree>({va, 4 * kGran});
  EXPECT_EQ(AsyncError(s), kOk) << s.last_error();
  uint64_t free_after = 0;
  s.MemGetInfo(&free_after, &total);
  EXPECT_EQ(free_after, free_before) << "the physical memory went back to the slice";
  ExpectAllUnharmed();
}

// A batch (a graph launch) is as hostile as any message: malformed framing, unknown calls, calls that wait, nested
// batches and corrupt entries are refused with a clear error; a good batch runs its calls in order, and a bad entry
// among good ones fails alone, as the same calls sent one by one would.
TEST_F(SessionProtocol, HostileBatchesAreRefused) {
  namespace calls = session::calls;
  RemoteSession& s = a();
  auto entry = [](uint32_t ordinal, std::vector<uint8_t> message) {
    std::vector<uint8_t> out(8);
    const uint32_t header[2] = {ordinal, static_cast<uint32_t>(message.size())};
    std::memcpy(out.data(), header, sizeof(header));
    out.insert(out.end(), message.begin(), message.end());
    return out;
  };
  auto flat = [](auto fill) {
    capnp::MallocMessageBuilder message;
    fill(message);
    kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
    return std::vector<uint8_t>(words.asBytes().begin(), words.asBytes().end());
  };
  auto send = [&](const std::vector<uint8_t>& batch) {
    s.Invoke<calls::Batch>({{batch.data(), batch.size()}});
    return AsyncError(s);
  };
  auto mem_alloc = flat([](capnp::MallocMessageBuilder& m) {
    m.initRoot<wire::Session::MemAllocParams>().setBytes(4096);
  });
  uint64_t buffer = 0;
  ASSERT_EQ(s.MemAlloc(4096, &buffer), kOk);
  auto memset = [&](uint64_t dst, uint32_t value) {
    return flat([&](capnp::MallocMessageBuilder& m) {
      session::Wire<calls::Memset>::WriteArgs({dst, value, 4, 1024, {0}}, m.initRoot<wire::Session::MemsetParams>());
    });
  };

  EXPECT_EQ(send({1, 2, 3}), kInvalidValue) << "truncated header";
  EXPECT_EQ(send(entry(calls::Memset::kOrdinal, std::vector<uint8_t>(7))), kInvalidValue) << "not whole words";
  auto too_long = entry(calls::Memset::kOrdinal, memset(buffer, 1));
  too_long[4] = 0xff;  // Its length now runs past the batch.
  EXPECT_EQ(send(too_long), kInvalidValue);
  EXPECT_EQ(send(entry(999, memset(buffer, 1))), kInvalidValue) << "unknown call";
  EXPECT_EQ(send(entry(calls::MemAlloc::kOrdinal, mem_alloc)), kInvalidValue) << "a call that waits";
  auto inner = entry(calls::Memset::kOrdinal, memset(buffer, 1));
  auto nested = flat([&](capnp::MallocMessageBuilder& m) {
    m.initRoot<wire::Session::BatchParams>().setCalls(kj::arrayPtr(inner.data(), inner.size()));
  });
  EXPECT_EQ(send(entry(calls::Batch::kOrdinal, nested)), kInvalidValue) << "a batch in a batch";
  std::vector<uint8_t> garbage(64);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(0x9d * i + 7);
  EXPECT_EQ(send(entry(calls::Memset::kOrdinal, garbage)), kInvalidValue) << "a corrupt message";

  // A bad entry (memory of another tenant) between good ones: it fails, the good ones run in order.
  uint64_t theirs = 0;
  ASSERT_EQ(victim_->s().MemAlloc(4096, &theirs), kOk);
  std::vector<uint8_t> batch = entry(calls::Memset::kOrdinal, memset(buffer, 7));
  for (const auto& e : {entry(calls::Memset::kOrdinal, memset(theirs, 9)),
                        entry(calls::Memset::kOrdinal, memset(buffer, 8))}) {
    batch.insert(batch.end(), e.begin(), e.end());
  }
  EXPECT_EQ(send(batch), kInvalidValue);
  std::vector<uint32_t> back(1024, 0);
  ASSERT_EQ(s.CopyFromDevice(back.data(), buffer, 4096, 0), kOk) << s.last_error();
  EXPECT_EQ(back[0], 8u) << "the later good entry ran after the earlier one";
  ASSERT_EQ(victim_->s().CopyFromDevice(back.data(), theirs, 4096, 0), kOk);
  EXPECT_NE(back[0], 9u) << "the other tenant's memory was not touched";
  victim_->s().MemFree(theirs);

  // The client's own batching: posted calls gathered, a waiting call sends them first.
  s.BeginBatch();
  s.Memset(buffer, 5, 4, 1024, 0);
  s.Memset(buffer, 6, 4, 512, 0);
  ASSERT_EQ(s.CopyFromDevice(back.data(), buffer, 4096, 0), kOk) << s.last_error();
  s.EndBatch();
  EXPECT_EQ(back[0], 6u);
  EXPECT_EQ(back[1023], 5u);
  s.MemFree(buffer);
  EXPECT_EQ(AsyncError(s), kOk) << s.last_error();
  ExpectAllUnharmed();
}

// The session server marks a reply quiet when nothing the client sent before is left to run or report: the client may
// then answer a synchronisation itself, until it sends anything more.
TEST_F(SessionProtocol, QuietRepliesHoldOnlyUntilTheClientSendsMore) {
  auto host = StartRawHost();
  ASSERT_TRUE(host);
  int errors = 0;
  auto entered = internal::SessionChannel::Adopt(host->TakeClientFd(), [&](int, const std::string&) { ++errors; });
  internal::SessionChannel& channel = *entered;
  capnp::MallocMessageBuilder ask;
  ask.initRoot<wire::Session::MemGetInfoParams>();
  auto ask_and_wait = [&] {
    internal::SessionChannel::Reply reply;
    return channel.Wait(channel.Send(session::calls::MemGetInfo::kOrdinal, ask), &reply);
  };
  EXPECT_FALSE(channel.Quiet()) << "quiet before any reply";
  ASSERT_TRUE(ask_and_wait()) << channel.lost();
  EXPECT_TRUE(channel.Quiet()) << "an idle session's reply was not quiet";
  channel.Post(999, ask);  // Fails on the server: reported before the next reply.
  EXPECT_FALSE(channel.Quiet()) << "quiet with a posted call not yet answered for";
  ASSERT_TRUE(ask_and_wait()) << channel.lost();
  EXPECT_EQ(errors, 1) << "the posted call's failure before the reply";
  EXPECT_TRUE(channel.Quiet()) << "quiet again once the posted call has been served";
  ExpectAllUnharmed();
}

// A client that sends what no client of ours sends: an unknown call is reported as a failed posted
// call (the connection goes on); a frame that claims a message longer than any call ends the connection, and with
// it the session; other tenants notice nothing.
TEST_F(SessionProtocol, CorruptFramesOnTheDirectConnectionHarmNobodyElse) {
  {
    auto host = StartRawHost();
    ASSERT_TRUE(host);
    int errors = 0, last_code = 0;
    auto channel = internal::SessionChannel::Adopt(host->TakeClientFd(), [&](int code, const std::string&) {
      ++errors;
      last_code = code;
    });
    capnp::MallocMessageBuilder ask;
    ask.initRoot<wire::Session::MemGetInfoParams>();
    channel->Post(999, ask);  // No such call.
    internal::SessionChannel::Reply reply;
    ASSERT_TRUE(channel->Wait(channel->Send(session::calls::MemGetInfo::kOrdinal, ask), &reply))
        << channel->lost();
    EXPECT_EQ(errors, 1);
    EXPECT_EQ(last_code, kInvalidValue);
    EXPECT_EQ(reply.message->getRoot<wire::Session::MemGetInfoResults>().getStatus().getCode(), kOk);
  }
  auto host = StartRawHost();
  ASSERT_TRUE(host);
  RawDirect raw(*host);
  session::FrameHeader lie{session::calls::CopyToDevice::kOrdinal, 0, uint64_t{1} << 40};  // 8 TiB.
  ASSERT_TRUE(raw.SendBytes(&lie, sizeof(lie)));
  timeval limit{10, 0};
  setsockopt(raw.fd(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char byte = 0;
  EXPECT_EQ(recv(raw.fd(), &byte, 1, 0), 0) << "the session did not hang up after a corrupt frame";
  ExpectAllUnharmed();
}

// Stream waits on the wrong width, misaligned addresses, unknown conditions, another tenant's memory, 32-bit waits
// on 64-bit values: each refused before the device sees it; a good one orders the stream as it should.
TEST_F(SessionProtocol, HostileStreamWaitsAreRefused) {
  namespace calls = session::calls;
  RemoteSession& s = a();
  uint64_t buffer = 0, victim_buffer = 0;
  ASSERT_EQ(s.MemAlloc(4096, &buffer), kOk);
  ASSERT_EQ(victim_->s().MemAlloc(4096, &victim_buffer), kOk);
  const uint32_t one = 1;
  s.CopyToDevice(buffer, &one, sizeof(one), 0);
  ASSERT_EQ(AsyncError(s), kOk) << s.last_error();
  const session::StreamId def{0};
  s.Invoke<calls::StreamWaitValue>({def, buffer, 1, 3, 0});  // Width.
  EXPECT_EQ(AsyncError(s), kInvalidValue);
  s.Invoke<calls::StreamWaitValue>({def, buffer + 2, 1, 4, 0});  // Misaligned.
  EXPECT_EQ(AsyncError(s), kInvalidValue);
  s.Invoke<calls::StreamWaitValue>({def, buffer, 1, 4, 0x7});  // No such condition.
  EXPECT_EQ(AsyncError(s), kInvalidValue);
  s.Invoke<calls::StreamWaitValue>({def, buffer, uint64_t{1} << 40, 4, 0});  // 64-bit value, 32-bit wait.
  EXPECT_EQ(AsyncError(s), kInvalidValue);
  s.Invoke<calls::StreamWaitValue>({def, buffer + 4096, 1, 8, 0});  // Past the allocation.
  EXPECT_EQ(AsyncError(s), kInvalidValue);
  s.Invoke<calls::StreamWaitValue>({def, victim_buffer, 0, 4, 0});  // Another tenant's memory.
  EXPECT_EQ(AsyncError(s), kInvalidValue);
  s.Invoke<calls::StreamWaitValue>({session::StreamId{9999}, buffer, 1, 4, 0});  // No such stream.
  EXPECT_EQ(AsyncError(s), kInvalidHandle);
  s.Invoke<calls::StreamWaitValue>({def, buffer, 1, 4, 1});  // EQ 1: holds.
  EXPECT_EQ(AsyncError(s), kOk) << s.last_error();
  victim_->s().MemFree(victim_buffer);
  s.MemFree(buffer);
  ExpectAllUnharmed();
}

// Texture and surface objects: only over the session's own memory, with sane descriptions; a handle of another
// session (or a destroyed one) names nothing to destroy, and the victim's object survives the attempt.
TEST_F(SessionProtocol, HostileTextureObjectsAreRefused) {
  namespace calls = session::calls;
  RemoteSession& s = a();
  uint64_t buffer = 0, victim_buffer = 0;
  ASSERT_EQ(s.MemAlloc(4096, &buffer), kOk);
  ASSERT_EQ(victim_->s().MemAlloc(4096, &victim_buffer), kOk);
  auto texture = FloatTexture16x16;
  calls::TexObjectCreate::Results victim_texture;
  ASSERT_EQ(victim_->s().Invoke<calls::TexObjectCreate>(texture(victim_buffer), &victim_texture), kOk)
      << victim_->s().last_error();
  calls::TexObjectCreate::Results r;
  EXPECT_EQ(s.Invoke<calls::TexObjectCreate>(texture(victim_buffer), &r), kInvalidValue);  // Another tenant's.
  calls::TexObjectCreate::Args bad = texture(buffer);
  bad.height = 17;  // One row past the allocation.
  EXPECT_EQ(s.Invoke<calls::TexObjectCreate>(bad, &r), kInvalidValue);
  bad = texture(buffer);
  bad.pitch = 32;  // Rows overlap.
  EXPECT_EQ(s.Invoke<calls::TexObjectCreate>(bad, &r), kInvalidValue);
  bad = texture(buffer);
  bad.channels = 3;
  EXPECT_EQ(s.Invoke<calls::TexObjectCreate>(bad, &r), kInvalidValue);
  bad = texture(buffer);
  bad.format = 0xb0;  // Block-compressed.
  EXPECT_EQ(s.Invoke<calls::TexObjectCreate>(bad, &r), kInvalidValue);
  bad = texture(buffer);
  bad.width = 0xffffffffu;
  bad.slice_pitch = ~uint64_t{0};
  bad.layers = 0xffffffffu;  // Overflowing extents.
  EXPECT_EQ(s.Invoke<calls::TexObjectCreate>(bad, &r), kInvalidValue);
  // The victim's handle names nothing here.
  s.Invoke<calls::TexObjectDestroy>({victim_texture.handle});
  EXPECT_EQ(AsyncError(s), kInvalidHandle);
  // The attacker's own object: made, destroyed once.
  ASSERT_EQ(s.Invoke<calls::TexObjectCreate>(texture(buffer), &r), kOk) << s.last_error();
  s.Invoke<calls::TexObjectDestroy>({r.handle});
  EXPECT_EQ(AsyncError(s), kOk) << s.last_error();
  s.Invoke<calls::TexObjectDestroy>({r.handle});
  EXPECT_EQ(AsyncError(s), kInvalidHandle);
  // The victim's object is still its own to destroy.
  victim_->s().Invoke<calls::TexObjectDestroy>({victim_texture.handle});
  EXPECT_EQ(victim_->s().Synchronize(), kOk) << victim_->s().last_error();
  victim_->s().MemFree(victim_buffer);
  s.MemFree(buffer);
  ExpectAllUnharmed();
}

// Issue "Tenant isolation, hardened", item 1: texture handles were the addresses of descriptors in the tenant's
// device memory, trusted after a magic word. A kernel handed the address of a record the tenant wrote itself, in
// that layout, with a zero width under wrap addressing (i % 0: the worker died of SIGFPE), or 200 channels (800
// bytes written past a stack object), took the worker down. Now the launch fails with an illegal address naming
// the handle; the worker lives on (its session answers, with the fault, as a CUDA context does after one), and
// the other tenant computes.
TEST_F(SessionProtocol, ForgedTextureHandleFailsTheLaunchNotTheWorker) {
  namespace calls = session::calls;
  RemoteSession& s = a();
  RemoteFunctionInfo fetch;
  ASSERT_EQ(s.GetFunction(attacker_->module, "fetch1d", &fetch), kOk) << s.last_error();
  ASSERT_EQ(fetch.params.size(), 3u);
  uint64_t texels = 0, record = 0, out = 0;
  ASSERT_EQ(s.MemAlloc(4096, &texels), kOk);
  ASSERT_EQ(s.MemAlloc(4096, &record), kOk);
  ASSERT_EQ(s.MemAlloc(64, &out), kOk);
  std::vector<float> values(16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) + 0.5f;
  s.CopyToDevice(texels, values.data(), values.size() * sizeof(float), 0);
  auto launch = [&](uint64_t handle) {
    std::vector<uint8_t> params(fetch.params[2].offset + fetch.params[2].size, 0);
    const float x = 3.0f;
    std::memcpy(params.data() + fetch.params[0].offset, &handle, sizeof(handle));
    std::memcpy(params.data() + fetch.params[1].offset, &x, sizeof(x));
    std::memcpy(params.data() + fetch.params[2].offset, &out, sizeof(out));
    const uint32_t one[3] = {1, 1, 1};
    s.Launch(fetch.handle, one, one, 0, 0, params.data(), params.size());
    return s.Synchronize();
  };
  // A real object: the kernel samples it.
  calls::TexObjectCreate::Args t = FloatTexture(texels, 16, 1, 0, 0);
  calls::TexObjectCreate::Results real;
  ASSERT_EQ(s.Invoke<calls::TexObjectCreate>(t, &real), kOk) << s.last_error();
  ASSERT_EQ(launch(real.handle), kOk) << s.last_error();
  float got[4] = {};
  ASSERT_EQ(s.CopyFromDevice(got, out, sizeof(got), 0), kOk) << s.last_error();
  EXPECT_EQ(got[0], 3.5f);

  // The forgery: the old layout (a magic word, then the description), at an address the tenant owns.
  struct OldRecord {
    uint64_t magic;
    emu::TextureDesc desc;
  } forged{};
  forged.magic = 0x4f58455450475047ull;  // "GPGPTEXO"
  forged.desc.width = 0;
  forged.desc.normalized_coords = true;
  forged.desc.address[0] = emu::TexAddress::kWrap;
  forged.desc.base = texels;
  s.CopyToDevice(record, &forged, sizeof(forged), 0);
  EXPECT_EQ(launch(record), CUDA_ERROR_ILLEGAL_ADDRESS) << s.last_error();
  EXPECT_NE(s.last_error().find("is not a texture object"), std::string::npos) << s.last_error();
  // The worker lives: its session still answers, with the sticky fault.
  EXPECT_EQ(s.Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS) << s.last_error();
  ExpectOthersUnharmed();
}

// A device-to-host copy may answer straight from device memory (an emulated device's memory is the worker's own):
// the worker must then serve nothing more until the reply is written, or a call that came right behind it would
// change the bytes on their way out. Here the copy and a memset of the same bytes arrive in one write, and the
// client reads nothing for a while (the socket cannot take the whole reply at once, so its writing outlasts the
// memset's work by far): the reply carries the bytes as they were, and the memset happens after it.
TEST_F(SessionProtocol, ACallBehindADeviceToHostCopyWaitsUntilTheCopysBytesAreOut) {
  auto host = StartRawHost();
  ASSERT_TRUE(host);
  RawDirect raw(*host);
  constexpr uint64_t kBytes = 16u << 20;  // Far more than the socket takes while nobody reads.
  const uint64_t buffer = raw.Alloc(kBytes, 1);
  ASSERT_NE(buffer, 0u);
  std::vector<uint8_t> frames, back;
  RawDirect::Memset(buffer, kBytes, 0x5a, &frames);
  RawDirect::CopyBack(buffer, kBytes, 2, &frames);  // Waits for the memset: the device is idle once it is answered.
  ASSERT_TRUE(raw.SendBytes(frames.data(), frames.size()));
  ASSERT_TRUE(raw.CopiedBack(2, &back));
  EXPECT_EQ(FirstNot(back, 0x5a), kBytes) << "the first copy back";

  frames.clear();
  RawDirect::CopyBack(buffer, kBytes, 3, &frames);
  RawDirect::Memset(buffer, kBytes, 0xa5, &frames);
  ASSERT_TRUE(raw.SendBytes(frames.data(), frames.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(raw.CopiedBack(3, &back));
  EXPECT_EQ(FirstNot(back, 0x5a), kBytes) << "a copy back with a memset right behind it";

  frames.clear();
  RawDirect::CopyBack(buffer, kBytes, 4, &frames);
  ASSERT_TRUE(raw.SendBytes(frames.data(), frames.size()));
  ASSERT_TRUE(raw.CopiedBack(4, &back));
  EXPECT_EQ(FirstNot(back, 0xa5), kBytes) << "the copy back after the memset";
  ExpectAllUnharmed();
}

// A host-to-device copy's bytes may be read from the socket straight into device memory; when they come slowly
// (here a pause of 100 ms half-way), the worker waits a while, then reads the rest into a buffer. Either way every
// byte arrives, once, where it belongs.
TEST_F(SessionProtocol, AHostToDeviceCopyWhoseBytesComeSlowlyArrivesWhole) {
  auto host = StartRawHost();
  ASSERT_TRUE(host);
  RawDirect raw(*host);
  constexpr uint64_t kBytes = 4u << 20;
  const uint64_t buffer = raw.Alloc(kBytes + 4096, 1);
  ASSERT_NE(buffer, 0u);
  std::vector<uint8_t> frames, back;
  RawDirect::Memset(buffer, kBytes + 4096, 0x00, &frames);
  RawDirect::CopyBack(buffer, 8, 2, &frames);  // The device is idle once this is answered.
  ASSERT_TRUE(raw.SendBytes(frames.data(), frames.size()));
  ASSERT_TRUE(raw.CopiedBack(2, &back));
  for (int pause_ms : {0, 100}) {
    SCOPED_TRACE(::testing::Message() << "a pause of " << pause_ms << " ms half-way");
    std::vector<capnp::word> data(kBytes / sizeof(capnp::word));
    auto* bytes = reinterpret_cast<uint8_t*>(data.data());
    for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3 + pause_ms);
    capnp::MallocMessageBuilder m;
    auto p = m.initRoot<wire::Session::CopyToDeviceParams>();
    p.setDst(buffer);
    p.adoptData(m.getOrphanage().referenceExternalData(capnp::Data::Reader(bytes, kBytes)));  // A segment of its own.
    frames.clear();
    RawDirect::Frame(session::calls::CopyToDevice::kOrdinal, 0, m, &frames);
    const size_t half = frames.size() / 2;
    ASSERT_TRUE(raw.SendBytes(frames.data(), half));
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    ASSERT_TRUE(raw.SendBytes(frames.data() + half, frames.size() - half));
    frames.clear();
    RawDirect::CopyBack(buffer, kBytes + 4096, 3, &frames);
    ASSERT_TRUE(raw.SendBytes(frames.data(), frames.size()));
    ASSERT_TRUE(raw.CopiedBack(3, &back));
    ASSERT_EQ(back.size(), kBytes + 4096);
    EXPECT_EQ(std::memcmp(back.data(), bytes, kBytes), 0) << "the copied bytes";
    EXPECT_EQ(FirstNot(std::vector<uint8_t>(back.begin() + kBytes, back.end()), 0), 4096u) << "past the copy";
  }
  ExpectAllUnharmed();
}

// A kernel that counts its launches in a module variable (`counter`, from 5) and writes the count to `out`.
constexpr char kCounterPtx[] = R"(
.version 7.0
.target sm_75
.address_size 64
.global .align 4 .u32 counter = 5;
.visible .entry bump(.param .u64 out) {
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  ld.global.u32 %r1, [counter];
  add.u32 %r2, %r1, 1;
  st.global.u32 [counter], %r2;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r2;
  ret;
}
)";

// Issue 43's ground: a quiet session checkpointed and restored as a fresh session in the same window, with another
// device: its allocations hold their bytes at their addresses, its module's variable keeps its value and address,
// and the handles its client holds (module, function, stream, event) name the same objects, so the client carries
// on as if nothing had happened.
TEST(SessionImage, AQuietSessionIsRestoredAtItsAddressesWithItsHandles) {
  const uint32_t one[3] = {1, 1, 1};
  auto bump = [&](RemoteSession& s, uint64_t function, uint64_t out, uint64_t stream) {
    return s.Launch(function, one, one, 0, stream, &out, sizeof(out));
  };
  std::vector<uint8_t> pattern(3 << 20);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 2654435761u >> 13);

  namespace calls = session::calls;
  constexpr uint64_t kGran = session::kMappingGranularity;
  backend::SessionImage image;
  uint64_t out = 0, big = 0, module = 0, stream = 0, event = 0, counter = 0, counter_bytes = 0, reservation = 0;
  uint64_t texture = 0;
  RemoteFunctionInfo function;
  uint64_t window_base = 0, window_bytes = 0;
  {
    auto host = SessionHost::Start();
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    auto session = (*host)->Connect();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    RemoteSession& s = **session;
    ASSERT_EQ(s.MemAlloc(4, &out), kOk);
    ASSERT_EQ(s.MemAlloc(pattern.size(), &big), kOk);
    s.CopyToDevice(big, pattern.data(), pattern.size(), 0);
    ASSERT_EQ(s.ModuleLoad(kCounterPtx, sizeof(kCounterPtx), &module), kOk) << s.last_error();
    ASSERT_EQ(s.GetFunction(module, "bump", &function), kOk) << s.last_error();
    ASSERT_EQ(s.GetGlobal(module, "counter", &counter, &counter_bytes), kOk);
    ASSERT_EQ(s.StreamCreate(&stream), kOk);
    ASSERT_EQ(s.EventCreate(&event), kOk);
    ASSERT_EQ(bump(s, function.handle, out, stream), kOk);
    ASSERT_EQ(bump(s, function.handle, out, stream), kOk);
    // Virtual memory: one physical memory mapped twice in a reservation, then released (it lives in its mappings).
    calls::AddressReserve::Results reserved;
    ASSERT_EQ(s.Invoke<calls::AddressReserve>({2 * kGran, 0, 0}, &reserved), kOk) << s.last_error();
    reservation = reserved.address;
    calls::MemCreate::Results created;
    ASSERT_EQ(s.Invoke<calls::MemCreate>({kGran}, &created), kOk) << s.last_error();
    ASSERT_EQ(s.Invoke<calls::MemMap>({reservation, kGran, 0, created.memory}), kOk) << s.last_error();
    ASSERT_EQ(s.Invoke<calls::MemMap>({reservation + kGran, kGran, 0, created.memory}), kOk) << s.last_error();
    ASSERT_EQ(s.Invoke<calls::MemRelease>({created.memory}), kOk) << s.last_error();
    s.CopyToDevice(reservation, pattern.data(), kGran, 0);
    calls::TexObjectCreate::Results made;  // A texture object over the pattern.
    ASSERT_EQ(s.Invoke<calls::TexObjectCreate>(FloatTexture16x16(big), &made), kOk) << s.last_error();
    texture = made.handle;
    ASSERT_EQ(s.Synchronize(), kOk) << s.last_error();
    CallStatus taken = (*host)->Checkpoint(&image);
    ASSERT_TRUE(taken.ok()) << taken.message();
    window_base = (*host)->window_base();
    window_bytes = (*host)->window_bytes();
  }  // The first session and its device are gone: its window is free for the second.
  EXPECT_EQ(image.allocations.size(), 2u);
  ASSERT_EQ(image.modules.size(), 1u);
  EXPECT_EQ(image.modules[0].variables.size(), 1u);

  // The image travels as a byte stream (as it would to another server), and the restore reads it from there.
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(backend::WriteSessionImage(image, [&](const uint8_t* data, size_t n) {
                bytes.insert(bytes.end(), data, data + n);
                return true;
              }).ok());
  backend::SessionImage carried;
  size_t at = 0;
  CallStatus read = backend::ReadSessionImage(
      [&](uint8_t* data, size_t n) {
        if (n > bytes.size() - at) return false;
        std::memcpy(data, bytes.data() + at, n);
        at += n;
        return true;
      },
      &carried);
  ASSERT_TRUE(read.ok()) << read.message();
  EXPECT_EQ(at, bytes.size()) << "the image reads back whole";

  SessionHostOptions options;
  options.window_base = window_base;
  options.window_bytes = window_bytes;
  options.restore = &carried;
  auto host = SessionHost::Start(options);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  auto session = (*host)->Connect();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  RemoteSession& s = **session;
  // The same function handle, on the same stream handle, into the same allocation: the variable counts on from 7.
  ASSERT_EQ(bump(s, function.handle, out, stream), kOk);
  ASSERT_EQ(s.EventRecord(event, stream), kOk);
  ASSERT_EQ(s.EventSynchronize(event), kOk) << s.last_error();
  uint32_t value = 0;
  ASSERT_EQ(s.CopyFromDevice(&value, out, sizeof(value), 0), kOk) << s.last_error();
  EXPECT_EQ(value, 8u) << "the module's variable kept its value across the restore";
  uint64_t counter_again = 0;
  ASSERT_EQ(s.GetGlobal(module, "counter", &counter_again, &counter_bytes), kOk);
  EXPECT_EQ(counter_again, counter) << "and its address";
  std::vector<uint8_t> back(pattern.size());
  ASSERT_EQ(s.CopyFromDevice(back.data(), big, back.size(), 0), kOk) << s.last_error();
  EXPECT_TRUE(back == pattern) << "the allocation's bytes at its address";
  // The mappings: both show the physical memory's bytes, and they are one memory still.
  std::vector<uint8_t> first(kGran), second(kGran);
  ASSERT_EQ(s.CopyFromDevice(first.data(), reservation, kGran, 0), kOk) << s.last_error();
  EXPECT_TRUE(std::equal(first.begin(), first.end(), pattern.begin())) << "the first mapping's bytes";
  const uint8_t mark = 0xa5;
  s.CopyToDevice(reservation + 17, &mark, 1, 0);
  ASSERT_EQ(s.CopyFromDevice(second.data(), reservation + kGran, kGran, 0), kOk) << s.last_error();
  EXPECT_EQ(second[17], mark) << "the two mappings share one physical memory";
  EXPECT_EQ(s.Invoke<calls::MemUnmap>({reservation, 2 * kGran}), kOk) << s.last_error();
  EXPECT_EQ(s.Invoke<calls::AddressFree>({reservation, 2 * kGran}), kOk);
  // The texture object is the session's under the same handle: destroyed once, then named nothing.
  s.Invoke<calls::TexObjectDestroy>({texture});  // Posted: its answer comes with the next wait.
  EXPECT_EQ(AsyncError(s), kOk) << s.last_error();
  s.Invoke<calls::TexObjectDestroy>({texture});
  EXPECT_EQ(AsyncError(s), kInvalidHandle);
  // The restored memory is the session's: freeing it works, and a new allocation does not land on it.
  uint64_t fresh = 0;
  ASSERT_EQ(s.MemAlloc(4096, &fresh), kOk);
  EXPECT_TRUE(fresh + 4096 <= big || fresh >= big + pattern.size()) << "a new allocation overlaps a restored one";
  EXPECT_EQ(s.MemFree(big), kOk);
  EXPECT_EQ(s.ModuleUnload(module), kOk);
  EXPECT_EQ(s.Synchronize(), kOk) << s.last_error();
}

// Issue 43's first step (docs/moving-leases.md): a session moves to another server while its client keeps sending.
// The client posts launches and copies without waiting while its session is checkpointed (calls unread in the old
// server's socket, some of them cut in the middle), taken down, and restored elsewhere at the same window; the
// channel resumes there and sends again what the old server had not consumed. Every launch bumps a module variable:
// a call lost or run twice would show in its count, and the copies' bytes must all be where they were sent.
TEST(SessionImage, ASessionMovesUnderItsClientWithNoCallLostOrRunTwice) {
  const uint32_t one[3] = {1, 1, 1};
  auto host = SessionHost::Start();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  const uint64_t window_base = (*host)->window_base(), window_bytes = (*host)->window_bytes();

  // The reconnection waits for the new server, then answers its connection and the frames the old one consumed.
  std::mutex mu;
  std::condition_variable moved_cv;
  std::optional<SessionChannel::Resumed> moved;
  int reconnections = 0;
  auto reconnect = [&](const std::string&) -> Result<SessionChannel::Resumed> {
    std::unique_lock<std::mutex> lock(mu);
    if (!moved_cv.wait_for(lock, std::chrono::seconds(30), [&] { return moved.has_value(); })) {
      return Status(StatusCode::kUnavailable, "the test's new server never came");
    }
    ++reconnections;
    return *std::exchange(moved, std::nullopt);
  };
  auto connected = RemoteSession::OverConnection((*host)->TakeClientFd(), window_base, window_bytes, reconnect);
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  RemoteSession& s = **connected;

  uint64_t module = 0, out = 0, counter = 0, counter_bytes = 0, stream = 0, data = 0;
  RemoteFunctionInfo function;
  ASSERT_EQ(s.ModuleLoad(kCounterPtx, sizeof(kCounterPtx), &module), kOk) << s.last_error();
  ASSERT_EQ(s.GetFunction(module, "bump", &function), kOk) << s.last_error();
  ASSERT_EQ(s.GetGlobal(module, "counter", &counter, &counter_bytes), kOk);
  ASSERT_EQ(s.MemAlloc(4, &out), kOk);
  ASSERT_EQ(s.StreamCreate(&stream), kOk);
  constexpr int kRounds = 400, kLaunchesPerRound = 25;
  // Small copies queue with the launches; every fourth one is larger than a queued frame, and every 25th is of
  // megabytes (referred to in the caller's memory rather than kept: SessionChannel::PostHeld).
  constexpr size_t kChunk = 24 << 10, kLarge = (3 << 20) / 2;
  ASSERT_EQ(s.MemAlloc(kRounds * kChunk * 4 + (kRounds / 25) * kLarge, &data), kOk);
  auto place_of = [&](int round) {
    return round % 25 == 12 ? data + kRounds * kChunk * 4 + (round / 25) * kLarge : data + round * kChunk * 4;
  };
  auto chunk_of = [&](int round) {
    const size_t bytes = round % 25 == 12 ? kLarge : round % 4 == 3 ? kChunk * 4 : kChunk;
    std::vector<uint8_t> v(bytes);
    for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>((i * 31 + round * 7) >> 3);
    return v;
  };

  std::atomic<int> round_now{0};
  std::thread program([&] {
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kLaunchesPerRound; ++i) s.Launch(function.handle, one, one, 0, stream, &out, sizeof(out));
      auto bytes = chunk_of(round);
      s.CopyToDevice(place_of(round), bytes.data(), bytes.size(), stream);
      if (round % 50 == 49) s.StreamSynchronize(stream);
      round_now = round + 1;
    }
  });
  // The move, while the program is under way.
  while (round_now < kRounds / 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  backend::SessionImage image;
  uint64_t consumed = 0;
  CallStatus taken = (*host)->CheckpointAndLeave(&image, &consumed);
  ASSERT_TRUE(taken.ok()) << taken.message();
  host->reset();  // The old server and its device go: the window is free for the new one.
  SessionHostOptions options;
  options.window_base = window_base;
  options.window_bytes = window_bytes;
  options.restore = &image;
  options.restore_consumed = consumed;
  auto second = SessionHost::Start(options);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  {
    std::lock_guard<std::mutex> lock(mu);
    moved = SessionChannel::Resumed{(*second)->TakeClientFd(), consumed};
  }
  moved_cv.notify_all();
  program.join();

  ASSERT_EQ(s.StreamSynchronize(stream), kOk) << s.last_error();
  uint32_t count = 0;
  ASSERT_EQ(s.CopyFromDevice(&count, out, sizeof(count), 0), kOk) << s.last_error();
  EXPECT_EQ(count, 5u + kRounds * kLaunchesPerRound) << "every launch ran once, across the move";
  for (int round = 0; round < kRounds; ++round) {
    auto want = chunk_of(round);
    std::vector<uint8_t> got(want.size());
    ASSERT_EQ(s.CopyFromDevice(got.data(), place_of(round), got.size(), 0), kOk) << s.last_error();
    ASSERT_TRUE(got == want) << "round " << round << "'s copy";
  }
  EXPECT_EQ(reconnections, 1);
  EXPECT_GT(consumed, 0u);
}

// A session image read from a stream is the other side's bytes: every truncation of a real image, and counts and
// lengths far beyond what it could hold, are refused with what is wrong, without a crash or an allocation of what
// the bytes announce.
TEST(SessionImage, AStreamThatIsNoWholeImageIsRefused) {
  backend::SessionImage image;
  image.window_base = uint64_t{40} << 40;
  image.window_bytes = uint64_t{1} << 30;
  image.allocations.push_back({image.window_base, 16, std::vector<uint8_t>(16, 7)});
  image.modules.push_back({1, {'.', 'v', 0}, {{image.window_base + 4096, 4, {1, 2, 3, 4}}}});
  image.functions.push_back({1, 1, "kernel", {{8, 1024}}});
  image.streams = {1, 2};
  image.textures.push_back({42, {}});
  image.physical.push_back({1, 2 << 20, true});
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(backend::WriteSessionImage(image, [&](const uint8_t* data, size_t n) {
                bytes.insert(bytes.end(), data, data + n);
                return true;
              }).ok());
  auto read_from = [](const std::vector<uint8_t>& from, backend::SessionImage* out) {
    size_t at = 0;
    return backend::ReadSessionImage(
        [&](uint8_t* data, size_t n) {
          if (n > from.size() - at) return false;
          std::memcpy(data, from.data() + at, n);
          at += n;
          return true;
        },
        out);
  };
  backend::SessionImage back;
  ASSERT_TRUE(read_from(bytes, &back).ok());
  EXPECT_EQ(back.functions.at(0).name, "kernel");
  EXPECT_EQ(back.modules.at(0).variables.at(0).data, (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_TRUE(back.physical.at(0).released);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<long>(cut));
    CallStatus s = read_from(part, &back);
    ASSERT_EQ(s.code(), kInvalidValue) << "cut at " << cut;
  }
  // The allocations' count (just after the magic, the window and whether the memory stays) as 2^40, then an
  // allocation of 2^62 bytes.
  std::vector<uint8_t> absurd = bytes;
  const uint64_t many = uint64_t{1} << 40;
  std::memcpy(absurd.data() + 32, &many, sizeof(many));
  CallStatus s = read_from(absurd, &back);
  EXPECT_EQ(s.code(), kInvalidValue);
  EXPECT_NE(s.message().find("announces"), std::string::npos) << s.message();
  absurd = bytes;
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(absurd.data() + 40 + 16, &huge, sizeof(huge));  // The first allocation's data length.
  s = read_from(absurd, &back);
  EXPECT_EQ(s.code(), kInvalidValue);
  EXPECT_NE(s.message().find("announces"), std::string::npos) << s.message();
  // A window of 2^62 bytes lets an allocation announce 2^61: the reader takes only what arrives, and the stream ends.
  absurd = bytes;
  const uint64_t vast_window = uint64_t{1} << 62, vast = uint64_t{1} << 61;
  std::memcpy(absurd.data() + 16, &vast_window, sizeof(vast_window));
  std::memcpy(absurd.data() + 40 + 16, &vast, sizeof(vast));
  s = read_from(absurd, &back);
  EXPECT_EQ(s.code(), kInvalidValue);
  EXPECT_NE(s.message().find("ends early"), std::string::npos) << s.message();
  // Whether the memory stays is 0 or 1; and where it stays, an allocation carries no bytes (this one has its 16).
  for (const uint64_t stays : {uint64_t{2}, uint64_t{1}}) {
    absurd = bytes;
    std::memcpy(absurd.data() + 24, &stays, sizeof(stays));
    s = read_from(absurd, &back);
    EXPECT_EQ(s.code(), kInvalidValue);
    EXPECT_NE(s.message().find(stays == 2 ? "neither 0 nor 1" : "with bytes where its memory stays"),
              std::string::npos) << s.message();
  }
  absurd = bytes;
  absurd[0] = 'X';
  EXPECT_EQ(read_from(absurd, &back).code(), kInvalidValue) << "not an image";
}

// An image whose module variable carries more bytes than the variable holds, or a looked-up variable that is not
// its module's (copies could then reach memory the session does not own), is refused: the device's word for where
// and how large each variable is counts, not the image's.
TEST(SessionImage, ARestoreBelievesTheDeviceNotTheImageAboutModuleVariables) {
  backend::SessionImage image;
  uint64_t window_base = 0, window_bytes = 0;
  {
    auto host = SessionHost::Start();
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    auto session = (*host)->Connect();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    RemoteSession& s = **session;
    uint64_t module = 0, counter = 0, bytes = 0, buffer = 0;
    ASSERT_EQ(s.MemAlloc(4096, &buffer), kOk);
    ASSERT_EQ(s.ModuleLoad(kCounterPtx, sizeof(kCounterPtx), &module), kOk) << s.last_error();
    ASSERT_EQ(s.GetGlobal(module, "counter", &counter, &bytes), kOk);
    ASSERT_EQ(s.Synchronize(), kOk);
    ASSERT_TRUE((*host)->Checkpoint(&image).ok());
    window_base = (*host)->window_base();
    window_bytes = (*host)->window_bytes();
  }
  ASSERT_EQ(image.modules.size(), 1u);
  ASSERT_EQ(image.modules[0].variables.size(), 1u);
  ASSERT_EQ(image.globals.size(), 1u);
  auto restored = [&](const backend::SessionImage& tampered) {
    SessionHostOptions options;
    options.window_base = window_base;
    options.window_bytes = window_bytes;
    options.restore = &tampered;
    return SessionHost::Start(options);
  };
  backend::SessionImage longer = image;  // The variable's bytes run on past it, over the arena.
  longer.modules[0].variables[0].data.resize(longer.modules[0].variables[0].data.size() + 4096);
  longer.modules[0].variables[0].bytes = longer.modules[0].variables[0].data.size();
  auto refused = restored(longer);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not the variable's size"), std::string::npos)
      << refused.status().ToString();
  backend::SessionImage elsewhere = image;  // The looked-up variable names the allocation instead.
  elsewhere.globals[0].address = image.allocations.at(0).address;
  refused = restored(elsewhere);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not one of its module's"), std::string::npos)
      << refused.status().ToString();
  auto whole = restored(image);  // And the image as taken restores.
  EXPECT_TRUE(whole.ok()) << whole.status().ToString();
}

// A checkpoint is refused, by name, where it cannot carry everything: work still queued, or objects it does not
// carry yet; and a restore into a session that is not fresh, or into another window, is refused.
TEST(SessionImage, CheckpointsAndRestoresThatWouldLoseSomethingAreRefused) {
  auto host = SessionHost::Start();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  auto session = (*host)->Connect();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  RemoteSession& s = **session;
  uint64_t buffer = 0;
  ASSERT_EQ(s.MemAlloc(4096, &buffer), kOk);
  ASSERT_EQ(s.Synchronize(), kOk);
  backend::SessionImage image;
  ASSERT_TRUE((*host)->Checkpoint(&image).ok());
  // Physical memory that no mapping shows whole cannot be read: refused, not dropped.
  session::calls::MemCreate::Results physical;
  ASSERT_EQ(s.Invoke<session::calls::MemCreate>({session::kMappingGranularity}, &physical), kOk) << s.last_error();
  backend::SessionImage refused;
  CallStatus s1 = (*host)->Checkpoint(&refused);
  EXPECT_EQ(s1.code(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(s1.message().find("physical memory"), std::string::npos) << s1.message();

  // Another window: refused before anything is made.
  SessionHostOptions elsewhere;
  elsewhere.restore = &image;
  auto moved = SessionHost::Start(elsewhere);
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.status().message().find("is not this session's"), std::string::npos) << moved.status().ToString();
}
}  // namespace
}  // namespace gpupool::testing
