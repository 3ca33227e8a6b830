// libFuzzer target for both wire services of a live gp-agent: the pool service (lib/schema/pool.capnp) on the
// agent's socket, and the session service (session.capnp) of a session the agent opens for it, reached through the
// agent. Each input is one of:
//   0: raw bytes on a fresh connection to the agent (not Cap'n Proto at all, or a broken frame of it);
//   1: a call on the pool service with a fuzzed method ordinal and a struct of fuzzed words and pointers;
//   2: typed pool calls with hostile values (absurd sizes and counts, foreign lease ids, huge history, bad devices);
//   3: a call on a session with a fuzzed ordinal and content (foreign handles, huge sizes, unknown ordinals);
//   4: a fresh session reached directly, as clients do (lib/schema/session_frames.h): the ticket's knock, then
//      fuzzed frames (any ordinal, sequence number and length, fuzzed segment tables and words);
//   5: a batch (session call `batch`, what a graph launch sends): entries of posted calls, each its call's Params
//      struct with hostile values of each field's type, or raw words, under true or lying lengths and ordinals;
//   6: texture and surface objects (texObjectCreate) with random descriptors over the session's own memory and
//      beyond it (formats, channels, dimensions, pitches, address modes, flags), then destroyed once, twice or
//      under a forged handle;
//   7: a hostile client at a session worker's door, on one connection kept from input to input: well-formed
//      frames of any call's Params (typed as its schema says, hostile values; batches and texture objects among
//      them), sequence numbers reused, handshake frames and worker-side frame kinds sent by the client, a frame cut
//      short before the close.
// The agent is a real gp-agent process (GPUPOOL_FUZZ_AGENT, started here with a short lease TTL). After every input
// it must still be running and answer describe; at exit, once the TTL has passed, it must hold no lease and no
// device memory, and have no session worker left: nothing crashes, nothing leaks. Built by tests/fuzz/run.sh.
// GPUPOOL_WIRE_FUZZ_MODES (say "5,6") limits a run to those modes: an input's first byte then picks among them.
// For a gp-agent built with -DGPUPOOL_SANITIZE=ON: GPUPOOL_FUZZ_AGENT_CONFIG, an agent.toml to start it with
// ([workers] memory_limit = "0"), and GPUPOOL_FUZZ_AGENT_ASAN_OPTIONS, the agent's ASAN_OPTIONS.
#include <signal.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <capnp/dynamic.h>
#include <capnp/rpc-twoparty.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <kj/async-io.h>

#include "pool.capnp.h"
#include "schema/session_calls.h"
#include "schema/session_frames.h"
#include "session.capnp.h"

namespace {

using gpupool::wire::Agent;
using gpupool::wire::Session;

// Reads fuzz bytes in order; zeros once they run out.
struct Bytes {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T Take() {
    T v{};
    size_t k = n < sizeof(T) ? n : sizeof(T);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  std::vector<uint8_t> Raw(size_t max) {
    size_t k = n < max ? n : max;
    std::vector<uint8_t> v(p, p + k);
    p += k;
    n -= k;
    return v;
  }
  std::string Text(size_t max) {
    size_t k = Take<uint8_t>();
    k = k < n ? k : n;
    k = k < max ? k : max;
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return s;
  }
};

struct Fixture {
  pid_t agent = -1;
  std::string address;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  kj::Maybe<Agent::Client> client;
  kj::Maybe<Session::Client> session;
  int sessions_opened = 0;
  int doors_opened = 0, doors_entered = 0;  // Direct sessions knocked at, and the worker let us in.
  uint64_t session_buffer = 0;               // Memory of `session` that texture descriptors point into.
  int door_fd = -1;                          // Mode 7's door connection, kept from input to input.
  std::string door_lease;
  int batches = 0, textures = 0, textures_made = 0, typed_frames = 0, windows = 0;
  std::vector<uint8_t> modes;  // GPUPOOL_WIRE_FUZZ_MODES; empty: all.
  std::string log_path;                      // The agent's stderr.
  long log_read = 0;                         // How far CheckAlive has read it.

