// The specification of every driver entry point gpupool implements (STYLE.md point 10), one line each, grouped by
// API family: those answered in the client from its own state (GP_DEFINE_ENTRY's families, first), and those
// forwarded to the slices (GP_DEFINE_FORWARD's). Each family's .cc file holds the hand-written implementations its
// lines call, then expands its list, which generates the extern "C" functions: argument checks and tracing through
// ApiCall, no exception escaping. Every ABI variant (_v2, _ptds/_ptsz) is its own line, mapping onto one
// implementation; the per-thread-default-stream variants pass the same stream handle (the NULL stream is remote
// stream 0 of the current slice either way: the agent orders it against the slice's other streams). Entry points
// this file does not list answer CUDA_ERROR_NOT_SUPPORTED (proc_address.cc); gpupool's own two (cuGpupool*, for its
// Python package and its NVML) are written in device.cc.
//
// Columns of the forwarded families:
//           X(symbol, (prototype), implementation call, routing rule, what goes out / comes back / waits)
//   routing: "ptr" = by the window holding the device pointer(s); "stream" = by the stream handle's slice;
//            "ctx" = the current context's slice; "fn" = by the function's module, on the launching slice;
//            "client" = answered in the client, nothing sent.
//   waits:   "async" = sent without waiting (errors surface at the next synchronising call); "waits" = round
//            trip; "none" = no message.
#ifndef GPUPOOL_INTERPOSE_FORWARD_SPEC_H_
#define GPUPOOL_INTERPOSE_FORWARD_SPEC_H_

#include <string>

#include <fmt/format.h>

#include "api.h"

namespace gpupool::interpose {
// With fake devices (no slice attached) forwarded calls answer CUDA_ERROR_NOT_SUPPORTED; named once on stderr
// when GPUPOOL_LOG is set, like the unimplemented entry points.
CUresult CheckForwarded(const char* symbol, CUresult result) noexcept;
}  // namespace gpupool::interpose

#define GP_DEFINE_FORWARD(symbol, params, call, route, waits)                                       \
  extern "C" CUresult symbol params {                                                               \
    return ::gpupool::interpose::CheckForwarded(                                                    \
        #symbol, ::gpupool::interpose::ApiCall(                                                     \
                     #symbol, [&]() -> CUresult { return ::gpupool::interpose::call; },             \
                     [&](CUresult) { return std::string("[" route ", " waits "]"); }));             \
  }

// Entry points answered in the client from its own state (devices, contexts, error names, the driver's tables), one
// line each like the forwarded ones, with the trace they show in place of a route:
//   X(symbol, (prototype), implementation call, trace)
// `trace` renders the arguments (and, on success, the outputs) for GPUPOOL_TRACE: an expression of the parameters,
// of `r` (the call's CUresult) and of gpupool::interpose's names. An implementation that must know which code called
// the entry point (a library asking, not the program) takes `caller`, the entry point's return address.
#define GP_DEFINE_ENTRY(symbol, params, call, trace)                                                 \
  extern "C" CUresult symbol params {                                                                \
    [[maybe_unused]] const void* const caller = __builtin_return_address(0);                        \
    return ::gpupool::interpose::ApiCall(                                                            \
        #symbol, [&]() -> CUresult { return ::gpupool::interpose::call; },                          \
        [&]([[maybe_unused]] CUresult r) -> std::string {                                            \
          using namespace ::gpupool::interpose;                                                      \
          return trace;                                                                              \
        });                                                                                          \
  }

namespace gpupool::interpose {
// The arguments most entries' traces show.
inline std::string DevArg(CUdevice dev) { return fmt::format("dev={}", dev); }
inline std::string CtxArg(CUcontext ctx) { return fmt::format("ctx={}", static_cast<void*>(ctx)); }
// The trace of an entry that shows no arguments.
inline std::string NoArgsShown() { return {}; }
}  // namespace gpupool::interpose

// ---- device.cc: the device list cached at cuInit ------------------------------------------------------------------
// Boilerplate by nature: one row an entry point, here and in the families below, each alike in shape.
#define GP_DEVICE_ENTRIES(X)                                                                                      \
  X(cuInit, (unsigned int flags), Driver::Get().Init(flags), fmt::format("flags={}", flags))                     \
  X(cuDriverGetVersion, (int* version), DriverGetVersion(version),                                                \
    r == CUDA_SUCCESS ? fmt::format("-> {}", *version) : "")                                                      \
  X(cuDeviceGetCount, (int* count), DeviceGetCount(count), r == CUDA_SUCCESS ? fmt::format("-> {}", *count) : "") \
  X(cuDeviceGet, (CUdevice * device, int ordinal), DeviceGet(device, ordinal), fmt::format("ordinal={}", ordinal)) \
  X(cuDeviceGetName, (char* name, int len, CUdevice dev), DeviceGetName(name, len, dev), DevArg(dev))             \
  X(cuDeviceGetUuid, (CUuuid * uuid, CUdevice dev), DeviceGetUuid(uuid, dev), DevArg(dev))                        \
  X(cuDeviceGetUuid_v2, (CUuuid * uuid, CUdevice dev), DeviceGetUuid(uuid, dev), DevArg(dev))                     \
  X(cuDeviceTotalMem, (unsigned int* bytes, CUdevice dev), DeviceTotalMem(bytes, dev), DevArg(dev))               \
  X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev), DeviceTotalMem(bytes, dev),                              \
    r == CUDA_SUCCESS ? fmt::format("dev={} -> {}", dev, *bytes) : "")                                           \
  X(cuDeviceGetAttribute, (int* pi, CUdevice_attribute attrib, CUdevice dev),                                     \
    DeviceGetAttribute(pi, attrib, dev, caller),                                                                  \
    r == CUDA_SUCCESS ? fmt::format("attrib={}, dev={} -> {}", static_cast<int>(attrib), dev, *pi)                \
                      : fmt::format("attrib={}, dev={}", static_cast<int>(attrib), dev))                          \
  X(cuDeviceComputeCapability, (int* major, int* minor, CUdevice dev),                                            \
    DeviceComputeCapability(major, minor, dev, caller), DevArg(dev))                                              \
  X(cuDeviceGetProperties, (CUdevprop * prop, CUdevice dev), DeviceGetProperties(prop, dev), DevArg(dev))         \
  X(cuDeviceGetPCIBusId, (char* pciBusId, int len, CUdevice dev), DeviceGetPCIBusId(pciBusId, len, dev),          \
    DevArg(dev))                                                                                                  \
  X(cuDeviceGetByPCIBusId, (CUdevice * dev, const char* pciBusId), DeviceGetByPCIBusId(dev, pciBusId),            \
    fmt::format("{}", pciBusId != nullptr ? pciBusId : "NULL"))

// ---- context.cc: primary contexts, the context stack, limits, peers ----------------------------------------------
#define GP_CONTEXT_ENTRIES(X)                                                                                     \
  X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev), PrimaryRetain(pctx, dev), DevArg(dev))            \
  X(cuDevicePrimaryCtxRelease, (CUdevice dev), PrimaryRelease(dev), DevArg(dev))                                  \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), PrimaryRelease(dev), DevArg(dev))                               \
  X(cuDevicePrimaryCtxSetFlags, (CUdevice dev, unsigned int flags), PrimarySetFlags(dev, flags),                  \
    fmt::format("dev={}, flags={:#x}", dev, flags))                                                               \
  X(cuDevicePrimaryCtxSetFlags_v2, (CUdevice dev, unsigned int flags), PrimarySetFlags(dev, flags),               \
    fmt::format("dev={}, flags={:#x}", dev, flags))                                                               \
  X(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int* flags, int* active),                                 \
    PrimaryGetState(dev, flags, active), DevArg(dev))                                                             \
  X(cuDevicePrimaryCtxReset, (CUdevice dev), PrimaryReset(dev), DevArg(dev))                                      \
  X(cuDevicePrimaryCtxReset_v2, (CUdevice dev), PrimaryReset(dev), DevArg(dev))                                   \
  X(cuCtxGetCurrent, (CUcontext * pctx), GetCurrent(pctx),                                                        \
    r == CUDA_SUCCESS ? fmt::format("-> {}", static_cast<void*>(*pctx)) : "")                                     \
  X(cuCtxSetCurrent, (CUcontext ctx), SetCurrent(ctx), CtxArg(ctx))                                               \
  X(cuCtxPushCurrent, (CUcontext ctx), PushCurrent(ctx), CtxArg(ctx))                                             \
  X(cuCtxPushCurrent_v2, (CUcontext ctx), PushCurrent(ctx), CtxArg(ctx))                                          \
  X(cuCtxPopCurrent, (CUcontext * pctx), PopCurrent(pctx), NoArgsShown())                                         \
  X(cuCtxPopCurrent_v2, (CUcontext * pctx), PopCurrent(pctx), NoArgsShown())                                      \
  X(cuCtxGetDevice, (CUdevice * device), GetDevice(device, nullptr),                                              \
    r == CUDA_SUCCESS ? fmt::format("dev={}", *device) : CtxArg(nullptr))                                         \
  X(cuCtxGetDevice_v2, (CUdevice * device, CUcontext ctx), GetDevice(device, ctx),                                \
    r == CUDA_SUCCESS ? fmt::format("dev={}", *device) : CtxArg(ctx))                                             \
  X(cuCtxSynchronize, (void), Synchronize(nullptr), CtxArg(nullptr))                                              \
  X(cuCtxSynchronize_v2, (CUcontext ctx), Synchronize(ctx), CtxArg(ctx))                                          \
  X(cuCtxGetFlags, (unsigned int* flags), GetFlags(flags), NoArgsShown())                                         \
  X(cuCtxGetId, (CUcontext ctx, unsigned long long* ctx_id), GetId(ctx, ctx_id), CtxArg(ctx))                     \
  X(cuCtxGetApiVersion, (CUcontext ctx, unsigned int* version), GetApiVersion(ctx, version), CtxArg(ctx))         \
  /* Explicit contexts are the device's primary context (context.cc); their flags and affinity are not kept. */   \
  X(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev), CtxCreate(pctx, dev), NoArgsShown())    \
  X(cuCtxCreate_v3, (CUcontext * pctx, CUexecAffinityParam * params, int n, unsigned int flags, CUdevice dev),    \
    CtxCreate(pctx, dev), NoArgsShown())                                                                          \
  X(cuCtxCreate_v4, (CUcontext * pctx, CUctxCreateParams * params, unsigned int flags, CUdevice dev),             \
    CtxCreate(pctx, dev), NoArgsShown())                                                                          \
  X(cuCtxDestroy_v2, (CUcontext ctx), CtxDestroy(ctx), NoArgsShown())                                             \
  X(cuCtxGetLimit, (size_t * value, CUlimit limit), GetLimit(value, limit), NoArgsShown())                        \
  X(cuCtxSetLimit, (CUlimit limit, size_t value), SetLimit(limit, value), NoArgsShown())                          \
  X(cuCtxGetCacheConfig, (CUfunc_cache * config), GetCacheConfig(config), NoArgsShown())                          \
  X(cuCtxSetCacheConfig, (CUfunc_cache config), SetCacheConfig(config), NoArgsShown())                            \
  X(cuDeviceCanAccessPeer, (int* can, CUdevice dev, CUdevice peer), NoPeerBetween(can, dev, peer), NoArgsShown()) \
  X(cuDeviceGetP2PAttribute, (int* value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst),              \
    NoPeerBetween(value, src, dst), NoArgsShown())                                                                \
  X(cuCtxEnablePeerAccess, (CUcontext peer, unsigned int flags), PeerAccessUnsupported(), NoArgsShown())

