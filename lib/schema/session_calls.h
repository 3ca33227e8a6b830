// The session calls, declared once. Everything else follows from this list:
//   - the wire schema (session.capnp is generated from it at build time by session_schema.cc);
//   - the plain C++ arguments and results of each call (calls::MemAlloc::Args, ::Results, below);
//   - their conversion to and from Cap'n Proto messages (session_wire.h);
//   - the client's sending of each call, waited for or not as its mode says (RemoteSession::Invoke);
//   - the session server's wire plumbing (lib/backend/session_server.cc), which hands the plain structs to one
//     handler per call and, through it, to a device backend (lib/backend/device_backend.h).
// Adding a call: one CALL line and one FIELDS macro here, its handler in the session server (handle lookups,
// pointer checks), the backend method that does the work, and the interposer entry point that uses it.
//
// Ordinals are the wire's: never renumber a call; new fields go at the end of their list.
#ifndef GPUPOOL_SCHEMA_SESSION_CALLS_H_
#define GPUPOOL_SCHEMA_SESSION_CALLS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/session_types.h"

// CALL(Name, method, ordinal, mode, doc). `Name` is `method` capitalised (Cap'n Proto's generated names use it).
// Modes, for the client:
//   kReply:  waits for the reply.
//   kPosted: sent without waiting; an error surfaces at the next kSync call, in its status. Only calls whose effect
//            CUDA itself leaves to the device's order (work on a stream, and what no later call can tell apart from
//            done: destroying a handle) are posted. A call that gives memory back to the slice is not: cuMemFree
//            returns with the memory free, and a process of the same lease, or a thread told so, may take it at
//            once; its reply comes when it is free.
//   kSync:   waits; reports first the error of an earlier posted call, if any; the reply carries the device's
//            printf output (`output`), which the client writes to its stdout. A kSync call that waits for the
//            device may be cancelled by a caller that goes away.
// Boilerplate by nature: one declaration a call, each alike in shape.
#define GP_SESSION_CALLS(CALL)                                                                                      \
  CALL(Properties, properties, 0, kReply, "The slice as a device: identity, attributes, the slice's memory.")       \
  CALL(MemGetInfo, memGetInfo, 1, kReply, "Free and total memory of the slice.")                                   \
  CALL(MemAlloc, memAlloc, 2, kReply, "Device memory of the session, inside its window.")                          \
  CALL(MemFree, memFree, 3, kReply,                                                                                 \
       "Frees what memAlloc returned (0: nothing); answered once the memory is free (cuMemFree returns then).")     \
  CALL(CopyToDevice, copyToDevice, 4, kPosted, "Host bytes into one allocation or module variable of the session.") \
  CALL(CopyFromDevice, copyFromDevice, 5, kReply, "At most 64 MiB of the session's device memory, in the reply.")  \
  CALL(CopyOnDevice, copyOnDevice, 6, kPosted, "Device to device, both ranges the session's own.")                 \
  CALL(Memset, memset, 7, kPosted, "Sets `count` elements of 1, 2 or 4 bytes to `value`.")                         \
  CALL(ModuleLoad, moduleLoad, 8, kReply, "A fatbin, cubin or PTX image.")                                         \
  CALL(ModuleUnload, moduleUnload, 9, kPosted, "The module's functions and variables go with it.")                 \
  CALL(ModuleGetFunction, moduleGetFunction, 10, kReply, "A kernel of a module, with its parameter layout.")       \
  CALL(ModuleGetGlobal, moduleGetGlobal, 11, kReply, "A module variable: it is the session's memory from then on.") \
  CALL(Launch, launch, 12, kPosted,                                                                                 \
       "A kernel launch; params: the packed parameter buffer; cluster: thread block cluster dimensions, if any; "   \
       "cooperative: all blocks resident at once (cuLaunchCooperativeKernel).")                                     \
  CALL(StreamCreate, streamCreate, 13, kReply, "A stream of the session.")                                         \
  CALL(StreamDestroy, streamDestroy, 14, kPosted, "The handle goes now; queued work still completes.")             \
  CALL(StreamSynchronize, streamSynchronize, 15, kSync, "Waits for the stream's work.")                             \
  CALL(StreamQuery, streamQuery, 16, kSync, "Whether the stream's work is done (CUDA_ERROR_NOT_READY if not).")    \
  CALL(StreamWaitEvent, streamWaitEvent, 17, kPosted, "Later work of the stream waits for the event.")             \
  CALL(EventCreate, eventCreate, 18, kReply, "An event of the session.")                                           \
  CALL(EventDestroy, eventDestroy, 19, kPosted, "")                                                                 \
  CALL(EventRecord, eventRecord, 20, kPosted, "")                                                                   \
  CALL(EventSynchronize, eventSynchronize, 21, kSync, "Waits for the work before the event's last record.")        \
  CALL(EventQuery, eventQuery, 22, kReply, "")                                                                      \
  CALL(EventElapsed, eventElapsed, 23, kReply, "Milliseconds between two recorded events.")                        \
  CALL(Synchronize, synchronize, 24, kSync, "Waits for all work of the session.")                                  \
  CALL(OccupancyMaxActiveClusters, occupancyMaxActiveClusters, 25, kReply,                                          \
       "The device's answer to cuOccupancyMaxActiveClusters (it knows how its SMs group); cluster all zero: the "   \
       "function's own (compile-time) cluster dimensions.")                                                          \
  CALL(FunctionSetAttribute, functionSetAttribute, 26, kReply,                                                      \
       "cuFuncSetAttribute (dynamic shared memory opt-in, cluster requirements...).")                               \
  CALL(AddressReserve, addressReserve, 27, kReply,                                                                  \
       "Reserves device address space (no memory) in the session's window; hint: a wanted address, or 0.")         \
  CALL(AddressFree, addressFree, 28, kPosted, "Returns a whole reservation; nothing may be mapped in it.")          \
  CALL(MemCreate, memCreate, 29, kReply, "Physical device memory to map (cuMemCreate), counted against the slice.") \
  CALL(MemRelease, memRelease, 30, kReply,                                                                          \
       "Gives up a physical allocation; its memory goes when its last mapping is unmapped.")                       \
  CALL(MemMap, memMap, 31, kReply,                                                                                  \
       "Maps bytes [offset, offset + bytes) of a physical allocation at `address`, inside one reservation, "        \
       "readable and writable by the slice.")                                                                       \
  CALL(MemUnmap, memUnmap, 32, kReply, "Unmaps whole mappings covering [address, address + bytes) exactly.")    \
  CALL(Batch, batch, 33, kPosted,                                                                                   \
       "Posted calls gathered into one message (a graph launch), handled in order as if sent one by one. `calls`: " \
       "for each, its ordinal (u32), the byte length of its arguments (u32) and its arguments as a flat Cap'n "     \
       "Proto message of its Params struct. The first failure surfaces as a posted call's.")                        \
  CALL(StreamWaitValue, streamWaitValue, 34, kPosted,                                                               \
       "Later work of the stream waits until the `width` (4 or 8) bytes at `address` satisfy `flags`' condition "   \
       "against `value` (cuStreamWaitValue32/64: GEQ, EQ, AND, NOR; FLUSH).")                                       \
  CALL(Utilization, utilization, 35, kReply,                                                                        \
       "NVML's utilisation rates of the slice since the previous call: percent of the time kernels ran (gpu) and "  \
       "copies or memsets ran (memory).")                                                                          \
  CALL(CopyToDeviceShared, copyToDeviceShared, 36, kReply,                                                          \
       "Host bytes [offset, offset + bytes) of the connection's shared memory (a client on the worker's host) "     \
       "into the session's memory, in stream order. The reply says those bytes may be reused: they were copied, "   \
       "or set aside because the stream was busy.")                                                                 \
  CALL(CopyFromDeviceShared, copyFromDeviceShared, 37, kReply,                                                      \
       "The session's device bytes into the connection's shared memory at `offset`; replies once they are there.") \
  CALL(TexObjectCreate, texObjectCreate, 38, kReply,                                                                \
       "A texture or surface object over the session's memory (cuTexObjectCreate, cuSurfObjectCreate); the "        \
       "handle is what kernels are given. The memory it takes counts against the slice.")                          \
  CALL(TexObjectDestroy, texObjectDestroy, 39, kPosted,                                                             \
       "Destroys a texture or surface object of the session; kernels queued before may still use it.")