  Agent::Client Connected() {
    KJ_IF_MAYBE(c, client) { return *c; }
    auto addr = io.provider->getNetwork().parseAddress(address).wait(io.waitScope);
    stream = addr->connect().wait(io.waitScope);
    rpc = kj::heap<capnp::TwoPartyClient>(*stream);
    Agent::Client c = rpc->bootstrap().castAs<Agent>();
    auto hello = c.helloRequest();
    hello.setClientVersion(gpupool::wire::PROTOCOL_VERSION);
    hello.send().wait(io.waitScope);
    client = c;
    return c;
  }
  void Drop() {
    session = nullptr;
    session_buffer = 0;
    client = nullptr;
    rpc = nullptr;
    stream = nullptr;
  }
};

Fixture* fx = nullptr;
constexpr int kModes = 8;
// The window of the sessions for calls (modes 3, 5, 6): above the shadow memory of AddressSanitizer (it ends at
// 0x10007fff8000), so that a sanitized gp-agent's worker can map it.
constexpr uint64_t kCallsWindow = uint64_t{48} << 40;

void Die(const char* why) {
  std::fprintf(stderr, "wire_fuzz: %s\n", why);
  std::fflush(stderr);
  std::abort();
}

// The agent still runs and answers describe, none of its session workers crashed (the agent logs how each worker
// it did not stop itself ended), and neither reported a sanitizer error (a gp-agent built with the sanitizers).
void CheckAlive() {
  int status = 0;
  if (waitpid(fx->agent, &status, WNOHANG) == fx->agent) Die("the agent died");
  if (FILE* log = std::fopen(fx->log_path.c_str(), "r")) {
    std::fseek(log, fx->log_read, SEEK_SET);
    char line[4096];
    while (std::fgets(line, sizeof(line), log)) {
      if (std::strstr(line, "killed by signal")) {
        std::fclose(log);
        Die((std::string("a session worker crashed: ") + line).c_str());
      }
      // A sanitized agent's or worker's report, even one it went on after (UBSan recovers by default).
      if (std::strstr(line, "runtime error:") || std::strstr(line, "ERROR: AddressSanitizer") ||
          std::strstr(line, "ERROR: LeakSanitizer")) {
        std::fclose(log);
        std::this_thread::sleep_for(std::chrono::seconds(3));  // The report's stack, into the log kept for it.
        std::fprintf(stderr, "wire_fuzz: the agent's log: %s\n", fx->log_path.c_str());
        Die((std::string("a sanitizer report in the agent's log: ") + line).c_str());
      }
    }
    fx->log_read = std::ftell(log);
    std::fclose(log);
  }
  try {
    fx->Connected().describeRequest().send().wait(fx->io.waitScope);
  } catch (const kj::Exception& e) {
    fx->Drop();  // This connection may have been broken on purpose; a fresh one must answer.
    try {
      fx->Connected().describeRequest().send().wait(fx->io.waitScope);
    } catch (const kj::Exception& e2) {
      Die(("the agent does not answer describe: " + std::string(e2.getDescription().cStr())).c_str());
    }
  }
}

template <typename T>
void Try(kj::Promise<T>&& p) {
  try {
    p.wait(fx->io.waitScope);
  } catch (const kj::Exception&) {
  }
}

// Reserves and commits lease `id` (one slice of device 0) and opens its session with addresses from `window_base`;
// nullopt if the agent refuses any step.
kj::Maybe<capnp::Response<Agent::OpenSessionResults>> OpenLeaseSession(Agent::Client a, const std::string& id,
                                                                      const std::string& secret, uint32_t share,
                                                                      uint64_t window_base,
                                                                      uint64_t window_bytes = uint64_t{1} << 30) {
  auto r = a.reserveRequest();
  r.initLease().setId(id);
  r.getLease().setSecret(secret);
  r.initOwner().setUser("fuzz");
  auto slices = r.initSlices(1);
  slices[0].setDevice(0);
  slices[0].setMemoryBytes(64u << 20);
  slices[0].setShareMicros(share);
  if (r.send().wait(fx->io.waitScope).getOutcome().getCode() != gpupool::wire::Outcome::Code::OK) return nullptr;
  auto c = a.commitRequest();
  c.initLease().setId(id);
  c.getLease().setSecret(secret);
  c.send().wait(fx->io.waitScope);
  auto o = a.openSessionRequest();
  o.initLease().setId(id);
  o.getLease().setSecret(secret);
  o.setDevice(0);
  o.setWindowBase(window_base);
  o.setWindowBytes(window_bytes);
  auto opened = o.send().wait(fx->io.waitScope);
  if (opened.getOutcome().getCode() != gpupool::wire::Outcome::Code::OK) return nullptr;
  return kj::mv(opened);
}

// A lease and a session on it for the session calls; a new one when the last broke.
kj::Maybe<Session::Client> SessionFor() {
  KJ_IF_MAYBE(s, fx->session) { return *s; }
  if (fx->sessions_opened > 200) return nullptr;  // Each costs a worker process: enough variety.
  ++fx->sessions_opened;
  Agent::Client a = fx->Connected();
  std::string id = "fuzz-" + std::to_string(fx->sessions_opened), secret = "fuzz-secret-0123456789";
  try {
    KJ_IF_MAYBE(opened, OpenLeaseSession(a, id, secret, 500000, kCallsWindow)) {
      Session::Client s = opened->getSession();
      fx->session = s;
      return s;
    }
    return nullptr;
  } catch (const kj::Exception&) {
    return nullptr;
  }
}

std::vector<uint8_t> TypedFrames(Bytes& in, bool* cut);
std::vector<uint8_t> BatchCalls(Bytes& in, uint64_t window_base);
kj::Array<capnp::word> TypedParams(uint32_t ordinal, Bytes& in, uint64_t window_base);

void ReleaseLease(const std::string& id, const std::string& secret) {
  auto r = fx->Connected().releaseRequest();
  r.initLease().setId(id);
  r.getLease().setSecret(secret);
  Try(r.send());
}

// Opens lease `id` and its session, connects to the session's door and knocks with its ticket (its byte
// `spoil_at` flipped when `spoil`): the connection, or -1 with the lease released. Counts the doors the worker let
// the client in at.
int KnockAtDoor(const std::string& id, const std::string& secret, bool spoil, uint8_t spoil_at) {
  ++fx->doors_opened;
  auto maybe_opened = OpenLeaseSession(fx->Connected(), id, secret, 250000, uint64_t{32} << 40);
  capnp::Response<Agent::OpenSessionResults>* opened = nullptr;
  KJ_IF_MAYBE(o, maybe_opened) { opened = o; }
  if (!opened || !opened->hasDirect() || opened->getDirect().getPath().size() == 0) {
    ReleaseLease(id, secret);
    return -1;
  }
  std::string path = opened->getDirect().getPath();
  auto ticket = opened->getDirect().getTicket();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    ReleaseLease(id, secret);
    return -1;
  }
  struct {
    gpupool::session::FrameHeader header{gpupool::session::kEnterFrame, 0, 2};
    char ticket[16];
    uint64_t shared_bytes = 0;
  } knock;
  std::memcpy(knock.ticket, ticket.begin(), std::min<size_t>(16, ticket.size()));
  if (spoil) knock.ticket[spoil_at % 16] ^= 1;
  // A knock without shared memory is the header and the ticket (2 words): shared_bytes travels only with a memfd.
  (void)!send(fd, &knock, sizeof(knock) - sizeof(knock.shared_bytes), MSG_NOSIGNAL);
  gpupool::session::FrameHeader entered{};
  pollfd wait_entered{fd, POLLIN, 0};
  if (poll(&wait_entered, 1, 1000) > 0 && read(fd, &entered, sizeof(entered)) == sizeof(entered) &&
      entered.kind == gpupool::session::kEnteredFrame) {
    ++fx->doors_entered;
  }
  return fd;
}

// Reads what the worker answers, for a moment (up to 4 waits of `wait_ms`); false once it closed the connection.
bool Drain(int fd, int wait_ms) {
  pollfd p{fd, POLLIN, 0};
  char sink[4096];
  for (int i = 0; i < 4 && poll(&p, 1, wait_ms) > 0; ++i) {
    if (read(fd, sink, sizeof(sink)) <= 0) return false;
  }
  return true;
}

// Mode 7: typed frames on one door connection kept from input to input (a worker serves many calls), opened again
// once the worker closes it, its lease ends (the fuzzer never renews one: 1 s) or an input cut its last frame.
void FuzzTypedFrames(Bytes& in) {
  const std::string secret = "typed-secret-0123456789";
  if (fx->door_fd < 0) {
    if (fx->doors_opened >= 2000) return;  // Each costs a worker process.
    fx->door_lease = "typed-" + std::to_string(fx->doors_opened + 1);
    fx->door_fd = KnockAtDoor(fx->door_lease, secret, false, 0);
    if (fx->door_fd < 0) return;
  }
  bool cut = false;
  std::vector<uint8_t> out = TypedFrames(in, &cut);
  bool open = send(fx->door_fd, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
  open = Drain(fx->door_fd, 2) && open;  // What is not read now is read after the next input.
  if (!open || cut) {
    close(fx->door_fd);
    fx->door_fd = -1;
    ReleaseLease(fx->door_lease, secret);
  }
}

// Mode 4: a session of its own, reached at its worker's door with the ticket (now and then a wrong one), then
// fuzzed frames; the lease is released.
void FuzzFrames(Bytes& in) {
  if (fx->doors_opened >= 400) return;  // Each costs a worker process.
  std::string id = "frames-" + std::to_string(fx->doors_opened + 1), secret = "frames-secret-0123456789";
  const bool spoil = in.Take<uint8_t>() % 16 == 0;
  int fd = KnockAtDoor(id, secret, spoil, spoil ? in.Take<uint8_t>() : 0);
  if (fd < 0) return;
  // Frames: a header with a fuzzed ordinal, sequence number and length, then a segment table and words from the
  // input (the length may claim more than follows, or absurdly much).
  std::vector<uint8_t> out;
  while (in.n > 0 && out.size() < 65536) {
    gpupool::session::FrameHeader h;
    uint8_t pick = in.Take<uint8_t>();
    h.kind = pick < 200 ? pick % 80 : in.Take<uint32_t>();
    h.seq = in.Take<uint16_t>();
    uint16_t body_words = in.Take<uint8_t>() % 64;
    h.words = in.Take<uint8_t>() < 8 ? in.Take<uint64_t>() : body_words;
    const auto* hp = reinterpret_cast<const uint8_t*>(&h);
    out.insert(out.end(), hp, hp + sizeof(h));
    uint32_t table[2] = {0, body_words > 0 ? body_words - 1u : 0u};
    if (in.Take<uint8_t>() < 16) table[0] = in.Take<uint32_t>();  // A segment count or size that lies.
    const auto* tp = reinterpret_cast<const uint8_t*>(table);
    if (body_words > 0) out.insert(out.end(), tp, tp + sizeof(table));
    for (size_t i = 8; i < body_words * 8u; ++i) out.push_back(in.Take<uint8_t>());
  }
  (void)!send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  Drain(fd, 10);  // Whatever the worker answers, for a moment; then the client is gone.
  close(fd);
  ReleaseLease(id, secret);
}

constexpr uint8_t kCutFrames = 0xA5;

// Mode 7's frames, as a hostile client writes them at the door: mostly well-formed frames of a call's typed Params
// (any call, batches and texture objects more often), with sequence numbers that repeat; some frames of the kinds
// only the handshake or the worker sends; the last frame may be cut short.
std::vector<uint8_t> TypedFrames(Bytes& in, bool* cut) {
  using gpupool::session::FrameHeader;
  std::vector<uint8_t> out;
  // The client closes inside its last frame: rarely, since the connection then goes.
  *cut = in.Take<uint8_t>() == kCutFrames;
  const uint64_t window_base = uint64_t{32} << 40;
  const uint32_t calls = capnp::Schema::from<Session>().getMethods().size();
  while (in.n > 0 && out.size() < 65536) {
    ++fx->typed_frames;
    uint8_t pick = in.Take<uint8_t>();
    FrameHeader h;
    h.seq = in.Take<uint8_t>() % 4;  // Few numbers: replies and calls in flight share them.
    std::vector<uint8_t> message;
    using gpupool::session::calls::Batch;
    using gpupool::session::calls::TexObjectCreate;
    using gpupool::session::calls::TexObjectDestroy;
    if (pick < 24) {
      h.kind = Batch::kOrdinal;  // A batch through the door.
      std::vector<uint8_t> entries = BatchCalls(in, window_base);
      capnp::MallocMessageBuilder m;
      m.initRoot<capnp::DynamicStruct>(capnp::Schema::from<Session>().getMethods()[Batch::kOrdinal].getParamType())
          .set("calls", capnp::Data::Reader(entries.data(), entries.size()));
      auto words = capnp::messageToFlatArray(m);
      message.assign(words.asBytes().begin(), words.asBytes().end());
    } else if (pick < 236) {
      // Texture objects more often than their share.
      h.kind = pick < 48 ? TexObjectCreate::kOrdinal : pick < 56 ? TexObjectDestroy::kOrdinal : pick % calls;
      auto words = TypedParams(h.kind, in, window_base);
      message.assign(words.asBytes().begin(), words.asBytes().end());
    } else {
      static constexpr uint32_t kKinds[] = {gpupool::session::kEnterFrame, gpupool::session::kEnteredFrame,
                                            gpupool::session::kReplyFrame, gpupool::session::kAsyncErrorFrame,
                                            gpupool::session::kQuietReplyFrame};
      h.kind = kKinds[pick % 5];
      message = in.Raw(in.Take<uint8_t>() % 4 * 8);
    }
    message.resize((message.size() + 7) / 8 * 8);  // The input may end inside a word.
    h.words = message.size() / 8;
    const auto* hp = reinterpret_cast<const uint8_t*>(&h);
    out.insert(out.end(), hp, hp + sizeof(h));
    out.insert(out.end(), message.begin(), message.end());
  }
  if (*cut && !out.empty()) out.resize(out.size() - 1 - (out.size() > 16 ? 8 : 0));
  return out;
}

// The calls the client may post (and so put in a batch), from their one declaration.
const std::vector<uint32_t>& PostedOrdinals() {
  static const std::vector<uint32_t> posted = [] {
    std::vector<uint32_t> v;
#define GP_FUZZ_POSTED(Name, method, number, mode, doc) \
  if (gpupool::session::Mode::mode == gpupool::session::Mode::kPosted) v.push_back(number);
    GP_SESSION_CALLS(GP_FUZZ_POSTED)
#undef GP_FUZZ_POSTED
    return v;
  }();
  return posted;
}

// A number of `T` for a field: mostly values that mean something to the server (small handles and counts, addresses
// in and at the ends of the session's window, the type's extremes), else raw bytes.
template <typename T>
T Number(Bytes& in, uint64_t window_base) {
  uint8_t pick = in.Take<uint8_t>();
  uint64_t v;
  if (pick < 64) {
    v = pick % 16;
  } else if (pick < 112) {
    v = window_base + (uint64_t{in.Take<uint16_t>()} << (pick % 4 * 4));
  } else if (pick < 128) {
    v = window_base + (uint64_t{1} << 30) - in.Take<uint8_t>();  // The window's last bytes, and just past it.
  } else if (pick < 144) {
    v = ~uint64_t{0} - (pick % 4);
  } else if (pick < 160) {
    v = uint64_t{1} << (in.Take<uint8_t>() % 64);
  } else {
    v = in.Take<uint64_t>();
  }
  return static_cast<T>(v);
}

// Sets every field of `s` as its schema types it, with hostile values: numbers as Number gives them, texts and data
// of fuzzed bytes, nested structs and lists (up to a depth), enums of any value.
void FillTyped(capnp::DynamicStruct::Builder s, Bytes& in, uint64_t window_base, int depth) {
  using capnp::schema::Type;
  for (capnp::StructSchema::Field field : s.getSchema().getFields()) {
    if (in.Take<uint8_t>() < 16) continue;  // Now and then a field left at its default.
    capnp::Type type = field.getType();
    switch (type.which()) {
      case Type::VOID: break;
      case Type::BOOL: s.set(field, (in.Take<uint8_t>() & 1) != 0); break;
      case Type::INT8: s.set(field, Number<int8_t>(in, window_base)); break;
      case Type::INT16: s.set(field, Number<int16_t>(in, window_base)); break;
      case Type::INT32: s.set(field, Number<int32_t>(in, window_base)); break;
      case Type::INT64: s.set(field, Number<int64_t>(in, window_base)); break;
      case Type::UINT8: s.set(field, Number<uint8_t>(in, window_base)); break;
      case Type::UINT16: s.set(field, Number<uint16_t>(in, window_base)); break;
      case Type::UINT32: s.set(field, Number<uint32_t>(in, window_base)); break;
      case Type::UINT64: s.set(field, Number<uint64_t>(in, window_base)); break;
      case Type::FLOAT32: s.set(field, in.Take<float>()); break;
      case Type::FLOAT64: s.set(field, in.Take<double>()); break;
      case Type::TEXT: {
        std::string text = in.Text(255);
        s.set(field, capnp::Text::Reader(text.c_str(), text.size()));
        break;
      }
      case Type::DATA: {
        std::vector<uint8_t> bytes = in.Raw(in.Take<uint8_t>() < 32 ? in.Take<uint16_t>() : in.Take<uint8_t>());
        s.set(field, capnp::Data::Reader(bytes.data(), bytes.size()));
        break;
      }
      case Type::ENUM:
        s.set(field, capnp::DynamicEnum(type.asEnum(), in.Take<uint16_t>()));
        break;
      case Type::STRUCT:
        if (depth < 3) FillTyped(s.init(field).as<capnp::DynamicStruct>(), in, window_base, depth + 1);
        break;
      case Type::LIST: {
        if (depth >= 3) break;
        uint32_t size = in.Take<uint8_t>() % 12;
        auto list = s.init(field, size).as<capnp::DynamicList>();
        capnp::Type element = type.asList().getElementType();
        for (uint32_t i = 0; i < size; ++i) {
          if (element.isStruct()) FillTyped(list[i].as<capnp::DynamicStruct>(), in, window_base, depth + 1);
        }
        break;
      }
      default: break;  // Interfaces and AnyPointer: none in the session's Params.
    }
  }
}

// A call's Params message, as the client builds it but with hostile values: its words in Cap'n Proto's stream
// framing (segment table first). An ordinal the session does not have gets an empty struct.
kj::Array<capnp::word> TypedParams(uint32_t ordinal, Bytes& in, uint64_t window_base) {
  capnp::MallocMessageBuilder message;
  auto methods = capnp::Schema::from<Session>().getMethods();
  if (ordinal < methods.size()) {
    auto root = message.initRoot<capnp::DynamicStruct>(methods[ordinal].getParamType());
    FillTyped(root, in, window_base, 0);
  } else {
    message.getRoot<capnp::AnyPointer>().initAsAnyStruct(0, 0);
  }
  return capnp::messageToFlatArray(message);
}

// Mode 5: one batch of entries (an ordinal, a byte length, a flat Params message each), mostly of posted calls
// with typed hostile arguments; lengths and ordinals may lie and entries may be raw bytes.
std::vector<uint8_t> BatchCalls(Bytes& in, uint64_t window_base) {
  std::vector<uint8_t> calls;
  const std::vector<uint32_t>& posted = PostedOrdinals();
  const uint8_t shape = in.Take<uint8_t>();
  const int entries = 1 + shape % 24;
  const bool cut = shape >= 240;  // The batch ends inside its last entry.
  for (int i = 0; i < entries && in.n > 0; ++i) {
    uint8_t pick = in.Take<uint8_t>();
    uint32_t ordinal = pick < 216 ? posted[pick % posted.size()] : pick < 248 ? pick % 48 : in.Take<uint32_t>();
    std::vector<uint8_t> message;
    if (in.Take<uint8_t>() < 16) {
      message = in.Raw(in.Take<uint8_t>());  // Not a message at all, of any length (aligned or not).
    } else {
      auto words = TypedParams(ordinal, in, window_base);
      auto bytes = words.asBytes();
      message.assign(bytes.begin(), bytes.end());
    }
    uint32_t header[2] = {ordinal, static_cast<uint32_t>(message.size())};
    if (in.Take<uint8_t>() < 8) header[1] = in.Take<uint32_t>();  // A length that lies.
    const auto* h = reinterpret_cast<const uint8_t*>(header);
    calls.insert(calls.end(), h, h + sizeof(header));
    calls.insert(calls.end(), message.begin(), message.end());
  }
  if (cut && !calls.empty()) calls.resize(calls.size() - 1 - in.Take<uint8_t>() % calls.size());
  return calls;
}

void FuzzBatch(Session::Client s, Bytes& in) {
  ++fx->batches;
  std::vector<uint8_t> calls = BatchCalls(in, kCallsWindow);
  auto req = s.batchRequest();
  req.setCalls(kj::arrayPtr(reinterpret_cast<const kj::byte*>(calls.data()), calls.size()));
  req.send().wait(fx->io.waitScope);
  // A batch is posted: its failure surfaces at the next synchronising call, which must answer too.
  s.streamSynchronizeRequest().send().wait(fx->io.waitScope);
}

// Mode 6: a texture or surface object described at random, mostly over the session's own buffer (so that many
// descriptions are valid and the checks of the texels' extent are reached), then destroyed, or not, or twice, or
// a forged handle is.
void FuzzTexture(Session::Client s, Bytes& in) {
  ++fx->textures;
  if (fx->session_buffer == 0) {
    auto a = s.memAllocRequest();
    a.setBytes(4u << 20);
    auto r = a.send().wait(fx->io.waitScope);
    if (r.getStatus().getCode() != 0) return;
    fx->session_buffer = r.getAddress();
  }
  static constexpr uint32_t kFormats[] = {0x01, 0x02, 0x03, 0x08, 0x09, 0x0a, 0x10, 0x20, 0x0b, 0x0c, 0x0d};
  auto req = s.texObjectCreateRequest();
  uint8_t pick = in.Take<uint8_t>();
  req.setSurface(pick & 1);
  req.setResource(pick >> 6 == 3 ? in.Take<uint8_t>() : (pick >> 1) % 3);
  req.setDims(in.Take<uint8_t>() % 5);
  uint8_t f = in.Take<uint8_t>();
  req.setFormat(f < 224 ? kFormats[f % (sizeof(kFormats) / sizeof(kFormats[0]))] : in.Take<uint32_t>());
  uint8_t c = in.Take<uint8_t>();
  req.setChannels(c < 224 ? uint8_t{1} << (c % 3) : c);
  // Extents: small and plausible mostly, so pitches and sizes are checked against the buffer's end.
  auto extent = [&in] { uint8_t e = in.Take<uint8_t>(); return e < 200 ? uint32_t{e} % 65 : in.Take<uint32_t>(); };
  uint32_t width = extent(), height = extent(), depth = extent(), layers = extent() % 4;
  req.setWidth(width);
  req.setHeight(height);
  req.setDepth(depth);
  req.setLayers(layers);
  uint8_t a = in.Take<uint8_t>();
  uint64_t address = a < 160   ? fx->session_buffer + in.Take<uint16_t>() % (4u << 20)
                     : a < 192 ? fx->session_buffer + (4u << 20) - in.Take<uint8_t>()
                               : Number<uint64_t>(in, kCallsWindow);
  req.setAddress(address);
  uint8_t pitch_pick = in.Take<uint8_t>();
  uint64_t pitch = pitch_pick < 192 ? (uint64_t{width} * 16 + 31) / 32 * 32 : in.Take<uint64_t>();
  req.setPitch(pitch);
  req.setSlicePitch(in.Take<uint8_t>() < 192 ? pitch * height : in.Take<uint64_t>());
  req.setAddressModes(in.Take<uint8_t>() < 192 ? in.Take<uint8_t>() % 5 * 0x010101u : in.Take<uint32_t>());
  req.setFilter(in.Take<uint8_t>());
  req.setFlags(in.Take<uint8_t>() < 192 ? in.Take<uint8_t>() & 0xf : in.Take<uint32_t>());
  req.setBorder0(in.Take<float>());
  req.setBorder1(in.Take<float>());
  req.setBorder2(in.Take<float>());
  req.setBorder3(in.Take<float>());
  auto made = req.send().wait(fx->io.waitScope);
  uint64_t handle = made.getStatus().getCode() == 0 ? made.getHandle() : 0;
  if (handle != 0) ++fx->textures_made;
  uint8_t end = in.Take<uint8_t>();
  for (int i = 0; i < 1 + (end & 1); ++i) {  // Once, or twice: the second must be refused, not a double free.
    auto d = s.texObjectDestroyRequest();
    d.setHandle(end < 64 ? handle ^ (uint64_t{1} << (in.Take<uint8_t>() % 64)) : end < 96 ? in.Take<uint64_t>()
                                                                                           : handle);
    d.send().wait(fx->io.waitScope);
  }
  s.streamSynchronizeRequest().send().wait(fx->io.waitScope);
}

// A struct of fuzzed data words and pointers (texts, data, nested structs, lists of absurd claimed sizes).
void FillStruct(capnp::AnyStruct::Builder s, Bytes& in, int depth) {
  auto data = s.getDataSection();
  for (size_t i = 0; i < data.size(); ++i) data[i] = in.Take<uint8_t>();
  auto pointers = s.getPointerSection();
  for (size_t i = 0; i < pointers.size(); ++i) {
    switch (in.Take<uint8_t>() % 5) {
      case 0: break;
      case 1: pointers[i].setAs<capnp::Text>(in.Text(256)); break;
      case 2: {
        std::string bytes = in.Text(255);
        pointers[i].setAs<capnp::Data>(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
        break;
      }
      case 3:
        if (depth < 3) {
          FillStruct(pointers[i].initAsAnyStruct(in.Take<uint8_t>() % 8, in.Take<uint8_t>() % 4), in, depth + 1);
        }
        break;
      case 4: pointers[i].initAsAnyList(capnp::ElementSize::EIGHT_BYTES, in.Take<uint16_t>()); break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* exe = std::getenv("GPUPOOL_FUZZ_AGENT");
  if (!exe) Die("set GPUPOOL_FUZZ_AGENT to a gp-agent to fuzz");
  fx = new Fixture;
  if (const char* modes = std::getenv("GPUPOOL_WIRE_FUZZ_MODES")) {
    for (const char* m = modes; *m; ++m) {
      if (*m >= '0' && *m < '0' + kModes) fx->modes.push_back(static_cast<uint8_t>(*m - '0'));
    }
  }
  std::string dir = "/tmp/gpupool-wire-fuzz-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  fx->address = "unix:" + dir + "/agent.sock";
  fx->log_path = dir + "/agent.log";
  int out[2];
  if (pipe(out) != 0) Die("pipe");
  fx->agent = fork();
  if (fx->agent == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // A fuzzer that aborts takes its agent with it.
    dup2(out[1], 1);
    int log = open(fx->log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log >= 0) dup2(log, 2);
    // A sanitized agent: its own ASAN_OPTIONS (its workers exit without a leak check, which their seccomp filter
    // would fail), and a configuration without RLIMIT_AS (ASan's shadow memory is address space).
    if (const char* asan = std::getenv("GPUPOOL_FUZZ_AGENT_ASAN_OPTIONS")) setenv("ASAN_OPTIONS", asan, 1);
    const char* config = std::getenv("GPUPOOL_FUZZ_AGENT_CONFIG");
    execl(exe, exe, "--no-nvml", "--emu", "1", "--emu-memory", "1GiB", "--listen", fx->address.c_str(), "--lease-ttl",
          "1s", "--name", "fuzz", "--config", config ? config : "/dev/null", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  char line[512] = {};
  if (read(out[0], line, sizeof(line) - 1) <= 0 || !std::strstr(line, "listening on")) Die("the agent did not start");
  std::atexit([] {
    // Everything the fuzzing took must come back once the leases' TTL has passed: leases, memory, workers.
    if (fx->door_fd >= 0) close(fx->door_fd);
    fx->Drop();
    std::this_thread::sleep_for(std::chrono::seconds(3));
    try {
      auto d = fx->Connected().describeRequest();
      d.setWithLeases(true);
      auto response = d.send().wait(fx->io.waitScope);
      auto state = response.getState();
      if (state.getLeases().size() != 0) Die("leases left after their TTL");
      for (auto dev : state.getDevices()) {
        if (dev.getMemoryAllocated() != 0 || dev.getActivity().getMemoryUsed() != 0) Die("device memory left");
      }
    } catch (const kj::Exception& e) {
      Die(("the agent does not answer at the end: " + std::string(e.getDescription().cStr())).c_str());
    }
    std::string children = "/proc/" + std::to_string(fx->agent) + "/task/" + std::to_string(fx->agent) + "/children";
    FILE* f = std::fopen(children.c_str(), "r");
    char buf[64] = {};
    if (f && std::fgets(buf, sizeof(buf), f) && buf[0]) Die("session workers left after their leases ended");
    if (f) std::fclose(f);
    std::fprintf(stderr,
                 "wire_fuzz: agent alive, no lease, no memory, no worker left (%d sessions for calls; %d direct "
                 "sessions knocked at, %d entered; %d batches; %d texture objects described, %d made; %d typed "
                 "frames at doors)\n",
                 fx->sessions_opened, fx->doors_opened, fx->doors_entered, fx->batches, fx->textures,
                 fx->textures_made, fx->typed_frames);
    kill(fx->agent, SIGKILL);
    waitpid(fx->agent, nullptr, 0);
    // Nothing went wrong: the agent's log and socket go too (kept after a failure, for the post-mortem).
    std::string dir = fx->log_path.substr(0, fx->log_path.rfind('/'));
    unlink(fx->log_path.c_str());
    unlink(fx->address.substr(5).c_str());
    rmdir(dir.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  uint8_t pick = in.Take<uint8_t>();
  uint8_t mode = fx->modes.empty() ? pick % kModes : fx->modes[pick % fx->modes.size()];
  try {
    if (mode == 0) {
      // Raw bytes on a connection of their own.
      auto addr = fx->io.provider->getNetwork().parseAddress(fx->address).wait(fx->io.waitScope);
      auto stream = addr->connect().wait(fx->io.waitScope);
      Try(stream->write(in.p, in.n));
      stream->shutdownWrite();
      kj::byte sink[4096];
      Try(fx->io.provider->getTimer().timeoutAfter(20 * kj::MILLISECONDS, stream->tryRead(sink, 1, sizeof(sink))));
    } else if (mode == 1) {
      auto req = fx->Connected().typelessRequest(capnp::typeId<Agent>(), in.Take<uint8_t>() % 12, nullptr);
      FillStruct(req.initAsAnyStruct(in.Take<uint8_t>() % 8, in.Take<uint8_t>() % 6), in, 0);
      Try(req.send());
    } else if (mode == 2) {
      Agent::Client a = fx->Connected();
      switch (in.Take<uint8_t>() % 6) {
        case 0: {
          auto r = a.reserveRequest();
          r.initLease().setId(in.Text(64));
          r.getLease().setSecret(in.Text(64));
          r.initOwner().setUser(in.Text(64));
          auto slices = r.initSlices(in.Take<uint8_t>() % 40);
          for (auto s : slices) {
            s.setDevice(in.Take<uint32_t>() % 4);
            s.setMemoryBytes(in.Take<uint64_t>());
            s.setShareMicros(in.Take<uint32_t>());
          }
          Try(r.send());
          break;
        }
        case 1: {
          auto o = a.openSessionRequest();
          o.initLease().setId(in.Text(64));
          o.getLease().setSecret(in.Text(64));
          o.setDevice(in.Take<uint32_t>());
          o.setWindowBase(in.Take<uint64_t>());
          o.setWindowBytes(in.Take<uint64_t>());
          Try(o.send());
          break;
        }
        case 2: {
          auto d = a.describeRequest();
          d.setWithLeases(in.Take<uint8_t>() & 1);
          d.setHistorySeconds(in.Take<uint32_t>());
          Try(d.send());
          break;
        }
        case 3: {
          auto c = a.cordonRequest();  // Not an administrator's connection? This one is root's: it may.
          c.setDevice(in.Take<int32_t>());
          c.setCordoned(false);
          Try(c.send());
          auto r = a.revokeRequest();
          r.setLeaseId(in.Text(64));
          Try(r.send());
          break;
        }
        case 5: {
          // A session of a real lease at a hostile window: at and beyond the end of the user address space, wrapping
          // past 2^64, or anywhere GiB-aligned; the lease is released.
          if (fx->windows >= 300) break;  // Each may cost a worker process.
          std::string id = "window-" + std::to_string(++fx->windows), secret = "window-secret-0123456789";
          uint8_t pick = in.Take<uint8_t>();
          uint64_t base = pick < 128 ? (uint64_t{1} << 47) - (uint64_t{in.Take<uint8_t>()} << 30)
                                     : in.Take<uint64_t>() & ~((uint64_t{1} << 30) - 1);
          uint64_t window = in.Take<uint8_t>() < 224 ? (uint64_t{1} + in.Take<uint8_t>() % 4) << 30 : in.Take<uint64_t>();
          try {
            OpenLeaseSession(a, id, secret, 100000, base, window);
          } catch (const kj::Exception&) {
          }
          ReleaseLease(id, secret);
          break;
        }
        case 4: {
          auto h = a.helloRequest();
          h.setClientVersion(in.Take<uint32_t>());
          h.setToken(in.Text(255));
          Try(h.send());
          break;
        }
      }
    } else if (mode == 4) {
      FuzzFrames(in);
    } else if (mode == 7) {
      FuzzTypedFrames(in);
    } else if (mode == 5 || mode == 6) {
      KJ_IF_MAYBE(s, SessionFor()) {
        try {
          mode == 5 ? FuzzBatch(*s, in) : FuzzTexture(*s, in);
        } catch (const kj::Exception& e) {
          if (e.getType() == kj::Exception::Type::DISCONNECTED) {
            fx->session = nullptr;
            fx->session_buffer = 0;
          }
        }
      }
    } else {
      KJ_IF_MAYBE(s, SessionFor()) {
        auto req = s->typelessRequest(capnp::typeId<Session>(), in.Take<uint8_t>() % 72, nullptr);
        FillStruct(req.initAsAnyStruct(in.Take<uint8_t>() % 8, in.Take<uint8_t>() % 6), in, 0);
        try {
          req.send().wait(fx->io.waitScope);
        } catch (const kj::Exception& e) {
          if (e.getType() == kj::Exception::Type::DISCONNECTED) {
            fx->session = nullptr;
            fx->session_buffer = 0;
          }
        }
      }
    }
  } catch (const kj::Exception&) {
    fx->Drop();
  }
  CheckAlive();
  return 0;
}
