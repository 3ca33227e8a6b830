#include "devices.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "api.h"
#include "client/local_agent.h"
#include "client/request_flags.h"
#include "core/log.h"
#include "driver_newer.h"
#include "emu/device_attributes.h"
#include "fake_devices.h"
#include "gpupool/pool.h"

namespace gpupool::interpose {
namespace {

// Slices of a lease: handed over by gp-run (GPUPOOL_LEASE), allocated here from GPUPOOL_REQUEST, or from a private
// agent started for this process. Owns what must outlive the process's CUDA use: the pool connection, the lease
// (when we allocated it) and the private agent.
class RemoteDeviceProvider : public DeviceProvider {
 public:
  Result<std::vector<DeviceInfo>> ListDevices() override {
    std::string token;
    if (const char* env = std::getenv("GPUPOOL_LEASE"); env != nullptr && *env != 0) {
      token = env;
      source_ = "the lease from GPUPOOL_LEASE";
    } else {
      PoolOptions options;
      Request request;
      const char* spec = std::getenv("GPUPOOL_REQUEST");
      if (spec != nullptr) {
        source_ = fmt::format("GPUPOOL_REQUEST='{}'", spec);
        if (Status s = ParseRequest(spec, &request, &options); !s.ok()) return s;
      }
      // No pool configured at all (as gp-run decides): a private agent, sized to the request, as gp-run's is.
      bool private_agent = spec == nullptr;
      if (!private_agent && options.servers.empty()) {
        auto resolved = ResolveServers(options);
        private_agent = !resolved.ok() && resolved.status().code() == StatusCode::kUnavailable;
      }
      if (private_agent) {
        source_ = spec == nullptr ? "a private gp-agent" : source_ + " on a private gp-agent (no pool is configured)";
        std::string agent = FindAgent();
        if (agent.empty()) {
          return Status(StatusCode::kNotFound,
                        "no GPU attached: gp-agent not found beside libcuda.so.1; start the program with gp-run, "
                        "or set GPUPOOL_REQUEST");
        }
        auto started = LocalAgent::Start(agent, LocalAgent::Listen::kUnixSocket, request.count);
        if (!started.ok()) return Status(started.status().code(), "private gp-agent: " + started.status().message());
        agent_ = std::move(started).value();
        options.servers = {agent_->address()};
      }
      if (request.label.empty()) request.label = ProgramName();
      if (Status s = ValidateRequest(request); !s.ok()) return Status(s.code(), source_ + ": " + s.message());
      auto pool = Pool::Connect(options);
      if (!pool.ok()) return Status(pool.status().code(), source_ + ": " + pool.status().message());
      pool_.emplace(std::move(pool).value());
      auto lease = pool_->Allocate(request);
      if (!lease.ok()) return Status(lease.status().code(), source_ + ": " + lease.status().message());
      lease_.emplace(std::move(lease).value());
      token = lease_->Token();
    }
    auto opened = internal::RemoteSession::OpenLease(token);
    if (!opened.ok()) return Status(opened.status().code(), source_ + ": " + opened.status().message());
    sessions_ = std::move(opened).value();
    std::vector<DeviceInfo> devices;
    for (const auto& session : sessions_) {
      const internal::RemoteProps& p = session->props();
      // Boilerplate by nature: field by field from the session's device to the driver's.
      DeviceInfo d;
      d.name = p.name;
      d.total_memory = p.total_memory;
      std::copy(std::begin(p.uuid), std::end(p.uuid), d.uuid.begin());
      d.pci_domain = p.pci_domain;
      d.pci_bus = p.pci_bus;
      d.pci_device = p.pci_device;
      d.cc_major = p.cc_major;
      d.cc_minor = p.cc_minor;
      d.emulated = p.emulated;
      d.attributes = p.attributes.empty() ? FakeDeviceAttributes() : p.attributes;
      // Host memory is never addressable from a remote slice, whatever the GPU behind it can do.
      d.attributes[CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = 0;
      // Managed memory as on a device without concurrent managed access (managed.h): coherent at launches and
      // host faults, whatever the GPU behind it could do with a local host.
      d.attributes[CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1;
      d.attributes[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 0;
      d.attributes[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = 0;
      d.attributes[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = 0;
      d.attributes[CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST] = 0;
      d.attributes[CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = 1;
      // What gpupool itself offers on any slice, whatever the GPU behind it can do: virtual memory management (in
      // the slice's window), stream-ordered allocation and memory pools (client-side), no shareable memory handles.
      d.attributes[CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1;
      d.attributes[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1;
      // Stream memory operations: waits run on the slice's device, writes are ordered copies (stream.cc).
      d.attributes[CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1] = 1;
      d.attributes[CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1] = 1;
      d.attributes[CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1] = 1;
      d.attributes[CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS] = 1;
      d.attributes[CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR] = 1;
      // No remote (NIC) writes reach a slice, so a wait's flush of them (CU_STREAM_WAIT_VALUE_FLUSH) is always done.
      d.attributes[CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES] = 1;
      d.attributes[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = 0;
      d.attributes[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED] = 0;
      d.attributes[CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = 0;
      // Stream batch memory operations are gpupool's own (stream.cc), and they do no atomic reductions.
      d.attributes[kDeviceAttributeAtomicReductionSupported] = 0;
      devices.push_back(std::move(d));
    }
    return devices;
  }

  std::string NoDeviceHint() const override { return fmt::format("no GPU attached: {} has no slice", source_); }

  std::vector<std::unique_ptr<internal::RemoteSession>> TakeSessions() override { return std::move(sessions_); }

  // The lease from GPUPOOL_REQUEST. Not one on the private agent: that agent dies with this process (and its lease
  // with it), and may be gone already at exit, when the thread that started it has ended.
  Lease* OwnedLease() override { return lease_ && agent_ == nullptr ? &*lease_ : nullptr; }

 private:
  static std::string ProgramName() {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return "cuda program";
    buf[n] = '\0';
    std::string path(buf);
    return path.substr(path.rfind('/') + 1);
  }

  // gp-agent relative to this library: <dir>/../../../tools/gp-agent in the build tree (build/lib/gpupool/cuda),
  // <dir>/../../../bin/gp-agent in an installation (<prefix>/lib/gpupool/cuda).
  static std::string FindAgent() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&FindAgent), &info) == 0 || info.dli_fname == nullptr) return "";
    char real[PATH_MAX];
    if (realpath(info.dli_fname, real) == nullptr) return "";
    std::string dir(real);
    dir = dir.substr(0, dir.rfind('/'));
    for (const char* rel : {"/../../../tools/gp-agent", "/../../../bin/gp-agent"}) {
      std::string candidate = dir + rel;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return "";
  }

  // gp-run's request options, whitespace-separated: read as gp-run reads them (client/request_flags.h).
  static Status ParseRequest(const std::string& spec, Request* request, PoolOptions* options) {
    RequestFlags flags;
    Status s = ParseRequestFlags(spec, &flags);
    if (s.ok()) s = BuildRequest(flags, request, options);
    if (!s.ok()) return Status(s.code(), fmt::format("GPUPOOL_REQUEST='{}': {}", spec, s.message()));
    return s;
  }

  std::string source_;
  std::unique_ptr<LocalAgent> agent_;  // Declared first among owners: destroyed last.
  std::optional<Pool> pool_;
  std::optional<Lease> lease_;
  std::vector<std::unique_ptr<internal::RemoteSession>> sessions_;
};

// The lease ReleaseLeaseAtExit releases, and the process that allocated it. Published once by ReleaseAtExit.
std::atomic<Lease*> exit_lease{nullptr};
std::atomic<pid_t> exit_lease_pid{0};

// An ELF destructor of libcuda.so.1: exit() runs it from the dynamic linker's _dl_fini, after every atexit handler
// and every static destructor registered since the program started. That order is the point. cudart registers its
// teardown (cuLibraryUnload, cuDevicePrimaryCtxRelease, context-local storage) while the program's static
// constructors run, before it even loads this library; handlers run in reverse order of registration, so an atexit
// handler registered at cuInit, or a static object of this library, would run before that teardown, and before any
// exit handler the program registered before its first CUDA call, and pull the slices from under them. By
// _dl_fini all of them are done. So are this library's static destructors where cudart loaded it (after the program
// started), so this touches only what is never destroyed: the lease, its runtime and that runtime's thread belong to
// the provider, which the driver leaks, and KJ and our logger leak their own globals. With TLS agents, OpenSSL has
// run its own exit cleanup by then: the release still goes out on the connection the heartbeats keep open (OpenSSL
// 3.0: no invalid access under valgrind); one that needs a new handshake fails, with a warning, and the lease ends
// with its TTL.
//
// It never waits on the program's threads or on the interposer's locks: the lease has a runtime (a thread) of its
// own, and sessions still in use on other threads just learn that their lease ended. The release waits for the
// agents at most the call timeout (5 s), when an agent does not answer.
[[gnu::destructor]] void ReleaseLeaseAtExit() {
  Lease* lease = exit_lease.exchange(nullptr, std::memory_order_acq_rel);
  if (lease == nullptr) return;
  // A child forked after cuInit (that calls exit() rather than exec): the lease is its parent's, and the runtime
  // thread that would carry the release does not exist here.
  if (getpid() != exit_lease_pid.load(std::memory_order_relaxed)) return;
  try {
    std::string id = lease->id();
    if (Status s = lease->Release(); !s.ok()) {
      GP_WARN("interpose", "releasing lease {} at exit: {}", id, s.ToString());
    } else {
      GP_DEBUG("interpose", "lease {} released at exit", id);
    }
  } catch (...) {
    // Nothing may escape into the program's exit; the lease then ends with its TTL.
  }
}

}  // namespace

std::unique_ptr<DeviceProvider> MakeDeviceProviderFromEnvironment() {
#if GPUPOOL_TEST_SEAMS
  // A lease or a request to attach wins over the test seam's fake devices.
  if (std::getenv("GPUPOOL_LEASE") == nullptr && std::getenv("GPUPOOL_REQUEST") == nullptr) {
    if (auto fake = MakeFakeDeviceProvider()) return fake;
  }
#endif
  return std::make_unique<RemoteDeviceProvider>();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void ReleaseAtExit(Lease* lease) {
  exit_lease_pid.store(getpid(), std::memory_order_relaxed);
  exit_lease.store(lease, std::memory_order_release);
}

std::map<int, int> FakeDeviceAttributes() {
  return emu::DeviceAttributes(emu::PropertiesOfCapability(kFakeCcMajor, kFakeCcMinor));
}

std::string UuidString(const DeviceInfo& device) {
  const auto& u = device.uuid;
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                     u[15]);
}

std::vector<size_t> VisibleDevices(const char* value, const std::vector<DeviceInfo>& devices) {
  std::vector<size_t> visible;
  if (value == nullptr) {
    for (size_t i = 0; i < devices.size(); ++i) visible.push_back(i);
    return visible;
  }
  std::string_view rest = value;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view entry = Trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    std::optional<size_t> found;
    if (!entry.empty() && entry.front() >= '0' && entry.front() <= '9') {
      size_t index = 0;
      auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
      if (ec == std::errc() && end == entry.data() + entry.size() && index < devices.size()) found = index;
    } else if (entry.size() > 4 && entry.substr(0, 4) == "GPU-") {
      int matches = 0;
      for (size_t i = 0; i < devices.size(); ++i) {
        if (UuidString(devices[i]).compare(0, entry.size(), entry) == 0) {
          found = i;
          ++matches;
        }
      }
      if (matches != 1) found.reset();  // Ambiguous prefixes name no device, as with the driver.
    }
    if (!found || std::find(visible.begin(), visible.end(), *found) != visible.end()) break;
    visible.push_back(*found);
  }
  return visible;
}

}  // namespace gpupool::interpose
