// cuGetExportTable: the private tables cudart fetches at init (shared/design/CUDA-NOTES.md, "Private export
// tables"). All six are answered here, in the client, because cudart calls their functions in-process and the
// integrity check hashes their addresses. Slots whose purpose is unknown hold a function that logs its table and
// slot (once, when GPUPOOL_LOG is set) and returns 0, so that a cudart that starts using one says so instead of
// jumping to NULL.
#include <fmt/ranges.h>
#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <set>
#include <string>

#include "api.h"
#include "forward_spec.h"
#include "core/log.h"
#include "driver.h"
#include "integrity.h"
#include "remote.h"
#include "shared_object.h"

namespace gpupool::interpose {
namespace {

using Uuid = std::array<uint8_t, 16>;

// Boilerplate by nature: a table of the driver's export table ids, each alike in shape.
constexpr Uuid kCudartInterfaceId = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                     0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
constexpr Uuid kCallbackHooksId = {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                   0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66};
constexpr Uuid kToolsTlsId = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                              0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
constexpr Uuid kContextStorageId = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                    0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
constexpr Uuid kContextChecksId = {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
                                   0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e};
constexpr Uuid kIntegrityCheckId = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                    0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};

constexpr Uuid kContextIdentityId = {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                                     0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2};
// Tools' module and function queries (6e163fbe; "ToolsModule" in public write-ups): cuFFT asks for it at plan time.
constexpr Uuid kToolsModuleId = {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e};

// Tables refused on purpose (CUDA_ERROR_INVALID_VALUE) without a warning, since their askers work on without them
// (scripts/export-table-survey.sh lists who asks for what):
// - f8cff951: every CUDA 13 cudart, before cuInit; public reports have cudart take a shortcut through its
//   initialisation when it is served, and gpupool answers the ordinary initialisation's calls.
// - da9151d3: NVRTC and nvJitLink 13, when they start; they compile and link without it.
constexpr Uuid kQuietlyRefused[] = {
    {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
    {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
};

// Table names for logs, indexed like kTables below.
enum TableIndex {
  kCudartInterface,
  kCallbackHooks,
  kToolsTls,
  kContextStorage,
  kContextChecks,
  kIntegrity,
  kContextIdentity,
  kToolsModule
};
constexpr const char* kTableNames[] = {"cudart_interface", "runtime_callback_hooks", "tools_tls",
                                       "context_local_storage", "context_checks", "integrity_check",
                                       "context_identity", "tools_module"};

// Who called: the library at the caller's return address, or the program.
std::string LibraryOf(const void* address) {
  std::string library = SharedLibraryAt(address);
  return library.empty() ? "the program" : library;
}

// --- Unknown slots. ---------------------------------------------------------------------------------------------

template <int kTable, int kSlot>
uintptr_t UnknownSlot() {
  static std::atomic<bool> reported{false};
  try {
    if (std::getenv("GPUPOOL_LOG") != nullptr && !reported.exchange(true)) {
      GP_WARN("interpose", "cudart called private export table {} slot {}, which gpupool does not implement",
              kTableNames[kTable], kSlot);
    }
    if (TraceEnabled()) TraceCall(kTableNames[kTable], fmt::format("slot {}", kSlot), CUDA_SUCCESS);
  } catch (...) {
  }
  return 0;
}

using UnknownFn = uintptr_t (*)();

// The tables are structs of typed pointers, laid out like the driver's arrays of 8-byte slots, so that they are
// constant-initialised: they exist before any constructor runs, whoever calls first.
template <typename Table, size_t kSlots>
constexpr bool HasSlots() {
  return sizeof(Table) == kSlots * sizeof(void*) && alignof(Table) == alignof(void*);
}

// --- cudart interface (6bd5fb6c). -------------------------------------------------------------------------------

CUresult GetModuleFromCubin(CUmodule* module, const void* fatbin_wrapper) {
  // TODO(feature): module loading; cudart 13 uses cuLibraryLoadData instead, so this is not reached yet.
  return ApiCall("cudart_interface.get_module_from_cubin", [&] { return CUDA_ERROR_NOT_SUPPORTED; });
}

CUresult GetPrimaryContext(CUcontext* pctx, CUdevice dev) {
  return ApiCall(
      "cudart_interface.get_primary_context",
      [&] {
        if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
        Driver& driver = Driver::Get();
        const DeviceInfo* device;
        if (CUresult r = driver.GetDevice(dev, &device); r != CUDA_SUCCESS) return r;
        // Like the driver: the handle without retaining or activating the context.
        *pctx = Driver::Handle(driver.PrimaryContext(dev));
        return CUDA_SUCCESS;
      },
      [&](CUresult r) { return fmt::format("dev={}", dev); });
}

CUresult GetModuleFromCubinExt1(CUmodule* module, const void* fatbin_wrapper, void*, void*, unsigned int) {
  return ApiCall("cudart_interface.get_module_from_cubin_ext1", [&] { return CUDA_ERROR_NOT_SUPPORTED; });
}

void CudartInterfaceSlot7(size_t) {
  TableCall<int>("cudart_interface.slot7", 0, [] { return 0; });
}

CUresult GetModuleFromCubinExt2(const void* fatbin_header, CUmodule* module, void*, void*, unsigned int) {
  return ApiCall("cudart_interface.get_module_from_cubin_ext2", [&] { return CUDA_ERROR_NOT_SUPPORTED; });
}

// The driver loads its PTX and NVVM compilers here; the agent does that for us.
CUresult LoadCompilers() {
  return ApiCall("cudart_interface.load_compilers", [] { return CUDA_SUCCESS; });
}

struct CudartInterfaceTable {
  size_t size;
  decltype(&GetModuleFromCubin) get_module_from_cubin;
  decltype(&GetPrimaryContext) get_primary_context;
  UnknownFn slot3, slot4, slot5;
  decltype(&GetModuleFromCubinExt1) get_module_from_cubin_ext1;
  decltype(&CudartInterfaceSlot7) slot7;
  decltype(&GetModuleFromCubinExt2) get_module_from_cubin_ext2;
  UnknownFn slot9, slot10, slot11;
  decltype(&LoadCompilers) load_compilers;
};
static_assert(HasSlots<CudartInterfaceTable, 13>());

constexpr CudartInterfaceTable kCudartInterfaceTable = {
    sizeof(CudartInterfaceTable),
    &GetModuleFromCubin,
    &GetPrimaryContext,
    &UnknownSlot<kCudartInterface, 3>,
    &UnknownSlot<kCudartInterface, 4>,
    &UnknownSlot<kCudartInterface, 5>,
    &GetModuleFromCubinExt1,
    &CudartInterfaceSlot7,
    &GetModuleFromCubinExt2,
    &UnknownSlot<kCudartInterface, 9>,
    &UnknownSlot<kCudartInterface, 10>,
    &UnknownSlot<kCudartInterface, 11>,
    &LoadCompilers,
};

// --- Runtime callback hooks (a094798c). -------------------------------------------------------------------------

// Buffers the runtime fills with its callback state. cudart 13.0 needs at least 523 and 14 bytes; give room.
alignas(64) uint8_t callback_buffer_1[4096];
alignas(64) uint8_t callback_buffer_2[256];

void GetCallbackBuffer1(void** buffer, size_t* size) {
  TableCall<int>("runtime_callback_hooks.get_buffer_1", 0, [&] {
    if (buffer != nullptr) *buffer = callback_buffer_1;
    if (size != nullptr) *size = sizeof(callback_buffer_1);
    return 0;
  });
}

void GetCallbackBuffer2(void** buffer, size_t* size) {
  TableCall<int>("runtime_callback_hooks.get_buffer_2", 0, [&] {
    if (buffer != nullptr) *buffer = callback_buffer_2;
    if (size != nullptr) *size = sizeof(callback_buffer_2);
    return 0;
  });
}

struct CallbackHooksTable {
  size_t size;  // cudart requires more than 0x30.
  UnknownFn slot1;
  decltype(&GetCallbackBuffer1) get_buffer_1;
  UnknownFn slot3, slot4, slot5;
  decltype(&GetCallbackBuffer2) get_buffer_2;
};
static_assert(HasSlots<CallbackHooksTable, 7>());

constexpr CallbackHooksTable kCallbackHooksTable = {
    sizeof(CallbackHooksTable),
    &UnknownSlot<kCallbackHooks, 1>,
    &GetCallbackBuffer1,
    &UnknownSlot<kCallbackHooks, 3>,
    &UnknownSlot<kCallbackHooks, 4>,
    &UnknownSlot<kCallbackHooks, 5>,
    &GetCallbackBuffer2,
};

// --- Tools TLS (42d85a81): the calling thread's current context in slot 2. -------------------------------------
// cuBLAS 13 (its static cudart) reads the thread's context here before each GEMM; the slot is publicly described
// as "get thread context" and answers what cuCtxGetCurrent answers.

CUresult ToolsThreadContext(CUcontext* ctx) {
  return ApiCall(
      "tools_tls.thread_context", [&] { return ctx == nullptr ? CUDA_ERROR_INVALID_VALUE : cuCtxGetCurrent(ctx); },
      [&](CUresult r) { return r == CUDA_SUCCESS ? fmt::format("-> {}", static_cast<void*>(*ctx)) : std::string(); });
}

struct ToolsTlsTable {
  size_t size;
  UnknownFn slot1;
  decltype(&ToolsThreadContext) thread_context;
  UnknownFn slot3;
};
static_assert(HasSlots<ToolsTlsTable, 4>());

constexpr ToolsTlsTable kToolsTlsTable = {
    sizeof(ToolsTlsTable),
    &UnknownSlot<kToolsTls, 1>,
    &ToolsThreadContext,
    &UnknownSlot<kToolsTls, 3>,
};

// --- Context-local storage (c693336e): no size slot. -------------------------------------------------------------

CUresult StoragePut(CUcontext ctx, void* key, void* value, ClsDestructor destructor) {
  return ApiCall(
      "context_local_storage.put", [&] { return Driver::Get().StoragePut(ctx, key, value, destructor); },
      [&](CUresult) { return fmt::format("ctx={}, key={}", static_cast<void*>(ctx), key); });
}

CUresult StorageDelete(CUcontext ctx, void* key) {
  return ApiCall(
      "context_local_storage.delete", [&] { return Driver::Get().StorageDelete(ctx, key); },
      [&](CUresult) { return fmt::format("ctx={}, key={}", static_cast<void*>(ctx), key); });
}

CUresult StorageGet(void** value, CUcontext ctx, void* key) {
  return ApiCall(
      "context_local_storage.get", [&] { return Driver::Get().StorageGet(ctx, key, value); },
      [&](CUresult) { return fmt::format("ctx={}, key={}", static_cast<void*>(ctx), key); });
}

struct ContextStorageTable {
  decltype(&StoragePut) put;
  decltype(&StorageDelete) remove;
  decltype(&StorageGet) get;
  UnknownFn slot3;
};
static_assert(HasSlots<ContextStorageTable, 4>());

constexpr ContextStorageTable kContextStorageTable = {
    &StoragePut,
    &StorageDelete,
    &StorageGet,
    &UnknownSlot<kContextStorage, 3>,
};

// --- Context checks (263e8860). ----------------------------------------------------------------------------------

CUresult ContextCheck(CUcontext ctx, uint32_t* result, const void** unused) {
  return ApiCall("context_checks.check", [&] {
    // The driver reports 0 here for every context it knows; cudart treats a missing write as failure.
    if (result != nullptr) *result = 0;
    return CUDA_SUCCESS;
  });
}

uint32_t ContextCheck3() {
  return TableCall<uint32_t>("context_checks.slot3", 0, [] { return 0u; });
}

struct ContextChecksTable {
  size_t size;
  UnknownFn slot1;
  decltype(&ContextCheck) check;
  decltype(&ContextCheck3) slot3;
};
static_assert(HasSlots<ContextChecksTable, 4>());

constexpr ContextChecksTable kContextChecksTable = {
    sizeof(ContextChecksTable),
    &UnknownSlot<kContextChecks, 1>,
    &ContextCheck,
    &ContextCheck3,
};

// --- Integrity check (d4082055). -------------------------------------------------------------------------------

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t (*out)[2]);

struct IntegrityTable {
  size_t size;
  decltype(&IntegrityCheck) check;
  UnknownFn slot2;
};
static_assert(HasSlots<IntegrityTable, 3>());

constexpr IntegrityTable kIntegrityTable = {
    sizeof(IntegrityTable),
    &IntegrityCheck,
    &UnknownSlot<kIntegrity, 2>,
};

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t (*out)[2]) {
  IntegrityInputs in;
  std::array<uint64_t, 2> words{};
  return ApiCall(
      "integrity_check.check",
      [&] {
        if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
        in.driver_version = static_cast<uint32_t>(kDriverVersion);
        in.version = version;
        in.pid = static_cast<uint32_t>(getpid());
        in.thread = static_cast<uint32_t>(static_cast<uintptr_t>(pthread_self()));
        // Exactly the pointers cudart got: the tables from cuGetExportTable, the function from slot 1.
        in.cudart_table = &kCudartInterfaceTable;
        in.integrity_table = &kIntegrityTable;
        in.check_function = reinterpret_cast<const void*>(kIntegrityTable.check);
        in.unix_seconds = unix_seconds;
        if (version % 10 > 1) {
          // Only the keyed answer hashes devices: it needs them.
          Driver& driver = Driver::Get();
          if (CUresult r = driver.CheckInitialized(); r != CUDA_SUCCESS) return r;
          for (const DeviceInfo& d : driver.devices()) {
            in.devices.push_back(IntegrityDevice{d.uuid, d.pci_domain, d.pci_bus, d.pci_device});
          }
        }
        words = IntegrityHash(in);
        (*out)[0] = words[0];
        (*out)[1] = words[1];
        return CUDA_SUCCESS;
      },
      [&](CUresult) {
        // Everything hashed, so that a rejected answer can be replayed (tests/interpose/integrity_test.cc).
        std::string devices;
        for (const IntegrityDevice& d : in.devices) {
          devices +=
              fmt::format(" [uuid={:02x} pci={}:{}:{}]", fmt::join(d.uuid, ""), d.pci_domain, d.pci_bus, d.pci_device);
        }
        return fmt::format(
            "version={}, unix_seconds={}, driver_version={}, pid={}, thread={:#x}, cudart_table={}, "
            "integrity_table={}, check_function={}, devices={}{} -> {:#018x} {:#018x}",
            version, unix_seconds, in.driver_version, in.pid, in.thread, in.cudart_table, in.integrity_table,
            in.check_function, in.devices.size(), devices, words[0], words[1]);
      });
}

// --- Context identity (21318c60): asked for by cuBLAS 13 before its first GEMM. ---------------------------------
// Public descriptions name slot 3 "get device" and slot 4 "get context number" (a context in, a value out), and
// slots 51 and 39 a stream's driver object and an identity read from it (cuBLAS calls them on each GEMM). The
// other slots are unknown: they refuse with CUDA_ERROR_NOT_SUPPORTED and name themselves once in the log.

using RefusedFn = CUresult (*)();

// A slot gpupool does not serve: CUDA_ERROR_NOT_SUPPORTED, and once per slot a warning naming the table, the slot
// and the library that called it (the return address's shared object), so that a library failing after it says why.
template <int kTable, int kSlot>
__attribute__((noinline)) CUresult RefusedSlot() {
  static std::atomic<bool> reported{false};
  try {
    if (!reported.exchange(true)) {
      GP_WARN("interpose", "{} called private export table {} slot {}, which gpupool does not implement: answering "
                           "CUDA_ERROR_NOT_SUPPORTED",
              LibraryOf(__builtin_return_address(0)), kTableNames[kTable], kSlot);
    }
  } catch (...) {
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult IdentityContext(CUcontext handle, Context** out) {
  if (handle == nullptr && cuCtxGetCurrent(&handle) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  *out = handle != nullptr ? Driver::Get().FromHandle(handle) : nullptr;
  return *out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult IdentityDevice(CUcontext handle, CUdevice* dev) {
  return ApiCall("context_identity.device", [&] {
    Context* ctx;
    if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = IdentityContext(handle, &ctx); r != CUDA_SUCCESS) return r;
    *dev = ctx->device;
    return CUDA_SUCCESS;
  });
}

CUresult IdentityNumber(CUcontext handle, unsigned long long* number) {
  return ApiCall("context_identity.number", [&] {
    Context* ctx;
    if (number == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = IdentityContext(handle, &ctx); r != CUDA_SUCCESS) return r;
    *number = ctx->id;
    return CUDA_SUCCESS;
  });
}

// `stream` resolved (*dev, *remote) as a stream of context `handle`: CUDA_ERROR_INVALID_HANDLE for another context's.
CUresult ContextStream(CUcontext handle, CUstream stream, int* dev, uint64_t* remote) {
  Context* ctx;
  if (CUresult r = IdentityContext(handle, &ctx); r != CUDA_SUCCESS) return r;
  if (CUresult r = Remote::Get().ResolveStream(stream, dev, remote, false); r != CUDA_SUCCESS) return r;
  return *dev == ctx->device ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// Slot 51: the driver's own object for a stream handle, `per_thread` saying whether the NULL stream means the
// per-thread default stream (cuBLAS passes its stream, CU_STREAM_LEGACY for the default one, or CU_STREAM_PER_THREAD
// with per_thread set). Public descriptions of this table (CU_ETID_ToolsContext) pair it with slot 39, which reads an
// identity back from that object. The interposer's own stream object is the handle it gives out: a created stream's
// handle, or CU_STREAM_LEGACY / CU_STREAM_PER_THREAD for the default streams (both the slice's stream 0 here).
CUresult IdentityStream(CUcontext handle, CUstream stream, CUstream* out, int per_thread) {
  return ApiCall(
      "context_identity.stream",
      [&] {
        if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
        if (stream == nullptr) stream = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
        int dev;
        uint64_t remote;
        if (CUresult r = ContextStream(handle, stream, &dev, &remote); r != CUDA_SUCCESS) return r;
        *out = stream;
        return CUDA_SUCCESS;
      },
      [&](CUresult r) {
        return fmt::format("ctx={}, stream={}, per_thread={}{}", static_cast<void*>(handle),
                           static_cast<void*>(stream), per_thread,
                           r == CUDA_SUCCESS ? fmt::format(" -> {}", static_cast<void*>(*out)) : std::string());
      });
}

// Slot 39: an identity for a stream object from slot 51, unique among the process's live streams as
// cuStreamGetId's: the slice's stream id, above the device ordinal (the default streams: 0 on each device).
CUresult IdentityStreamId(CUcontext handle, CUstream stream, unsigned long long* id) {
  return ApiCall(
      "context_identity.stream_id",
      [&] {
        if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
        int dev;
        uint64_t remote;
        if (CUresult r = ContextStream(handle, stream, &dev, &remote); r != CUDA_SUCCESS) return r;
        *id = (static_cast<unsigned long long>(dev) << 48) | remote;
        return CUDA_SUCCESS;
      },
      [&](CUresult r) {
        return fmt::format("ctx={}, stream={}{}", static_cast<void*>(handle), static_cast<void*>(stream),
                           r == CUDA_SUCCESS ? fmt::format(" -> {:#x}", *id) : std::string());
      });
}

// Refused slots kFirst, kFirst + 1, ... of table kTable.
template <int kTable, int kFirst, size_t... kSlots>
constexpr std::array<RefusedFn, sizeof...(kSlots)> RefusedSlots(std::index_sequence<kSlots...>) {
  return {&RefusedSlot<kTable, static_cast<int>(kSlots) + kFirst>...};
}

// The size a CUDA 13 driver serves: a size word and 94 slots.
struct ContextIdentityTable {
  size_t size;
  RefusedFn slot1, slot2;
  decltype(&IdentityDevice) device;
  decltype(&IdentityNumber) number;
  std::array<RefusedFn, 34> slots5_to_38;
  decltype(&IdentityStreamId) stream_id;  // Slot 39.
  std::array<RefusedFn, 11> slots40_to_50;
  decltype(&IdentityStream) stream;  // Slot 51.
  std::array<RefusedFn, 43> slots52_to_94;
};
static_assert(sizeof(ContextIdentityTable) == 95 * sizeof(void*));
static_assert(offsetof(ContextIdentityTable, stream_id) == 39 * sizeof(void*));
static_assert(offsetof(ContextIdentityTable, stream) == 51 * sizeof(void*));

const ContextIdentityTable kContextIdentityTable = {
    sizeof(ContextIdentityTable),
    &RefusedSlot<kContextIdentity, 1>,
    &RefusedSlot<kContextIdentity, 2>,
    &IdentityDevice,
    &IdentityNumber,
    RefusedSlots<kContextIdentity, 5>(std::make_index_sequence<34>()),
    &IdentityStreamId,
    RefusedSlots<kContextIdentity, 40>(std::make_index_sequence<11>()),
    &IdentityStream,
    RefusedSlots<kContextIdentity, 52>(std::make_index_sequence<43>()),
};

// --- Tools' module queries (6e163fbe): asked for by cuFFT at plan time, which calls slot 7 on each module it loaded
// (public write-ups: iterate the module's functions, handing the driver's own function records, whose fields the
// caller then reads, to a callback). gpupool's functions are not the driver's records, so no slot is served: each
// refuses, naming itself and the library that called it once. 80 slots: more than any driver has been seen to serve.

struct ToolsModuleTable {
  size_t size;
  std::array<RefusedFn, 80> slots;
};
const ToolsModuleTable kToolsModuleTable = {sizeof(ToolsModuleTable),
                                            RefusedSlots<kToolsModule, 1>(std::make_index_sequence<80>())};

struct ExportTable {
  const Uuid* id;
  const void* table;
};

constexpr ExportTable kTables[] = {
    {&kCudartInterfaceId, &kCudartInterfaceTable},
    {&kCallbackHooksId, &kCallbackHooksTable},
    {&kToolsTlsId, &kToolsTlsTable},
    {&kContextStorageId, &kContextStorageTable},
    {&kContextChecksId, &kContextChecksTable},
    {&kIntegrityCheckId, &kIntegrityTable},
    {&kContextIdentityId, &kContextIdentityTable},
    {&kToolsModuleId, &kToolsModuleTable},
};

std::string FormatUuid(const CUuuid* id) {
  if (id == nullptr) return "NULL";
  std::string s;
  for (int i = 0; i < 16; ++i) s += fmt::format("{:02x}", static_cast<uint8_t>(id->bytes[i]));
  return s;
}

// A table gpupool does not serve: said once per id at warn level, with the library that asked, since the library
// then fails in its own words (cuFFT: CUFFT_INTERNAL_ERROR) and only this line says why.
void WarnUnknownTable(const CUuuid* id, const void* caller) {
  for (const Uuid& quiet : kQuietlyRefused) {
    if (std::memcmp(quiet.data(), id->bytes, 16) == 0) return;
  }
  static std::mutex mu;
  static auto* reported = new std::set<std::string>();
  try {
    const std::string name = FormatUuid(id);
    std::lock_guard<std::mutex> lock(mu);
    if (reported->insert(name).second) {
      GP_WARN("interpose", "{} asked for private export table {}, which gpupool does not serve: answering "
                           "CUDA_ERROR_INVALID_VALUE",
              LibraryOf(caller), name);
    }
  } catch (...) {
  }
}

}  // namespace
}  // namespace gpupool::interpose

namespace gpupool::interpose {

CUresult GetExportTable(const void** ppExportTable, const CUuuid* pExportTableId, const void* caller) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < std::size(kTables); ++i) {
    if (std::memcmp(kTables[i].id->data(), pExportTableId->bytes, 16) == 0) {
      // Served to cuFFT only, which fails without it either way: another asker that copes without the table might
      // not cope with slots that all refuse.
      if (i == kToolsModule && SharedLibraryAt(caller).rfind("libcufft", 0) != 0) break;
      *ppExportTable = kTables[i].table;
      return CUDA_SUCCESS;
    }
  }
  *ppExportTable = nullptr;
  WarnUnknownTable(pExportTableId, caller);
  return CUDA_ERROR_INVALID_VALUE;  // What NVIDIA's driver answers for a table it lacks (an H100's, driver 580).
}

// The table's UUID, and the name of the table served.
std::string ExportTableTrace(const CUuuid* id, const void* served) {
  for (size_t i = 0; served != nullptr && i < std::size(kTables); ++i) {
    if (kTables[i].table == served) return fmt::format("{} = {}", FormatUuid(id), kTableNames[i]);
  }
  return FormatUuid(id);
}

}  // namespace gpupool::interpose

GP_EXPORT_TABLE_ENTRIES(GP_DEFINE_ENTRY)