// ---- errors.cc, module.cc, memory.cc, proc_address.cc, export_tables.cc: the other entries -----------------------
#define GP_ERROR_ENTRIES(X)                                                                                       \
  X(cuGetErrorName, (CUresult error, const char** pStr), ErrorName(error, pStr), NoArgsShown())                   \
  X(cuGetErrorString, (CUresult error, const char** pStr), ErrorString(error, pStr), NoArgsShown())
#define GP_MODULE_ENTRIES(X)                                                                                      \
  X(cuModuleGetLoadingMode, (CUmoduleLoadingMode * mode), ModuleLoadingMode(mode),                                \
    r == CUDA_SUCCESS ? fmt::format("-> {}", *mode == CU_MODULE_LAZY_LOADING ? "lazy" : "eager") : "")
// The 32-bit ABI of cuMemFree (before _v2), which old binaries still call.
#define GP_MEMORY_ENTRIES(X) X(cuMemFree, (CUdeviceptr_v1 p), MemFree(p), NoArgsShown())
#define GP_PROC_ADDRESS_ENTRIES(X)                                                                                \
  X(cuGetProcAddress, (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags),                        \
    GetProcAddress(symbol, pfn, cudaVersion, flags, nullptr), ProcAddressTrace(symbol, cudaVersion, flags, r))    \
  X(cuGetProcAddress_v2,                                                                                          \
    (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult* status),  \
    GetProcAddress(symbol, pfn, cudaVersion, flags, status), ProcAddressTrace(symbol, cudaVersion, flags, r))
// Served to the callers export_tables.cc names (cudart, cuFFT), by the calling library.
#define GP_EXPORT_TABLE_ENTRIES(X)                                                                                \
  X(cuGetExportTable, (const void** ppExportTable, const CUuuid* pExportTableId),                                 \
    GetExportTable(ppExportTable, pExportTableId, caller),                                                        \
    ExportTableTrace(pExportTableId, r == CUDA_SUCCESS ? *ppExportTable : nullptr))

// ---- memory.cc -----------------------------------------------------------------------------------------------
#define GP_MEMORY_FORWARDS(X)                                                                                     \
  X(cuMemAlloc_v2, (CUdeviceptr * p, size_t n), MemAlloc(p, n), "ctx", "out: size; back: address; waits")        \
  X(cuMemAllocPitch_v2, (CUdeviceptr * p, size_t* pitch, size_t w, size_t h, unsigned int e),                     \
    MemAllocPitch(p, pitch, w, h, e), "ctx", "rows padded to 256 bytes; waits")                                   \
  X(cuMemFree_v2, (CUdeviceptr p), MemFree(p), "ptr", "out: address; async")                                      \
  X(cuMemGetInfo_v2, (size_t * free_bytes, size_t* total), MemGetInfo(free_bytes, total), "ctx", "waits")         \
  X(cuMemGetAddressRange_v2, (CUdeviceptr * base, size_t* size, CUdeviceptr p), MemGetAddressRange(base, size, p), \
    "client", "allocation table; none")                                                                           \
  X(cuPointerGetAttribute, (void* data, CUpointer_attribute a, CUdeviceptr p), PointerGetAttribute(data, a, p),   \
    "client", "none")                                                                                             \
  X(cuPointerGetAttributes, (unsigned int n, CUpointer_attribute* a, void** data, CUdeviceptr p),                 \
    PointerGetAttributes(n, a, data, p), "client", "none")                                                        \
  X(cuMemAllocHost, (void** p, unsigned int n), MemHostAlloc(p, n, 0), "client", "malloc; none")                  \
  X(cuMemAllocHost_v2, (void** p, size_t n), MemHostAlloc(p, n, 0), "client", "malloc; none")                     \
  X(cuMemHostAlloc, (void** p, size_t n, unsigned int f), MemHostAlloc(p, n, f), "client", "malloc; none")        \
  X(cuMemFreeHost, (void* p), MemFreeHost(p), "client", "free; none")                                             \
  X(cuMemHostRegister, (void* p, size_t n, unsigned int f), MemHostRegister(p, n, f), "client", "none")           \
  X(cuMemHostRegister_v2, (void* p, size_t n, unsigned int f), MemHostRegister(p, n, f), "client", "none")        \
  X(cuMemHostUnregister, (void* p), MemHostUnregister(p), "client", "none")                                       \
  X(cuMemHostGetDevicePointer_v2, (CUdeviceptr * d, void* p, unsigned int f), MemHostGetDevicePointer(d, p, f),   \
    "client", "not supported: host memory is not addressable from a remote slice")                                \
  X(cuMemHostGetFlags, (unsigned int* f, void* p), MemHostGetFlags(f, p), "client", "none")                       \
  /* Copies: each side routes by pointer (window -> that slice, else host); two slices: staged via the client. */ \
  X(cuMemcpyHtoD_v2, (CUdeviceptr d, const void* s, size_t n), CopyHtoD(d, s, n, nullptr), "ptr",                 \
    "out: bytes (captured before return); async")                                                                 \
  X(cuMemcpyHtoD_v2_ptds, (CUdeviceptr d, const void* s, size_t n), CopyHtoD(d, s, n, nullptr), "ptr",            \
    "out: bytes; async")                                                                                          \
  X(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void* s, size_t n, CUstream st), CopyHtoD(d, s, n, st),           \
    "ptr+stream", "out: bytes; async")                                                                            \
  X(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr d, const void* s, size_t n, CUstream st), CopyHtoD(d, s, n, st),      \
    "ptr+stream", "out: bytes; async")                                                                            \
  X(cuMemcpyDtoH_v2, (void* d, CUdeviceptr s, size_t n), CopyDtoH(d, s, n, nullptr), "ptr", "back: bytes; waits") \
  X(cuMemcpyDtoH_v2_ptds, (void* d, CUdeviceptr s, size_t n), CopyDtoH(d, s, n, nullptr), "ptr",                  \
    "back: bytes; waits")                                                                                         \
  X(cuMemcpyDtoHAsync_v2, (void* d, CUdeviceptr s, size_t n, CUstream st), CopyDtoH(d, s, n, st), "ptr+stream",   \
    "back: bytes; waits (the host buffer is filled on return)")                                                   \
  X(cuMemcpyDtoHAsync_v2_ptsz, (void* d, CUdeviceptr s, size_t n, CUstream st), CopyDtoH(d, s, n, st),            \
    "ptr+stream", "back: bytes; waits")                                                                           \
  X(cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), CopyDtoD(d, s, n, nullptr), "ptr",                 \
    "async on one slice; across slices waits (staged)")                                                           \
  X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), CopyDtoD(d, s, n, nullptr), "ptr",            \
    "async on one slice; staged across slices")                                                                   \
  X(cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), CopyDtoD(d, s, n, st),           \
    "ptr+stream", "async on one slice; staged across slices")                                                     \
  X(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), CopyDtoD(d, s, n, st),      \
    "ptr+stream", "async on one slice; staged across slices")                                                     \
  X(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), CopyAny(d, s, n, nullptr), "ptr", "unified addressing")   \
  X(cuMemcpy_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), CopyAny(d, s, n, nullptr), "ptr", "unified")         \
  X(cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), CopyAny(d, s, n, st), "ptr+stream",     \
    "unified")                                                                                                    \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), CopyAny(d, s, n, st),              \
    "ptr+stream", "unified")                                                                                      \
  X(cuMemcpyPeer, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n), CopyDtoD(d, s, n, nullptr), \
    "ptr", "staged through the client across slices")                                                             \
  X(cuMemcpyPeer_ptds, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n),                      \
    CopyDtoD(d, s, n, nullptr), "ptr", "staged")                                                                  \
  X(cuMemcpyPeerAsync, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st),         \
    CopyDtoD(d, s, n, st), "ptr+stream", "staged")                                                                \
  X(cuMemcpyPeerAsync_ptsz, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st),    \
    CopyDtoD(d, s, n, st), "ptr+stream", "staged")                                                                \
  X(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* c), Copy2D(c, nullptr), "ptr", "row copies (one when contiguous)")       \
  X(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D* c), Copy2D(c, nullptr), "ptr", "row copies")                        \
  X(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* c), Copy2D(c, nullptr), "ptr", "row copies")                    \
  X(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D* c), Copy2D(c, nullptr), "ptr", "row copies")               \
  X(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* c, CUstream st), Copy2D(c, st), "ptr+stream", "row copies")         \
  X(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D* c, CUstream st), Copy2D(c, st), "ptr+stream", "row copies")    \
  X(cuMemcpy3D_v2, (const CUDA_MEMCPY3D* c), Copy3D(c, nullptr), "ptr", "row copies (one when contiguous)")       \
  X(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D* c), Copy3D(c, nullptr), "ptr", "row copies")                        \
  X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* c, CUstream st), Copy3D(c, st), "ptr+stream", "row copies")         \
  X(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D* c, CUstream st), Copy3D(c, st), "ptr+stream", "row copies")    \
  X(cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), Memset2D(d, n, v, 1, n, 1, nullptr), "ptr", "async") \
  X(cuMemsetD8_v2_ptds, (CUdeviceptr d, unsigned char v, size_t n), Memset2D(d, n, v, 1, n, 1, nullptr), "ptr",  \
    "async")                                                                                                      \
  X(cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n), Memset2D(d, 2 * n, v, 2, n, 1, nullptr), "ptr",  \
    "async")                                                                                                      \
  X(cuMemsetD16_v2_ptds, (CUdeviceptr d, unsigned short v, size_t n), Memset2D(d, 2 * n, v, 2, n, 1, nullptr),    \
    "ptr", "async")                                                                                               \
  X(cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n), Memset2D(d, 4 * n, v, 4, n, 1, nullptr), "ptr",    \
    "async")                                                                                                      \
  X(cuMemsetD32_v2_ptds, (CUdeviceptr d, unsigned int v, size_t n), Memset2D(d, 4 * n, v, 4, n, 1, nullptr),      \
    "ptr", "async")                                                                                               \
  X(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream st), Memset2D(d, n, v, 1, n, 1, st),     \
    "ptr+stream", "async")                                                                                        \
  X(cuMemsetD8Async_ptsz, (CUdeviceptr d, unsigned char v, size_t n, CUstream st), Memset2D(d, n, v, 1, n, 1, st),\
    "ptr+stream", "async")                                                                                        \
  X(cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream st),                                   \
    Memset2D(d, 2 * n, v, 2, n, 1, st), "ptr+stream", "async")                                                    \
  X(cuMemsetD16Async_ptsz, (CUdeviceptr d, unsigned short v, size_t n, CUstream st),                              \
    Memset2D(d, 2 * n, v, 2, n, 1, st), "ptr+stream", "async")                                                    \
  X(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream st), Memset2D(d, 4 * n, v, 4, n, 1, st), \
    "ptr+stream", "async")                                                                                        \
  X(cuMemsetD32Async_ptsz, (CUdeviceptr d, unsigned int v, size_t n, CUstream st),                                \
    Memset2D(d, 4 * n, v, 4, n, 1, st), "ptr+stream", "async")                                                    \
  X(cuMemsetD2D8_v2, (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h),                              \
    Memset2D(d, p, v, 1, w, h, nullptr), "ptr", "one memset per row; async")                                      \
  X(cuMemsetD2D8_v2_ptds, (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h),                         \
    Memset2D(d, p, v, 1, w, h, nullptr), "ptr", "per row; async")                                                 \
  X(cuMemsetD2D16_v2, (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h),                            \
    Memset2D(d, p, v, 2, w, h, nullptr), "ptr", "per row; async")                                                 \
  X(cuMemsetD2D16_v2_ptds, (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h),                       \
    Memset2D(d, p, v, 2, w, h, nullptr), "ptr", "per row; async")                                                 \
  X(cuMemsetD2D32_v2, (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h),                              \
    Memset2D(d, p, v, 4, w, h, nullptr), "ptr", "per row; async")                                                 \
  X(cuMemsetD2D32_v2_ptds, (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h),                         \
    Memset2D(d, p, v, 4, w, h, nullptr), "ptr", "per row; async")                                                 \
  X(cuMemsetD2D8Async, (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st),               \
    Memset2D(d, p, v, 1, w, h, st), "ptr+stream", "per row; async")                                               \
  X(cuMemsetD2D8Async_ptsz, (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st),          \
    Memset2D(d, p, v, 1, w, h, st), "ptr+stream", "per row; async")                                               \
  X(cuMemsetD2D16Async, (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream st),             \
    Memset2D(d, p, v, 2, w, h, st), "ptr+stream", "per row; async")                                               \
  X(cuMemsetD2D16Async_ptsz, (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream st),        \
    Memset2D(d, p, v, 2, w, h, st), "ptr+stream", "per row; async")                                               \
  X(cuMemsetD2D32Async, (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream st),               \
    Memset2D(d, p, v, 4, w, h, st), "ptr+stream", "per row; async")                                               \
  X(cuMemsetD2D32Async_ptsz, (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream st),          \
    Memset2D(d, p, v, 4, w, h, st), "ptr+stream", "per row; async")

