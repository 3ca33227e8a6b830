# The session service: the CUDA work of one client on one slice, executed by the agent's backend (real driver or
# emulated device). Opened from the pool service with the lease that holds the slice; dropping the capability
# (or the connection) ends the session and frees everything it holds.
@0xc4b1d2e3f4a59687;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("gpupool::wire");

struct CallStatus {
  code @0 :Int32;     # A CUresult value (0 = success).
  message @1 :Text;
}

struct DeviceProps {
  name @0 :Text;
  totalMemory @1 :UInt64;   # The slice's memory, not the card's.
  ccMajor @2 :Int32;
  ccMinor @3 :Int32;
  uuid @4 :Data;            # 16 bytes.
  pciDomain @5 :Int32;
  pciBus @6 :Int32;
  pciDevice @7 :Int32;
  attributes @8 :List(Attribute);  # CUdevice_attribute id -> value, every attribute the backend knows.
  emulated @9 :Bool;
  struct Attribute {
    id @0 :Int32;
    value @1 :Int32;
  }
}

struct Dim3 {
  x @0 :UInt32 = 1;
  y @1 :UInt32 = 1;
  z @2 :UInt32 = 1;
}

struct ParamInfo {
  offset @0 :UInt32;
  size @1 :UInt32;
}

# Where a client reaches its session's worker process directly, without the agent in the middle (one hop less on
# every call). The worker listens until the client enters or a few seconds pass; the ticket opens it once.
struct DirectSession {
  port @0 :UInt16;   # TCP: the worker's port on the host the client reached the agent at.
  path @1 :Text;     # An agent on a Unix socket: the worker's socket.
  ticket @2 :Data;   # 16 random bytes.
}

# The bootstrap interface of a worker's direct listener.
interface SessionDoor {
  enter @0 (ticket :Data) -> (session :Session);
  # A wrong or used ticket fails the call.
}

interface Session {
  # Calls that return values wait for their reply; the others (launch, copies to the device, sets, frees, event
  # records) are sent without waiting: their errors surface at the next synchronising call, in its status.
  # Handles (streams, events, modules, functions) are session-local numbers; 0 is the default stream.

  properties @0 () -> (props :DeviceProps);
  memGetInfo @1 () -> (status :CallStatus, free :UInt64, total :UInt64);
  memAlloc @2 (bytes :UInt64) -> (status :CallStatus, address :UInt64);
  memFree @3 (address :UInt64) -> (status :CallStatus);
  copyToDevice @4 (dst :UInt64, data :Data, stream :UInt64) -> (status :CallStatus);
  copyFromDevice @5 (src :UInt64, bytes :UInt64, stream :UInt64) -> (status :CallStatus, data :Data);
  copyOnDevice @6 (dst :UInt64, src :UInt64, bytes :UInt64, stream :UInt64) -> (status :CallStatus);
  memset @7 (dst :UInt64, value :UInt32, elementSize :UInt8, count :UInt64, stream :UInt64)
      -> (status :CallStatus);
  moduleLoad @8 (image :Data) -> (status :CallStatus, module :UInt64);
  moduleUnload @9 (module :UInt64) -> (status :CallStatus);
  moduleGetFunction @10 (module :UInt64, name :Text)
      -> (status :CallStatus, function :UInt64, params :List(ParamInfo), sharedBytes :Int32, localBytes :Int32,
          numRegs :Int32);
  moduleGetGlobal @11 (module :UInt64, name :Text) -> (status :CallStatus, address :UInt64, bytes :UInt64);
  launch @12 (function :UInt64, grid :Dim3, block :Dim3, sharedBytes :UInt32, stream :UInt64, params :Data,
              cluster :Dim3) -> (status :CallStatus);
  # cluster: thread block cluster dimensions (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION); unset means none.
  streamCreate @13 () -> (status :CallStatus, stream :UInt64);
  streamDestroy @14 (stream :UInt64) -> (status :CallStatus);
  streamSynchronize @15 (stream :UInt64) -> (status :CallStatus, output :Text);
  streamQuery @16 (stream :UInt64) -> (status :CallStatus, output :Text);
  streamWaitEvent @17 (stream :UInt64, event :UInt64) -> (status :CallStatus);
  eventCreate @18 () -> (status :CallStatus, event :UInt64);
  eventDestroy @19 (event :UInt64) -> (status :CallStatus);
  eventRecord @20 (event :UInt64, stream :UInt64) -> (status :CallStatus);
  eventSynchronize @21 (event :UInt64) -> (status :CallStatus, output :Text);
  eventQuery @22 (event :UInt64) -> (status :CallStatus);
  eventElapsed @23 (start :UInt64, end :UInt64) -> (status :CallStatus, ms :Float32);
  synchronize @24 () -> (status :CallStatus, output :Text);
  # The device's own answer to cuOccupancyMaxActiveClusters: it knows how its SMs group (GPCs).
  # cluster all zero: the function's own (compile-time) cluster dimensions.
  occupancyMaxActiveClusters @25 (function :UInt64, grid :Dim3, block :Dim3, sharedBytes :UInt32, cluster :Dim3)
      -> (status :CallStatus, clusters :Int32);
  # cuFuncSetAttribute on the session's function (dynamic shared memory opt-in, cluster requirements...).
  functionSetAttribute @26 (function :UInt64, attribute :Int32, value :Int32) -> (status :CallStatus);
  # `output`: device printf text produced since the last synchronising call, for the client's stdout.
}