// The fields of each call: ARG(kind, name, Name) for what the client sends, RESULT(kind, name, Name) for what the
// reply carries besides its status. Kinds:
//   U8 U32 U64 I32 F32: numbers.  TEXT: std::string.  DATA: ByteView (a view into the message).
//   DIM3: Dim3.  OPT_DIM3: std::optional<Dim3> (absent on the wire: nullopt).
//   STREAM EVENT MODULE FUNCTION PHYSICAL: session-local handles (StreamId...; stream 0 is the default stream;
//   PHYSICAL: physical memory of memCreate).
//   PARAMS: std::vector<KernelParam>.  PROPS: DeviceInfo.  REPLY_DATA: ReplyBytes (written in place by the server).
#define GP_SESSION_FIELDS_Properties(ARG, RESULT) RESULT(PROPS, props, Props)
#define GP_SESSION_FIELDS_MemGetInfo(ARG, RESULT) RESULT(U64, free, Free) RESULT(U64, total, Total)
#define GP_SESSION_FIELDS_MemAlloc(ARG, RESULT) ARG(U64, bytes, Bytes) RESULT(U64, address, Address)
#define GP_SESSION_FIELDS_MemFree(ARG, RESULT) ARG(U64, address, Address)
#define GP_SESSION_FIELDS_CopyToDevice(ARG, RESULT) \
  ARG(U64, dst, Dst) ARG(DATA, data, Data) ARG(STREAM, stream, Stream)