// ---- managed.cc -------------------------------------------------------------------------------------------------
// Managed memory: one address valid on the host and on the allocation's slice, kept coherent by the client as CUDA
// specifies for devices without concurrent managed access (managed.h).
#define GP_MANAGED_FORWARDS(X)                                                                                    \
  X(cuMemAllocManaged, (CUdeviceptr * p, size_t n, unsigned int f), MemAllocManaged(p, n, f), "ctx",              \
    "device memory of the slice, host pages at the same address; waits")                                          \
  X(cuStreamAttachMemAsync, (CUstream s, CUdeviceptr p, size_t n, unsigned int f), StreamAttachMem(s, p, n, f),   \
    "stream", "which kernels may use it; none")                                                                   \
  X(cuStreamAttachMemAsync_ptsz, (CUstream s, CUdeviceptr p, size_t n, unsigned int f),                           \
    StreamAttachMem(s, p, n, f), "stream", "none")                                                                \
  X(cuMemPrefetchAsync, (CUdeviceptr p, size_t n, CUdevice d, CUstream s), MemPrefetchTo(p, n, d, s), \
    "ptr+stream", "host: fetched now; device: the host's writes sent")                                            \
  X(cuMemPrefetchAsync_ptsz, (CUdeviceptr p, size_t n, CUdevice d, CUstream s),                                   \
    MemPrefetchTo(p, n, d, s), "ptr+stream", "as cuMemPrefetchAsync")                               \
  X(cuMemPrefetchAsync_v2, (CUdeviceptr p, size_t n, CUmemLocation l, unsigned int f, CUstream s),                \
    MemPrefetch(p, n, l, f, s), "ptr+stream", "as cuMemPrefetchAsync")           \
  X(cuMemPrefetchAsync_v2_ptsz, (CUdeviceptr p, size_t n, CUmemLocation l, unsigned int f, CUstream s),           \
    MemPrefetch(p, n, l, f, s), "ptr+stream", "as cuMemPrefetchAsync")           \
  X(cuMemAdvise, (CUdeviceptr p, size_t n, CUmem_advise a, CUdevice d), MemAdviseFor(p, n, a, d),    \
    "client", "recorded for cuMemRangeGetAttribute; none")                                                        \
  X(cuMemAdvise_v2, (CUdeviceptr p, size_t n, CUmem_advise a, CUmemLocation l), MemAdvise(p, n, a, l), "client",  \
    "recorded; none")                                                                                             \
  X(cuMemRangeGetAttribute, (void* d, size_t b, CUmem_range_attribute a, CUdeviceptr p, size_t n),                \
    MemRangeGetAttribute(d, b, a, p, n), "client", "none")                                                        \
  X(cuMemRangeGetAttributes, (void** d, size_t* b, CUmem_range_attribute* a, size_t k, CUdeviceptr p, size_t n),  \
    MemRangeGetAttributes(d, b, a, k, p, n), "client", "none")

// ---- vmm.cc --------------------------------------------------------------------------------------------------
#define GP_VMM_FORWARDS(X)                                                                                        \
  X(cuMemAddressReserve, (CUdeviceptr * p, size_t n, size_t align, CUdeviceptr hint, unsigned long long f),       \
    MemAddressReserve(p, n, align, hint, f), "ctx", "in the current slice's window; waits")                       \
  X(cuMemAddressFree, (CUdeviceptr p, size_t n), MemAddressFree(p, n), "ptr", "async")                            \
  X(cuMemCreate, (CUmemGenericAllocationHandle * h, size_t n, const CUmemAllocationProp* prop,                    \
                  unsigned long long f),                                                                          \
    MemCreate(h, n, prop, f), "prop's device", "counted against the slice; waits")                                \
  X(cuMemRelease, (CUmemGenericAllocationHandle h), MemRelease(h), "handle", "async; freed when unmapped")        \
  X(cuMemMap, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f),        \
    MemMap(p, n, off, h, f), "handle", "same slice as the reservation; waits")                                    \
  X(cuMemUnmap, (CUdeviceptr p, size_t n), MemUnmap(p, n), "ptr", "whole mappings; async")                        \
  X(cuMemSetAccess, (CUdeviceptr p, size_t n, const CUmemAccessDesc* d, size_t count), MemSetAccess(p, n, d, count), \
    "client", "read-write for the owning slice; none")                                                            \
  X(cuMemGetAccess, (unsigned long long* f, const CUmemLocation* l, CUdeviceptr p), MemGetAccess(f, l, p),        \
    "client", "none")                                                                                             \
  X(cuMemGetAllocationGranularity, (size_t * g, const CUmemAllocationProp* prop,                                  \
                                    CUmemAllocationGranularity_flags o),                                          \
    MemGetAllocationGranularity(g, prop, o), "client", "2 MiB; none")                                             \
  X(cuMemGetAllocationPropertiesFromHandle, (CUmemAllocationProp * prop, CUmemGenericAllocationHandle h),         \
    MemGetAllocationPropertiesFromHandle(prop, h), "client", "none")                                              \
  X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle * h, void* p), MemRetainAllocationHandle(h, p),    \
    "client", "none")                                                                                             \
  X(cuMemExportToShareableHandle, (void* s, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,          \
                                   unsigned long long f),                                                         \
    MemExportToShareableHandle(s, h, t, f), "client", "refused: not supported")                                   \
  X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle * h, void* s, CUmemAllocationHandleType t),     \
    MemImportFromShareableHandle(h, s, t), "client", "refused: not supported")

// ---- module.cc -----------------------------------------------------------------------------------------------
#define GP_MODULE_FORWARDS(X)                                                                                     \
  X(cuLibraryLoadData, (CUlibrary * l, const void* code, CUjit_option* jo, void** jv, unsigned int nj,            \
                        CUlibraryOption* lo, void** lv, unsigned int nl),                                         \
    LibraryLoadData(l, code), "client", "image copied now; loaded on a slice at first use")                       \
  X(cuLibraryLoadFromFile, (CUlibrary * l, const char* path, CUjit_option* jo, void** jv, unsigned int nj,        \
                            CUlibraryOption* lo, void** lv, unsigned int nl),                                     \
    LibraryLoadFromFile(l, path), "client", "file read now; loaded at first use")                                 \
  X(cuLibraryUnload, (CUlibrary l), ModuleUnload(reinterpret_cast<CUmodule>(l)), "client", "unload: async")       \
  X(cuLibraryGetKernel, (CUkernel * k, CUlibrary l, const char* name),                                            \
    GetFunction(reinterpret_cast<CUfunction*>(k), reinterpret_cast<CUmodule>(l), name, false), "client",          \
    "lazy: resolved on the launching slice")                                                                      \
  X(cuLibraryGetModule, (CUmodule * m, CUlibrary l), LibraryGetModule(m, l), "client", "none")                    \
  X(cuLibraryGetGlobal, (CUdeviceptr * d, size_t* n, CUlibrary l, const char* name),                              \
    GetGlobal(d, n, reinterpret_cast<CUmodule>(l), name), "ctx", "waits")                                         \
  X(cuLibraryGetManaged, (CUdeviceptr * d, size_t* n, CUlibrary l, const char* name),                             \
    LibraryGetManaged(d, n, l, name), "ctx", "a __managed__ variable: its pages managed on the slice; waits")       \
  X(cuKernelGetFunction, (CUfunction * f, CUkernel k), KernelGetFunction(f, k), "client", "none")                 \
  X(cuKernelGetAttribute, (int* v, CUfunction_attribute a, CUkernel k, CUdevice dev),                             \
    FuncGetAttribute(v, a, reinterpret_cast<CUfunction>(k), dev), "device", "waits once per slice")               \
  X(cuKernelSetAttribute, (CUfunction_attribute a, int v, CUkernel k, CUdevice dev),                              \
    FuncSetAttribute(reinterpret_cast<CUfunction>(k), a, v, dev), "device", "kept; checked at launch")            \
  X(cuKernelSetCacheConfig, (CUkernel k, CUfunc_cache c, CUdevice dev),                                           \
    FuncAccept(reinterpret_cast<CUfunction>(k)), "client", "accepted")                                            \
  X(cuKernelGetName, (const char** name, CUkernel k), FuncGetName(name, reinterpret_cast<CUfunction>(k)),         \
    "client", "none")                                                                                             \
  X(cuKernelGetParamInfo, (CUkernel k, size_t i, size_t* off, size_t* size),                                      \
    FuncGetParamInfo(reinterpret_cast<CUfunction>(k), i, off, size), "ctx", "layout; waits once per slice")       \
  X(cuKernelGetParamCount, (CUkernel k, size_t* n), FuncGetParamCount(reinterpret_cast<CUfunction>(k), n), "ctx", \
    "CUDA 13.2; layout; waits once per slice")                                                                    \
  X(cuModuleLoad, (CUmodule * m, const char* path), ModuleLoadFile(m, path), "ctx", "file read; waits")           \
  X(cuModuleLoadData, (CUmodule * m, const void* image), ModuleLoadData(m, image), "ctx", "image; waits")         \
  X(cuModuleLoadDataEx, (CUmodule * m, const void* image, unsigned int n, CUjit_option* o, void** v),             \
    ModuleLoadData(m, image), "ctx", "image; JIT options ignored; waits")                                         \
  X(cuModuleLoadFatBinary, (CUmodule * m, const void* image), ModuleLoadData(m, image), "ctx", "image; waits")    \
  X(cuModuleUnload, (CUmodule m), ModuleUnload(m), "client", "async on every slice where loaded")                 \
  X(cuModuleGetFunction, (CUfunction * f, CUmodule m, const char* name), GetFunction(f, m, name, true), "ctx",    \
    "name; back: handle, layout; waits")                                                                          \
  X(cuModuleGetGlobal_v2, (CUdeviceptr * d, size_t* n, CUmodule m, const char* name), GetGlobal(d, n, m, name),   \
    "ctx", "waits")                                                                                               \
  X(cuFuncGetAttribute, (int* v, CUfunction_attribute a, CUfunction f), FuncGetAttribute(v, a, f, -1), "ctx",     \
    "from the remote function info")                                                                              \
  X(cuFuncSetAttribute, (CUfunction f, CUfunction_attribute a, int v), FuncSetAttribute(f, a, v, -1), "ctx",     \
    "kept; checked at launch")                                                                                    \
  X(cuFuncSetCacheConfig, (CUfunction f, CUfunc_cache c), FuncAccept(f), "client", "accepted")                    \
  X(cuFuncGetName, (const char** name, CUfunction f), FuncGetName(name, f), "client", "none")                     \
  X(cuFuncLoad, (CUfunction f), FuncLoad(f), "fn", "loads the module on the current slice now; waits")            \
  X(cuFuncIsLoaded, (CUfunctionLoadingState * s, CUfunction f), FuncIsLoaded(s, f), "client", "none")            \
  X(cuFuncGetModule, (CUmodule * m, CUfunction f), FuncGetModule(m, f), "client", "none")                         \
  X(cuFuncGetParamInfo, (CUfunction f, size_t i, size_t* off, size_t* size), FuncGetParamInfo(f, i, off, size),   \
    "ctx", "layout")                                                                                              \
  X(cuFuncGetParamCount, (CUfunction f, size_t* n), FuncGetParamCount(f, n), "ctx", "CUDA 13.2; layout")          \
  X(cuLinkCreate, (unsigned int n, CUjit_option* o, void** v, CUlinkState* s), LinkCreate(n, o, v, s), "client",  \
    "none")                                                                                                       \
  X(cuLinkCreate_v2, (unsigned int n, CUjit_option* o, void** v, CUlinkState* s), LinkCreate(n, o, v, s),         \
    "client", "none")                                                                                             \
  X(cuLinkAddData, (CUlinkState s, CUjitInputType t, void* d, size_t n, const char* name, unsigned int no,        \
                    CUjit_option* o, void** v),                                                                   \
    LinkAddData(s, t, d, n), "client", "copied")                                                                  \
  X(cuLinkAddData_v2, (CUlinkState s, CUjitInputType t, void* d, size_t n, const char* name, unsigned int no,     \
                       CUjit_option* o, void** v),                                                                \
    LinkAddData(s, t, d, n), "client", "copied")                                                                  \
  X(cuLinkAddFile, (CUlinkState s, CUjitInputType t, const char* path, unsigned int no, CUjit_option* o,          \
                    void** v),                                                                                    \
    LinkAddFile(s, t, path), "client", "file read")                                                               \
  X(cuLinkAddFile_v2, (CUlinkState s, CUjitInputType t, const char* path, unsigned int no, CUjit_option* o,       \
                       void** v),                                                                                 \
    LinkAddFile(s, t, path), "client", "file read")                                                               \
  X(cuLinkComplete, (CUlinkState s, void** out, size_t* n), LinkComplete(s, out, n), "client",                    \
    "the single input is the image")                                                                              \
  X(cuLinkDestroy, (CUlinkState s), LinkDestroy(s), "client", "none")