#define GP_SESSION_FIELDS_CopyFromDevice(ARG, RESULT) \
  ARG(U64, src, Src) ARG(U64, bytes, Bytes) ARG(STREAM, stream, Stream) RESULT(REPLY_DATA, data, Data)
#define GP_SESSION_FIELDS_CopyOnDevice(ARG, RESULT) \
  ARG(U64, dst, Dst) ARG(U64, src, Src) ARG(U64, bytes, Bytes) ARG(STREAM, stream, Stream)
#define GP_SESSION_FIELDS_Memset(ARG, RESULT)                                                                  \
  ARG(U64, dst, Dst) ARG(U32, value, Value) ARG(U8, element_size, ElementSize) ARG(U64, count, Count)          \
  ARG(STREAM, stream, Stream)
#define GP_SESSION_FIELDS_ModuleLoad(ARG, RESULT) ARG(DATA, image, Image) RESULT(MODULE, module, Module)
#define GP_SESSION_FIELDS_ModuleUnload(ARG, RESULT) ARG(MODULE, module, Module)
#define GP_SESSION_FIELDS_ModuleGetFunction(ARG, RESULT)                                                       \
  ARG(MODULE, module, Module) ARG(TEXT, name, Name) RESULT(FUNCTION, function, Function)                       \
  RESULT(PARAMS, params, Params) RESULT(I32, shared_bytes, SharedBytes) RESULT(I32, local_bytes, LocalBytes)   \
  RESULT(I32, num_regs, NumRegs) RESULT(I32, ptx_version, PtxVersion)                                   \
  RESULT(I32, max_threads_per_block, MaxThreadsPerBlock)
#define GP_SESSION_FIELDS_ModuleGetGlobal(ARG, RESULT) \
  ARG(MODULE, module, Module) ARG(TEXT, name, Name) RESULT(U64, address, Address) RESULT(U64, bytes, Bytes)
#define GP_SESSION_FIELDS_Launch(ARG, RESULT)                                                                  \
  ARG(FUNCTION, function, Function) ARG(DIM3, grid, Grid) ARG(DIM3, block, Block)                               \
  ARG(U32, shared_bytes, SharedBytes) ARG(STREAM, stream, Stream) ARG(DATA, params, Params)                     \
  ARG(OPT_DIM3, cluster, Cluster) ARG(U8, cooperative, Cooperative)
#define GP_SESSION_FIELDS_StreamCreate(ARG, RESULT) RESULT(STREAM, stream, Stream)
#define GP_SESSION_FIELDS_StreamDestroy(ARG, RESULT) ARG(STREAM, stream, Stream)
#define GP_SESSION_FIELDS_StreamSynchronize(ARG, RESULT) ARG(STREAM, stream, Stream) RESULT(TEXT, output, Output)
#define GP_SESSION_FIELDS_StreamQuery(ARG, RESULT) ARG(STREAM, stream, Stream) RESULT(TEXT, output, Output)
#define GP_SESSION_FIELDS_StreamWaitEvent(ARG, RESULT) ARG(STREAM, stream, Stream) ARG(EVENT, event, Event)
#define GP_SESSION_FIELDS_EventCreate(ARG, RESULT) RESULT(EVENT, event, Event)
#define GP_SESSION_FIELDS_EventDestroy(ARG, RESULT) ARG(EVENT, event, Event)
#define GP_SESSION_FIELDS_EventRecord(ARG, RESULT) ARG(EVENT, event, Event) ARG(STREAM, stream, Stream)
#define GP_SESSION_FIELDS_EventSynchronize(ARG, RESULT) ARG(EVENT, event, Event) RESULT(TEXT, output, Output)
#define GP_SESSION_FIELDS_EventQuery(ARG, RESULT) ARG(EVENT, event, Event)
#define GP_SESSION_FIELDS_EventElapsed(ARG, RESULT) \
  ARG(EVENT, start, Start) ARG(EVENT, end, End) RESULT(F32, ms, Ms)