// ---- launch.cc -----------------------------------------------------------------------------------------------
#define GP_LAUNCH_FORWARDS(X)                                                                                     \
  X(cuLaunchKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,            \
                     unsigned int by, unsigned int bz, unsigned int shm, CUstream st, void** params, void** extra), \
    LaunchKernel(f, gx, gy, gz, bx, by, bz, shm, st, params, extra), "stream",                                    \
    "out: packed params by the function's layout; async")                                                         \
  X(cuLaunchKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,       \
                          unsigned int by, unsigned int bz, unsigned int shm, CUstream st, void** params,         \
                          void** extra),                                                                          \
    LaunchKernel(f, gx, gy, gz, bx, by, bz, shm, st, params, extra), "stream", "async")                           \
  X(cuLaunchKernelEx, (const CUlaunchConfig* c, CUfunction f, void** params, void** extra),                       \
    LaunchKernelEx(c, f, params, extra), "stream", "clusters and cooperative sent; other attributes hints; async") \
  X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig* c, CUfunction f, void** params, void** extra),                  \
    LaunchKernelEx(c, f, params, extra), "stream", "async")                                                       \
  /* Cooperative: every block resident at once (grid sync); grids larger than the slice holds are refused. */     \
  X(cuLaunchCooperativeKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,  \
                                unsigned int by, unsigned int bz, unsigned int shm, CUstream st, void** params),   \
    LaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, st, params), "stream", "as cuLaunchKernel; async")     \
  X(cuLaunchCooperativeKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,              \
                                     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,          \
                                     CUstream st, void** params),                                                  \
    LaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, st, params), "stream", "async")                       \
  X(cuLaunchHostFunc, (CUstream st, CUhostFn fn, void* data), LaunchHostFunc(st, fn, data), "stream",             \
    "stream synchronised, then fn runs in the client")                                                            \
  X(cuLaunchHostFunc_ptsz, (CUstream st, CUhostFn fn, void* data), LaunchHostFunc(st, fn, data), "stream",        \
    "synchronised, then fn")                                                                                      \
  /* CUDA 13.1 (driver_variants_newer.txt): with a sync mode, blocking or spinning; both run fn as above. */      \
  X(cuLaunchHostFunc_v2, (CUstream st, CUhostFn fn, void* data, unsigned int mode),                               \
    LaunchHostFuncSynced(st, fn, data, mode), "stream", "mode checked; stream synchronised, then fn runs")        \
  X(cuLaunchHostFunc_v2_ptsz, (CUstream st, CUhostFn fn, void* data, unsigned int mode),                          \
    LaunchHostFuncSynced(st, fn, data, mode), "stream", "mode checked; synchronised, then fn")                    \
  X(cuStreamAddCallback, (CUstream st, CUstreamCallback cb, void* data, unsigned int flags),                      \
    StreamAddCallback(st, cb, data, flags), "stream", "stream synchronised, then cb(status) runs in the client")   \
  X(cuStreamAddCallback_ptsz, (CUstream st, CUstreamCallback cb, void* data, unsigned int flags),                 \
    StreamAddCallback(st, cb, data, flags), "stream", "synchronised, then cb(status)")                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, (int* n, CUfunction f, int block, size_t dyn),                   \
    OccupancyMaxActiveBlocks(n, f, block, dyn), "ctx", "computed from the function's attributes")                 \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, (int* n, CUfunction f, int block, size_t dyn,           \
                                                          unsigned int flags),                                    \
    OccupancyMaxActiveBlocks(n, f, block, dyn), "ctx", "computed")                                                \
  X(cuOccupancyMaxPotentialBlockSize, (int* grid, int* block, CUfunction f, CUoccupancyB2DSize b2d, size_t dyn,   \
                                       int limit),                                                                \
    OccupancyMaxPotentialBlockSize(grid, block, f, b2d, dyn, limit), "ctx", "computed")                           \
  X(cuOccupancyMaxPotentialBlockSizeWithFlags, (int* grid, int* block, CUfunction f, CUoccupancyB2DSize b2d,      \
                                                size_t dyn, int limit, unsigned int flags),                       \
    OccupancyMaxPotentialBlockSize(grid, block, f, b2d, dyn, limit), "ctx", "computed")                           \
  X(cuOccupancyAvailableDynamicSMemPerBlock, (size_t * bytes, CUfunction f, int blocks, int block),               \
    OccupancyAvailableDynamicSMem(bytes, f, blocks, block), "ctx", "computed")                                    \
  X(cuOccupancyMaxActiveClusters, (int* n, CUfunction f, const CUlaunchConfig* config),                           \
    OccupancyMaxActiveClusters(n, f, config), "ctx", "asked of the slice; waits")

// ---- stream.cc -----------------------------------------------------------------------------------------------
#define GP_STREAM_FORWARDS(X)                                                                                     \
  X(cuStreamCreate, (CUstream * s, unsigned int flags), StreamCreate(s, flags, 0), "ctx", "back: id; waits")      \
  X(cuStreamCreateWithPriority, (CUstream * s, unsigned int flags, int prio), StreamCreate(s, flags, prio), "ctx", \
    "priority recorded; waits")                                                                                   \
  X(cuStreamDestroy, (CUstream s), StreamDestroy(s), "stream", "sent; not waited for")                           \
  X(cuStreamDestroy_v2, (CUstream s), StreamDestroy(s), "stream", "sent; not waited for")                        \
  X(cuStreamSynchronize, (CUstream s), StreamSynchronize(s), "stream", "waits; reports async errors")             \
  X(cuStreamSynchronize_ptsz, (CUstream s), StreamSynchronize(s), "stream", "waits")                              \
  X(cuStreamQuery, (CUstream s), StreamQuery(s), "stream", "waits")                                               \
  X(cuStreamQuery_ptsz, (CUstream s), StreamQuery(s), "stream", "waits")                                          \
  X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int f), StreamWaitEvent(s, e), "stream",                  \
    "async on one slice; across slices the client waits for the event")                                           \
  X(cuStreamWaitEvent_ptsz, (CUstream s, CUevent e, unsigned int f), StreamWaitEvent(s, e), "stream", "async")    \
  /* Stream memory operations: waits run on the slice; writes are ordered 4/8-byte writes (stream.cc). */         \
  X(cuStreamWaitValue32, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                               \
    StreamWaitValue(s, a, v, 4, f), "stream", "async")                                                            \
  X(cuStreamWaitValue32_ptsz, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                          \
    StreamWaitValue(s, a, v, 4, f), "stream", "async")                                                            \
  X(cuStreamWaitValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                            \
    StreamWaitValue(s, a, v, 4, f), "stream", "async")                                                            \
  X(cuStreamWaitValue32_v2_ptsz, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                       \
    StreamWaitValue(s, a, v, 4, f), "stream", "async")                                                            \
  X(cuStreamWaitValue64, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                               \
    StreamWaitValue(s, a, v, 8, f), "stream", "async")                                                            \
  X(cuStreamWaitValue64_ptsz, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                          \
    StreamWaitValue(s, a, v, 8, f), "stream", "async")                                                            \
  X(cuStreamWaitValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                            \
    StreamWaitValue(s, a, v, 8, f), "stream", "async")                                                            \
  X(cuStreamWaitValue64_v2_ptsz, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                       \
    StreamWaitValue(s, a, v, 8, f), "stream", "async")                                                            \
  X(cuStreamWriteValue32, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                              \
    StreamWriteValue(s, a, v, 4, f), "stream", "out: 4 bytes; async")                                             \
  X(cuStreamWriteValue32_ptsz, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                         \
    StreamWriteValue(s, a, v, 4, f), "stream", "out: 4 bytes; async")                                             \
  X(cuStreamWriteValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                           \
    StreamWriteValueV2(s, a, v, 4, f), "stream", "out: 4 bytes; async")                                             \
  X(cuStreamWriteValue32_v2_ptsz, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int f),                      \
    StreamWriteValueV2(s, a, v, 4, f), "stream", "out: 4 bytes; async")                                             \
  X(cuStreamWriteValue64, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                              \
    StreamWriteValue(s, a, v, 8, f), "stream", "out: 8 bytes; async")                                             \
  X(cuStreamWriteValue64_ptsz, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                         \
    StreamWriteValue(s, a, v, 8, f), "stream", "out: 8 bytes; async")                                             \
  X(cuStreamWriteValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                           \
    StreamWriteValueV2(s, a, v, 8, f), "stream", "out: 8 bytes; async")                                             \
  X(cuStreamWriteValue64_v2_ptsz, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f),                      \
    StreamWriteValueV2(s, a, v, 8, f), "stream", "out: 8 bytes; async")                                             \
  X(cuStreamBatchMemOp_v2, (CUstream s, unsigned int n, CUstreamBatchMemOpParams* ops, unsigned int f),           \
    StreamBatchMemOp(s, n, ops, f), "stream", "each op as the calls above; barrier and flush: nothing to do")     \
  X(cuStreamBatchMemOp_v2_ptsz, (CUstream s, unsigned int n, CUstreamBatchMemOpParams* ops, unsigned int f),      \
    StreamBatchMemOp(s, n, ops, f), "stream", "as above")                                                         \
  X(cuStreamGetFlags, (CUstream s, unsigned int* f), StreamGetFlags(s, f), "client", "none")                      \
  X(cuStreamGetFlags_ptsz, (CUstream s, unsigned int* f), StreamGetFlags(s, f), "client", "none")                 \
  X(cuStreamGetPriority, (CUstream s, int* p), StreamGetPriority(s, p), "client", "none")                         \
  X(cuStreamGetPriority_ptsz, (CUstream s, int* p), StreamGetPriority(s, p), "client", "none")                    \
  X(cuCtxGetStreamPriorityRange, (int* least, int* greatest), StreamPriorityRange(least, greatest), "client",     \
    "none")                                                                                                       \
  /* As the driver answers when no profiler is attached, which no profiler can be to a remote slice. */           \
  X(cuProfilerStart, (), ProfilerMarker("cuProfilerStart"), "client", "accepted without effect; none")            \
  X(cuProfilerStop, (), ProfilerMarker("cuProfilerStop"), "client", "accepted without effect; none")

// ---- array.cc ------------------------------------------------------------------------------------------------
// CUDA arrays: pitched memory of the slice, reached by array copies and by texture and surface objects.
#define GP_ARRAY_FORWARDS(X)                                                                                      \
  X(cuArrayCreate_v2, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR* d), ArrayCreate(a, d), "ctx",                    \
    "pitched memory of the slice; waits")                                                                         \
  X(cuArray3DCreate_v2, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR* d), Array3DCreate(a, d), "ctx", "waits")     \
  X(cuArrayDestroy, (CUarray a), ArrayDestroy(a), "array", "its memory freed; async")                              \
  X(cuArrayGetDescriptor_v2, (CUDA_ARRAY_DESCRIPTOR * d, CUarray a), ArrayGetDescriptor(d, a), "client", "none")  \
  X(cuArray3DGetDescriptor_v2, (CUDA_ARRAY3D_DESCRIPTOR * d, CUarray a), Array3DGetDescriptor(d, a), "client",    \
    "none")                                                                                                       \
  X(cuMemcpyHtoA_v2, (CUarray a, size_t o, const void* h, size_t n), CopyHtoA(a, o, h, n, nullptr), "array",      \
    "1D arrays; out: bytes; async")                                                                               \
  X(cuMemcpyHtoA_v2_ptds, (CUarray a, size_t o, const void* h, size_t n), CopyHtoA(a, o, h, n, nullptr),          \
    "array", "async")                                                                                             \
  X(cuMemcpyHtoAAsync_v2, (CUarray a, size_t o, const void* h, size_t n, CUstream s), CopyHtoA(a, o, h, n, s),    \
    "array+stream", "async")                                                                                      \
  X(cuMemcpyHtoAAsync_v2_ptsz, (CUarray a, size_t o, const void* h, size_t n, CUstream s),                       \
    CopyHtoA(a, o, h, n, s), "array+stream", "async")                                                             \
  X(cuMemcpyAtoH_v2, (void* h, CUarray a, size_t o, size_t n), CopyAtoH(h, a, o, n, nullptr), "array",            \
    "back: bytes; waits")                                                                                         \
  X(cuMemcpyAtoH_v2_ptds, (void* h, CUarray a, size_t o, size_t n), CopyAtoH(h, a, o, n, nullptr), "array",       \
    "waits")                                                                                                      \
  X(cuMemcpyAtoHAsync_v2, (void* h, CUarray a, size_t o, size_t n, CUstream s), CopyAtoH(h, a, o, n, s),          \
    "array+stream", "waits")                                                                                      \
  X(cuMemcpyAtoHAsync_v2_ptsz, (void* h, CUarray a, size_t o, size_t n, CUstream s), CopyAtoH(h, a, o, n, s),     \
    "array+stream", "waits")                                                                                      \
  X(cuMemcpyAtoD_v2, (CUdeviceptr d, CUarray a, size_t o, size_t n), CopyAtoD(d, a, o, n), "array",               \
    "async on one slice")                                                                                         \
  X(cuMemcpyAtoD_v2_ptds, (CUdeviceptr d, CUarray a, size_t o, size_t n), CopyAtoD(d, a, o, n), "array", "async") \
  X(cuMemcpyDtoA_v2, (CUarray a, size_t o, CUdeviceptr d, size_t n), CopyDtoA(a, o, d, n), "array",               \
    "async on one slice")                                                                                         \
  X(cuMemcpyDtoA_v2_ptds, (CUarray a, size_t o, CUdeviceptr d, size_t n), CopyDtoA(a, o, d, n), "array", "async") \
  X(cuMemcpyAtoA_v2, (CUarray d, size_t dof, CUarray s, size_t sof, size_t n), CopyAtoA(d, dof, s, sof, n),       \
    "array", "async on one slice")                                                                                \
  X(cuMemcpyAtoA_v2_ptds, (CUarray d, size_t dof, CUarray s, size_t sof, size_t n), CopyAtoA(d, dof, s, sof, n),  \
    "array", "async")