#define GP_SESSION_FIELDS_Synchronize(ARG, RESULT) RESULT(TEXT, output, Output)
#define GP_SESSION_FIELDS_OccupancyMaxActiveClusters(ARG, RESULT)                                              \
  ARG(FUNCTION, function, Function) ARG(DIM3, grid, Grid) ARG(DIM3, block, Block)                               \
  ARG(U32, shared_bytes, SharedBytes) ARG(DIM3, cluster, Cluster) RESULT(I32, clusters, Clusters)
#define GP_SESSION_FIELDS_FunctionSetAttribute(ARG, RESULT) \
  ARG(FUNCTION, function, Function) ARG(I32, attribute, Attribute) ARG(I32, value, Value)
#define GP_SESSION_FIELDS_AddressReserve(ARG, RESULT) \
  ARG(U64, bytes, Bytes) ARG(U64, alignment, Alignment) ARG(U64, hint, Hint) RESULT(U64, address, Address)
#define GP_SESSION_FIELDS_AddressFree(ARG, RESULT) ARG(U64, address, Address) ARG(U64, bytes, Bytes)
#define GP_SESSION_FIELDS_MemCreate(ARG, RESULT) ARG(U64, bytes, Bytes) RESULT(PHYSICAL, memory, Memory)
#define GP_SESSION_FIELDS_MemRelease(ARG, RESULT) ARG(PHYSICAL, memory, Memory)
#define GP_SESSION_FIELDS_MemMap(ARG, RESULT) \
  ARG(U64, address, Address) ARG(U64, bytes, Bytes) ARG(U64, offset, Offset) ARG(PHYSICAL, memory, Memory)
#define GP_SESSION_FIELDS_MemUnmap(ARG, RESULT) ARG(U64, address, Address) ARG(U64, bytes, Bytes)
#define GP_SESSION_FIELDS_Batch(ARG, RESULT) ARG(DATA, calls, Calls)
#define GP_SESSION_FIELDS_Utilization(ARG, RESULT) RESULT(U32, gpu, Gpu) RESULT(U32, memory, Memory)
#define GP_SESSION_FIELDS_CopyToDeviceShared(ARG, RESULT) \
  ARG(U64, dst, Dst) ARG(U64, offset, Offset) ARG(U64, bytes, Bytes) ARG(STREAM, stream, Stream)
#define GP_SESSION_FIELDS_CopyFromDeviceShared(ARG, RESULT) \
  ARG(U64, src, Src) ARG(U64, offset, Offset) ARG(U64, bytes, Bytes) ARG(STREAM, stream, Stream)
// TexObjectCreate: `surface` 1 for a surface object; `resource` how the client described the memory (0 a CUDA
// array, 1 linear memory, 2 pitch2D memory); `format` a CUarray_format; the texels of layer or depth slice s, row y
// start at address + s * slice_pitch + y * pitch; `address_modes` three CUaddress_mode values, x in the low byte;
// `filter` a CUfilter_mode; `flags` CU_TRSF_* bits; border0..3 the border colour.
#define GP_SESSION_FIELDS_TexObjectCreate(ARG, RESULT)                                                         \
  ARG(U8, surface, Surface) ARG(U8, resource, Resource) ARG(U8, dims, Dims) ARG(U32, format, Format)            \
  ARG(U8, channels, Channels) ARG(U64, address, Address) ARG(U64, pitch, Pitch) ARG(U64, slice_pitch, SlicePitch) \
  ARG(U32, width, Width) ARG(U32, height, Height) ARG(U32, depth, Depth) ARG(U32, layers, Layers)               \
  ARG(U32, address_modes, AddressModes) ARG(U8, filter, Filter) ARG(U32, flags, Flags)                          \
  ARG(F32, border0, Border0) ARG(F32, border1, Border1) ARG(F32, border2, Border2) ARG(F32, border3, Border3)   \
  RESULT(U64, handle, Handle)
#define GP_SESSION_FIELDS_TexObjectDestroy(ARG, RESULT) ARG(U64, handle, Handle)
#define GP_SESSION_FIELDS_StreamWaitValue(ARG, RESULT)                                                         \
  ARG(STREAM, stream, Stream) ARG(U64, address, Address) ARG(U64, value, Value) ARG(U8, width, Width)          \
  ARG(U32, flags, Flags)

// The C++ type of each kind.
#define GP_SESSION_TYPE_U8 uint8_t
#define GP_SESSION_TYPE_U32 uint32_t
#define GP_SESSION_TYPE_U64 uint64_t
#define GP_SESSION_TYPE_I32 int32_t
#define GP_SESSION_TYPE_F32 float
#define GP_SESSION_TYPE_TEXT std::string
#define GP_SESSION_TYPE_DATA ::gpupool::session::ByteView
#define GP_SESSION_TYPE_DIM3 ::gpupool::session::Dim3
#define GP_SESSION_TYPE_OPT_DIM3 std::optional<::gpupool::session::Dim3>
#define GP_SESSION_TYPE_STREAM ::gpupool::session::StreamId
#define GP_SESSION_TYPE_EVENT ::gpupool::session::EventId
#define GP_SESSION_TYPE_MODULE ::gpupool::session::ModuleId
#define GP_SESSION_TYPE_FUNCTION ::gpupool::session::FunctionId
#define GP_SESSION_TYPE_PHYSICAL ::gpupool::session::PhysicalId
#define GP_SESSION_TYPE_PARAMS std::vector<::gpupool::session::KernelParam>
#define GP_SESSION_TYPE_PROPS ::gpupool::session::DeviceInfo
#define GP_SESSION_TYPE_REPLY_DATA ::gpupool::session::ReplyBytes

// Whether a kind is a view of bytes owned elsewhere.
#define GP_SESSION_VIEW_DATA true
#define GP_SESSION_VIEW_U8 false
#define GP_SESSION_VIEW_U32 false
#define GP_SESSION_VIEW_U64 false
#define GP_SESSION_VIEW_I32 false
#define GP_SESSION_VIEW_F32 false
#define GP_SESSION_VIEW_TEXT false
#define GP_SESSION_VIEW_DIM3 false
#define GP_SESSION_VIEW_OPT_DIM3 false
#define GP_SESSION_VIEW_STREAM false
#define GP_SESSION_VIEW_EVENT false
#define GP_SESSION_VIEW_MODULE false
#define GP_SESSION_VIEW_FUNCTION false
#define GP_SESSION_VIEW_PHYSICAL false
#define GP_SESSION_VIEW_PARAMS false
#define GP_SESSION_VIEW_PROPS false
#define GP_SESSION_VIEW_REPLY_DATA true

namespace gpupool::session {

enum class Mode { kReply, kPosted, kSync };

// calls::<Name>: the call's name, ordinal and mode, and its arguments and results as plain structs.
namespace calls {
#define GP_SESSION_FIELD(kind, name, Name) GP_SESSION_TYPE_##kind name{};
#define GP_SESSION_NO_FIELD(kind, name, Name)
#define GP_SESSION_IS_VIEW(kind, name, Name) || GP_SESSION_VIEW_##kind
#define GP_SESSION_DECLARE(Name, method, ordinal, mode, doc)                   \
  struct Name {                                                                \
    static constexpr const char* kMethod = #method;                            \
    static constexpr int kOrdinal = ordinal;                                   \
    static constexpr Mode kMode = Mode::mode;                                  \
    /* Whether Args views bytes it does not own (DATA fields). */              \
    static constexpr bool kArgsView =                                          \
        false GP_SESSION_FIELDS_##Name(GP_SESSION_IS_VIEW, GP_SESSION_NO_FIELD); \
    struct Args {                                                              \
      GP_SESSION_FIELDS_##Name(GP_SESSION_FIELD, GP_SESSION_NO_FIELD)          \
    };                                                                         \
    struct Results {                                                           \
      GP_SESSION_FIELDS_##Name(GP_SESSION_NO_FIELD, GP_SESSION_FIELD)          \
    };                                                                         \
  };
GP_SESSION_CALLS(GP_SESSION_DECLARE)
#undef GP_SESSION_DECLARE
#undef GP_SESSION_IS_VIEW
#undef GP_SESSION_NO_FIELD
#undef GP_SESSION_FIELD
}  // namespace calls

}  // namespace gpupool::session

#endif  // GPUPOOL_SCHEMA_SESSION_CALLS_H_