// ---- event.cc ------------------------------------------------------------------------------------------------
// ---- texture.cc ----------------------------------------------------------------------------------------------
// Texture and surface objects: made by the slice that holds the memory (the handle is its value, which kernels
// resolve there); the descriptions the program gave stay in the client for the queries.
#define GP_TEXTURE_FORWARDS(X)                                                                                    \
  X(cuTexObjectCreate,                                                                                            \
    (CUtexObject * t, const CUDA_RESOURCE_DESC* r, const CUDA_TEXTURE_DESC* d, const CUDA_RESOURCE_VIEW_DESC* v), \
    TexObjectCreate(t, r, d, v), "ptr/array", "out: the resolved description; back: the handle; waits")         \
  X(cuTexObjectDestroy, (CUtexObject t), TexObjectDestroy(t), "texture", "async")                                \
  X(cuTexObjectGetResourceDesc, (CUDA_RESOURCE_DESC * r, CUtexObject t), TexObjectGetResourceDesc(r, t), "client", \
    "none")                                                                                                       \
  X(cuTexObjectGetTextureDesc, (CUDA_TEXTURE_DESC * d, CUtexObject t), TexObjectGetTextureDesc(d, t), "client",   \
    "none")                                                                                                       \
  X(cuTexObjectGetResourceViewDesc, (CUDA_RESOURCE_VIEW_DESC * v, CUtexObject t),                                 \
    TexObjectGetResourceViewDesc(v, t), "client", "the whole resource; none")                                    \
  X(cuSurfObjectCreate, (CUsurfObject * s, const CUDA_RESOURCE_DESC* r), SurfObjectCreate(s, r), "array",          \
    "surface load/store arrays; waits")                                                                           \
  X(cuSurfObjectDestroy, (CUsurfObject s), SurfObjectDestroy(s), "surface", "async")                             \
  X(cuSurfObjectGetResourceDesc, (CUDA_RESOURCE_DESC * r, CUsurfObject s), SurfObjectGetResourceDesc(r, s),       \
    "client", "none")

#define GP_EVENT_FORWARDS(X)                                                                                      \
  X(cuEventCreate, (CUevent * e, unsigned int flags), EventCreate(e, flags), "ctx", "back: id; waits")            \
  X(cuEventRecord, (CUevent e, CUstream s), EventRecord(e, s), "stream", "async")                                 \
  X(cuEventRecord_ptsz, (CUevent e, CUstream s), EventRecord(e, s), "stream", "async")                            \
  X(cuEventRecordWithFlags, (CUevent e, CUstream s, unsigned int f), EventRecord(e, s), "stream", "async")        \
  X(cuEventRecordWithFlags_ptsz, (CUevent e, CUstream s, unsigned int f), EventRecord(e, s), "stream", "async")   \
  X(cuEventSynchronize, (CUevent e), EventSynchronize(e), "event", "waits")                                       \
  X(cuEventQuery, (CUevent e), EventQuery(e), "event", "waits")                                                   \
  X(cuEventElapsedTime, (float* ms, CUevent a, CUevent b), EventElapsedTime(ms, a, b), "event", "waits")          \
  X(cuEventElapsedTime_v2, (float* ms, CUevent a, CUevent b), EventElapsedTime(ms, a, b), "event", "waits")       \
  X(cuEventDestroy, (CUevent e), EventDestroy(e), "event", "async")                                               \
  X(cuEventDestroy_v2, (CUevent e), EventDestroy(e), "event", "async")

// ---- graph.cc ------------------------------------------------------------------------------------------------
// Graphs live in the client; a launch replays the executable graph's nodes on the stream (graph.h).
#define GP_CAPTURE_FORWARDS(X)                                                                                    \
  X(cuStreamBeginCapture, (CUstream s), StreamBeginCapture(s, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),\
    "client", "none")                                                                                             \
  X(cuStreamBeginCapture_ptsz, (CUstream s),                                                                      \
    StreamBeginCapture(s, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), "client", "none")                  \
  X(cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode m), StreamBeginCapture(s, nullptr, nullptr, 0, m),  \
    "client", "none")                                                                                             \
  X(cuStreamBeginCapture_v2_ptsz, (CUstream s, CUstreamCaptureMode m),                                            \
    StreamBeginCapture(s, nullptr, nullptr, 0, m), "client", "none")                                              \
  X(cuStreamBeginCaptureToGraph, (CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e,          \
                                  size_t n, CUstreamCaptureMode m),                                               \
    StreamBeginCapture(s, g, d, n, m), "client", "none")                                                          \
  X(cuStreamBeginCaptureToGraph_ptsz, (CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e,     \
                                       size_t n, CUstreamCaptureMode m),                                          \
    StreamBeginCapture(s, g, d, n, m), "client", "none")                                                          \
  X(cuStreamEndCapture, (CUstream s, CUgraph * g), StreamEndCapture(s, g), "client", "none")                      \
  X(cuStreamEndCapture_ptsz, (CUstream s, CUgraph * g), StreamEndCapture(s, g), "client", "none")                 \
  X(cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus * c), StreamIsCapturing(s, c), "client", "none")       \
  X(cuStreamIsCapturing_ptsz, (CUstream s, CUstreamCaptureStatus * c), StreamIsCapturing(s, c), "client", "none")  \
  X(cuStreamGetCaptureInfo, (CUstream s, CUstreamCaptureStatus * c, cuuint64_t * id),                             \
    StreamGetCaptureInfo(s, c, id, nullptr, nullptr, nullptr, nullptr), "client", "none")                         \
  X(cuStreamGetCaptureInfo_ptsz, (CUstream s, CUstreamCaptureStatus * c, cuuint64_t * id),                        \
    StreamGetCaptureInfo(s, c, id, nullptr, nullptr, nullptr, nullptr), "client", "none")                         \
  X(cuStreamGetCaptureInfo_v2,                                                                                    \
    (CUstream s, CUstreamCaptureStatus * c, cuuint64_t * id, CUgraph * g, const CUgraphNode** d, size_t* n),       \
    StreamGetCaptureInfo(s, c, id, g, d, nullptr, n), "client", "none")                                           \
  X(cuStreamGetCaptureInfo_v2_ptsz,                                                                               \
    (CUstream s, CUstreamCaptureStatus * c, cuuint64_t * id, CUgraph * g, const CUgraphNode** d, size_t* n),       \
    StreamGetCaptureInfo(s, c, id, g, d, nullptr, n), "client", "none")                                           \
  X(cuStreamGetCaptureInfo_v3,                                                                                    \
    (CUstream s, CUstreamCaptureStatus * c, cuuint64_t * id, CUgraph * g, const CUgraphNode** d,                  \
     const CUgraphEdgeData** e, size_t* n),                                                                       \
    StreamGetCaptureInfo(s, c, id, g, d, e, n), "client", "none")                                                 \
  X(cuStreamGetCaptureInfo_v3_ptsz,                                                                               \
    (CUstream s, CUstreamCaptureStatus * c, cuuint64_t * id, CUgraph * g, const CUgraphNode** d,                  \
     const CUgraphEdgeData** e, size_t* n),                                                                       \
    StreamGetCaptureInfo(s, c, id, g, d, e, n), "client", "none")                                                 \
  X(cuStreamUpdateCaptureDependencies, (CUstream s, CUgraphNode * d, size_t n, unsigned int f),                   \
    StreamUpdateCaptureDependencies(s, d, nullptr, n, f), "client", "none")                                       \
  X(cuStreamUpdateCaptureDependencies_ptsz, (CUstream s, CUgraphNode * d, size_t n, unsigned int f),              \
    StreamUpdateCaptureDependencies(s, d, nullptr, n, f), "client", "none")                                       \
  X(cuStreamUpdateCaptureDependencies_v2,                                                                         \
    (CUstream s, CUgraphNode * d, const CUgraphEdgeData* e, size_t n, unsigned int f),                            \
    StreamUpdateCaptureDependencies(s, d, e, n, f), "client", "none")                                             \
  X(cuStreamUpdateCaptureDependencies_v2_ptsz,                                                                    \
    (CUstream s, CUgraphNode * d, const CUgraphEdgeData* e, size_t n, unsigned int f),                            \
    StreamUpdateCaptureDependencies(s, d, e, n, f), "client", "none")                                             \
  X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * m), ThreadExchangeStreamCaptureMode(m), "client",   \
    "none")

#define GP_GRAPH_FORWARDS(X)                                                                                      \
  X(cuGraphCreate, (CUgraph * g, unsigned int f), GraphCreate(g, f), "client", "none")                            \
  X(cuGraphDestroy, (CUgraph g), GraphDestroy(g), "client", "none")                                               \
  X(cuGraphClone, (CUgraph * c, CUgraph g), GraphClone(c, g), "client", "none")                                   \
  X(cuGraphNodeFindInClone, (CUgraphNode * n, CUgraphNode o, CUgraph c), GraphNodeFindInClone(n, o, c), "client", \
    "none")                                                                                                       \
  X(cuGraphAddKernelNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c,                            \
                           const CUDA_KERNEL_NODE_PARAMS_v1* p),                                                  \
    GraphAddKernelNodeV1(n, g, d, c, p), "ctx", "arguments packed now; the function resolved on the slice")       \
  X(cuGraphAddKernelNode_v2, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c,                         \
                              const CUDA_KERNEL_NODE_PARAMS* p),                                                  \
    GraphAddKernelNode(n, g, d, c, p), "ctx", "arguments packed now")                                             \
  X(cuGraphAddMemcpyNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c, const CUDA_MEMCPY3D* p,    \
                           CUcontext ctx),                                                                        \
    GraphAddMemcpyNode(n, g, d, c, p), "client", "host memory read when the graph runs")                          \
  X(cuGraphAddMemsetNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c,                            \
                           const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx),                                      \
    GraphAddMemsetNode(n, g, d, c, p), "client", "none")                                                          \
  X(cuGraphAddHostNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c,                              \
                         const CUDA_HOST_NODE_PARAMS* p),                                                         \
    GraphAddHostNode(n, g, d, c, p), "client", "runs in the client when the work before it is done")              \
  X(cuGraphAddChildGraphNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c, CUgraph child),        \
    GraphAddChildGraphNode(n, g, d, c, child), "client", "a copy of the child")                                   \
  X(cuGraphAddEmptyNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c),                            \
    GraphAddEmptyNode(n, g, d, c), "client", "none")                                                              \
  X(cuGraphAddBatchMemOpNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c,                        \
                               const CUDA_BATCH_MEM_OP_NODE_PARAMS* p),                                           \
    GraphAddBatchMemOpNode(n, g, d, c, p), "client", "run at launch as cuStreamBatchMemOp")                       \
  X(cuGraphBatchMemOpNodeGetParams, (CUgraphNode n, CUDA_BATCH_MEM_OP_NODE_PARAMS* p),                            \
    BatchMemOpNodeGetParams(n, p), "client", "none")                                                              \
  X(cuGraphBatchMemOpNodeSetParams, (CUgraphNode n, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p),                      \
    BatchMemOpNodeSetParams(nullptr, n, p), "client", "none")                                                     \
  X(cuGraphExecBatchMemOpNodeSetParams, (CUgraphExec x, CUgraphNode n, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p),   \
    BatchMemOpNodeSetParams(x, n, p), "client", "none")                                                           \
  X(cuGraphAddEventRecordNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c, CUevent e),           \
    GraphAddEventNode(n, g, d, c, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD), "client", "none")                          \
  X(cuGraphAddEventWaitNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c, CUevent e),             \
    GraphAddEventNode(n, g, d, c, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT), "client", "none")                            \
  X(cuGraphAddMemAllocNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c,                          \
                             CUDA_MEM_ALLOC_NODE_PARAMS* p),                                                      \
    GraphAddMemAllocNode(n, g, d, c, p), "ctx", "allocated now, counted against the slice; waits")                \
  X(cuGraphAddMemFreeNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c, CUdeviceptr p),           \
    GraphAddMemFreeNode(n, g, d, c, p), "client", "returned with the graph")                                      \
  X(cuGraphAddNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t c, CUgraphNodeParams* p),           \
    GraphAddNode(n, g, d, nullptr, c, p), "client", "by type")                                                    \
  X(cuGraphAddNode_v2, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, size_t c,     \
                        CUgraphNodeParams* p),                                                                    \
    GraphAddNode(n, g, d, e, c, p), "client", "by type")                                                          \
  X(cuGraphNodeSetParams, (CUgraphNode n, CUgraphNodeParams* p), GraphNodeSetParams(n, p), "client", "none")      \
  X(cuGraphExecNodeSetParams, (CUgraphExec x, CUgraphNode n, CUgraphNodeParams* p), GraphExecNodeSetParams(x, n, p), \
    "client", "none")                                                                                             \
  X(cuGraphKernelNodeGetParams, (CUgraphNode n, CUDA_KERNEL_NODE_PARAMS_v1* p), KernelNodeGetParamsV1(n, p),      \
    "client", "none")                                                                                             \
  X(cuGraphKernelNodeGetParams_v2, (CUgraphNode n, CUDA_KERNEL_NODE_PARAMS* p), KernelNodeGetParams(n, p),        \
    "client", "none")                                                                                             \
  X(cuGraphKernelNodeSetParams, (CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v1* p),                             \
    KernelNodeSetParamsV1(nullptr, n, p), "client", "none")                                                       \
  X(cuGraphKernelNodeSetParams_v2, (CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS* p),                             \
    KernelNodeSetParams(nullptr, n, p), "client", "none")                                                         \
  X(cuGraphExecKernelNodeSetParams, (CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v1* p),          \
    KernelNodeSetParamsV1(x, n, p), "client", "none")                                                             \
  X(cuGraphExecKernelNodeSetParams_v2, (CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS* p),          \
    KernelNodeSetParams(x, n, p), "client", "none")                                                               \
  X(cuGraphMemcpyNodeGetParams, (CUgraphNode n, CUDA_MEMCPY3D* p), MemcpyNodeGetParams(n, p), "client", "none")   \
  X(cuGraphMemcpyNodeSetParams, (CUgraphNode n, const CUDA_MEMCPY3D* p), MemcpyNodeSetParams(nullptr, n, p),      \
    "client", "none")                                                                                             \
  X(cuGraphExecMemcpyNodeSetParams, (CUgraphExec x, CUgraphNode n, const CUDA_MEMCPY3D* p, CUcontext c),          \
    MemcpyNodeSetParams(x, n, p), "client", "none")                                                               \
  X(cuGraphMemsetNodeGetParams, (CUgraphNode n, CUDA_MEMSET_NODE_PARAMS* p), MemsetNodeGetParams(n, p), "client", \
    "none")                                                                                                       \
  X(cuGraphMemsetNodeSetParams, (CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS* p),                                \
    MemsetNodeSetParams(nullptr, n, p), "client", "none")                                                         \
  X(cuGraphExecMemsetNodeSetParams, (CUgraphExec x, CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS* p, CUcontext c),\
    MemsetNodeSetParams(x, n, p), "client", "none")                                                               \
  X(cuGraphHostNodeGetParams, (CUgraphNode n, CUDA_HOST_NODE_PARAMS* p), HostNodeGetParams(n, p), "client",       \
    "none")                                                                                                       \
  X(cuGraphHostNodeSetParams, (CUgraphNode n, const CUDA_HOST_NODE_PARAMS* p), HostNodeSetParams(nullptr, n, p),  \
    "client", "none")                                                                                             \
  X(cuGraphExecHostNodeSetParams, (CUgraphExec x, CUgraphNode n, const CUDA_HOST_NODE_PARAMS* p),                 \
    HostNodeSetParams(x, n, p), "client", "none")                                                                 \
  X(cuGraphChildGraphNodeGetGraph, (CUgraphNode n, CUgraph * g), ChildGraphNodeGetGraph(n, g), "client", "none")  \
  X(cuGraphExecChildGraphNodeSetParams, (CUgraphExec x, CUgraphNode n, CUgraph g),                                \
    ExecChildGraphNodeSetParams(x, n, g), "client", "none")                                                       \
  X(cuGraphEventRecordNodeGetEvent, (CUgraphNode n, CUevent * e),                                                 \
    EventNodeGetEvent(n, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD), "client", "none")                                   \
  X(cuGraphEventRecordNodeSetEvent, (CUgraphNode n, CUevent e),                                                   \
    EventNodeSetEvent(nullptr, n, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD), "client", "none")                          \
  X(cuGraphExecEventRecordNodeSetEvent, (CUgraphExec x, CUgraphNode n, CUevent e),                                \
    EventNodeSetEvent(x, n, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD), "client", "none")                                \
  X(cuGraphEventWaitNodeGetEvent, (CUgraphNode n, CUevent * e),                                                   \
    EventNodeGetEvent(n, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT), "client", "none")                                     \
  X(cuGraphEventWaitNodeSetEvent, (CUgraphNode n, CUevent e),                                                     \
    EventNodeSetEvent(nullptr, n, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT), "client", "none")                            \
  X(cuGraphExecEventWaitNodeSetEvent, (CUgraphExec x, CUgraphNode n, CUevent e),                                  \
    EventNodeSetEvent(x, n, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT), "client", "none")                                  \
  X(cuGraphMemAllocNodeGetParams, (CUgraphNode n, CUDA_MEM_ALLOC_NODE_PARAMS* p), MemAllocNodeGetParams(n, p),    \
    "client", "none")                                                                                             \
  X(cuGraphMemFreeNodeGetParams, (CUgraphNode n, CUdeviceptr* p), MemFreeNodeGetParams(n, p), "client", "none")   \
  X(cuDeviceGraphMemTrim, (CUdevice d), DeviceGraphMemTrim(d), "client", "nothing cached; none")                  \
  X(cuDeviceGetGraphMemAttribute, (CUdevice d, CUgraphMem_attribute a, void* v), DeviceGetGraphMemAttribute(d, a, v), \
    "client", "none")                                                                                             \
  X(cuDeviceSetGraphMemAttribute, (CUdevice d, CUgraphMem_attribute a, void* v), DeviceSetGraphMemAttribute(d, a, v), \
    "client", "high marks reset to 0 only; none")                                                                 \
  X(cuGraphNodeGetType, (CUgraphNode n, CUgraphNodeType* t), GraphNodeGetType(n, t), "client", "none")            \
  X(cuGraphNodeGetContainingGraph, (CUgraphNode n, CUgraph * g), GraphNodeGetContainingGraph(n, g), "client",     \
    "CUDA 13.1; none")                                                                                            \
  X(cuGraphNodeGetLocalId, (CUgraphNode n, unsigned int* id), GraphNodeGetLocalId(n, id), "client",               \
    "CUDA 13.1; its index in the graph; none")                                                                    \
  X(cuGraphGetNodes, (CUgraph g, CUgraphNode* n, size_t* c), GraphGetNodes(g, n, c, false), "client", "none")     \
  X(cuGraphGetRootNodes, (CUgraph g, CUgraphNode* n, size_t* c), GraphGetNodes(g, n, c, true), "client", "none")  \
  X(cuGraphGetEdges, (CUgraph g, CUgraphNode* f, CUgraphNode* t, size_t* c), GraphGetEdges(g, f, t, nullptr, c),  \
    "client", "none")                                                                                             \
  X(cuGraphGetEdges_v2, (CUgraph g, CUgraphNode* f, CUgraphNode* t, CUgraphEdgeData* e, size_t* c),               \
    GraphGetEdges(g, f, t, e, c), "client", "none")                                                               \
  X(cuGraphNodeGetDependencies, (CUgraphNode n, CUgraphNode* d, size_t* c),                                       \
    GraphNodeGetDependencies(n, d, nullptr, c), "client", "none")                                                 \
  X(cuGraphNodeGetDependencies_v2, (CUgraphNode n, CUgraphNode* d, CUgraphEdgeData* e, size_t* c),                \
    GraphNodeGetDependencies(n, d, e, c), "client", "none")                                                       \
  X(cuGraphNodeGetDependentNodes, (CUgraphNode n, CUgraphNode* d, size_t* c),                                     \
    GraphNodeGetDependents(n, d, nullptr, c), "client", "none")                                                   \
  X(cuGraphNodeGetDependentNodes_v2, (CUgraphNode n, CUgraphNode* d, CUgraphEdgeData* e, size_t* c),              \
    GraphNodeGetDependents(n, d, e, c), "client", "none")                                                         \
  X(cuGraphAddDependencies, (CUgraph g, const CUgraphNode* f, const CUgraphNode* t, size_t c),                    \
    GraphChangeDependencies(g, f, t, nullptr, c, true), "client", "none")                                         \
  X(cuGraphAddDependencies_v2, (CUgraph g, const CUgraphNode* f, const CUgraphNode* t, const CUgraphEdgeData* e,  \
                                size_t c),                                                                        \
    GraphChangeDependencies(g, f, t, e, c, true), "client", "none")                                               \
  X(cuGraphRemoveDependencies, (CUgraph g, const CUgraphNode* f, const CUgraphNode* t, size_t c),                 \
    GraphChangeDependencies(g, f, t, nullptr, c, false), "client", "none")                                        \
  X(cuGraphRemoveDependencies_v2, (CUgraph g, const CUgraphNode* f, const CUgraphNode* t,                         \
                                   const CUgraphEdgeData* e, size_t c),                                           \
    GraphChangeDependencies(g, f, t, e, c, false), "client", "none")                                              \
  X(cuGraphDestroyNode, (CUgraphNode n), GraphDestroyNode(n), "client", "none")                                   \
  X(cuGraphInstantiate, (CUgraphExec * x, CUgraph g, CUgraphNode* e, char* log, size_t n),                        \
    GraphInstantiateLegacy(x, g, e, log, n), "client", "a copy in topological order")                             \
  X(cuGraphInstantiate_v2, (CUgraphExec * x, CUgraph g, CUgraphNode* e, char* log, size_t n),                     \
    GraphInstantiateLegacy(x, g, e, log, n), "client", "a copy in topological order")                             \
  X(cuGraphInstantiateWithFlags, (CUgraphExec * x, CUgraph g, unsigned long long f),                              \
    GraphInstantiate(x, g, f, nullptr, nullptr), "client", "a copy in topological order")                         \
  X(cuGraphInstantiateWithParams, (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p),                 \
    GraphInstantiateWithParams(x, g, p), "client", "none")                                                        \
  X(cuGraphInstantiateWithParams_ptsz, (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p),            \
    GraphInstantiateWithParams(x, g, p), "client", "none")                                                        \
  X(cuGraphExecGetFlags, (CUgraphExec x, cuuint64_t* f), GraphExecGetFlags(x, f), "client", "none")               \
  X(cuGraphExecDestroy, (CUgraphExec x), GraphExecDestroy(x), "client", "none")                                   \
  X(cuGraphLaunch, (CUgraphExec x, CUstream s), GraphLaunch(x, s), "stream", "the nodes' work, in order; async")  \
  X(cuGraphLaunch_ptsz, (CUgraphExec x, CUstream s), GraphLaunch(x, s), "stream", "async")                        \
  X(cuGraphUpload, (CUgraphExec x, CUstream s), GraphUpload(x, s), "stream", "nothing to prepare; none")          \
  X(cuGraphUpload_ptsz, (CUgraphExec x, CUstream s), GraphUpload(x, s), "stream", "none")                         \
  X(cuGraphExecUpdate, (CUgraphExec x, CUgraph g, CUgraphNode* e, CUgraphExecUpdateResult* r),                    \
    GraphExecUpdateV1(x, g, e, r), "client", "same topology: the new parameters")                                 \
  X(cuGraphExecUpdate_v2, (CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo* i), GraphExecUpdate(x, g, i),   \
    "client", "same topology: the new parameters")                                                                \
  X(cuGraphNodeSetEnabled, (CUgraphExec x, CUgraphNode n, unsigned int e), GraphNodeSetEnabled(x, n, e), "client",\
    "none")                                                                                                       \
  X(cuGraphNodeGetEnabled, (CUgraphExec x, CUgraphNode n, unsigned int* e), GraphNodeGetEnabled(x, n, e),         \
    "client", "none")

// ---- mempool.cc ----------------------------------------------------------------------------------------------
// Pools are client objects over ordinary slice allocations (mempool.cc): nothing is cached, reserved = used.
#define GP_MEMPOOL_FORWARDS(X)                                                                                    \
  X(cuMemAllocAsync, (CUdeviceptr * p, size_t n, CUstream s), MemAllocAsync(p, n, s), "stream",                   \
    "counted against the slice at once; waits (capturing: a graph memory node)")                                  \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr * p, size_t n, CUstream s), MemAllocAsync(p, n, s), "stream", "waits")     \
  X(cuMemAllocFromPoolAsync, (CUdeviceptr * p, size_t n, CUmemoryPool pool, CUstream s),                          \
    MemAllocFromPoolAsync(p, n, pool, s), "pool's device", "waits")                                               \
  X(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr * p, size_t n, CUmemoryPool pool, CUstream s),                     \
    MemAllocFromPoolAsync(p, n, pool, s), "pool's device", "waits")                                               \
  X(cuMemFreeAsync, (CUdeviceptr p, CUstream s), MemFreeAsync(p, s), "ptr",                                       \
    "freed after the work queued before it; async")                                                               \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr p, CUstream s), MemFreeAsync(p, s), "ptr", "async")                         \
  X(cuDeviceGetDefaultMemPool, (CUmemoryPool * p, CUdevice d), DeviceGetDefaultMemPool(p, d), "client", "none")   \
  X(cuDeviceGetMemPool, (CUmemoryPool * p, CUdevice d), DeviceGetMemPool(p, d), "client", "none")                 \
  X(cuDeviceSetMemPool, (CUdevice d, CUmemoryPool p), DeviceSetMemPool(d, p), "client", "none")                   \
  X(cuMemGetDefaultMemPool, (CUmemoryPool * p, CUmemLocation* l, CUmemAllocationType t),                          \
    LocationMemPool(p, l, t, false), "client", "device memory only")                            \
  X(cuMemGetMemPool, (CUmemoryPool * p, CUmemLocation* l, CUmemAllocationType t),                                 \
    LocationMemPool(p, l, t, true), "client", "device memory only")                                   \
  X(cuMemSetMemPool, (CUmemLocation * l, CUmemAllocationType t, CUmemoryPool p), LocationSetMemPool(l, t, p),     \
    "client", "device memory only")                                                                               \
  X(cuMemPoolCreate, (CUmemoryPool * p, const CUmemPoolProps* props), MemPoolCreate(p, props), "client",          \
    "device memory, no shareable handles; none")                                                                  \
  X(cuMemPoolDestroy, (CUmemoryPool p), MemPoolDestroy(p), "client", "none")                                      \
  X(cuMemPoolTrimTo, (CUmemoryPool p, size_t keep), MemPoolTrimTo(p, keep), "client", "nothing cached; none")     \
  X(cuMemPoolSetAttribute, (CUmemoryPool p, CUmemPool_attribute a, void* v), MemPoolSetAttribute(p, a, v),        \
    "client", "none")                                                                                             \
  X(cuMemPoolGetAttribute, (CUmemoryPool p, CUmemPool_attribute a, void* v), MemPoolGetAttribute(p, a, v),        \
    "client", "none")                                                                                             \
  X(cuMemPoolSetAccess, (CUmemoryPool p, const CUmemAccessDesc* m, size_t n), MemPoolSetAccess(p, m, n),          \
    "client", "own device only")                                                                                  \
  X(cuMemPoolGetAccess, (CUmemAccess_flags * f, CUmemoryPool p, CUmemLocation* l), MemPoolGetAccess(f, p, l),     \
    "client", "none")

#endif  // GPUPOOL_INTERPOSE_FORWARD_SPEC_H_
