# Between gp-agent and one of its session workers: a child process (gp-agent --session-worker FD) that runs one
# CUDA session, so that a crash, a hung kernel or a sticky error of one tenant never reaches the agent or another
# tenant. Spoken over a socketpair; never exposed on the network.
@0xd7e3a1b2c4f50619;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("gpupool::wire");

using import "session.capnp".Session;
using import "session.capnp".DirectSession;
using import "pool.capnp".Outcome;

struct WorkerConfig {
  emulated @0 :Bool;
  deviceName @1 :Text;        # Emulated devices: the name reported to the client.
  nvmlUuid @2 :Text;          # Physical GPUs: "GPU-..." from NVML, to find the CUDA ordinal.
  memoryBytes @3 :UInt64;     # The slice's memory quota.
  windowBase @4 :UInt64;      # Device addresses lie in [windowBase, windowBase + windowBytes).
  windowBytes @5 :UInt64;
  uuid @6 :Data;              # Emulated devices: 16 bytes.
  pciBus @7 :Int32;
  pciDevice @8 :Int32;
  shareMicros @9 :UInt32;     # Compute share in millionths of the device.
  cudaDriver @10 :Text;       # Physical GPUs: the driver library to load ("" = the system's libcuda.so.1).
  deviceTurns @11 :Bool;      # The device's turns table (backend/device_turns.h) is the worker's fd 4.
  directListen @12 :Text;     # Where to listen for the client's direct connection: "host:0", or "unix:PATH" (the
                              # worker appends ".PID"); "" = nowhere (calls go through the agent only).
  sliceQuota @13 :Bool;       # The slice's quota table (backend/slice_quota.h), shared with the lease's other
                              # sessions on the slice, is the worker's fd 5.
  sessionMeter @14 :Bool;     # The session's meter (backend/session_meter.h), which the agent reads for its
                              # telemetry, is the worker's fd 6.
  computeCapability @15 :UInt16;  # Emulated devices: major * 10 + minor; 0 = 7.5.
  turnsGroup @16 :UInt64;     # The agent's number for the lease on this device: the sessions of one lease share one
                              # weight in the turns table (DeviceTurns::Join's group).
  bytesInFlight @17 :UInt64;  # Most bytes the session holds for calls not yet done before it stops reading its
                              # client (backend::SessionLimits::bytes_in_flight); 0 = the default.
  restore @18 :Bool;          # The session is the one whose image came in restorePiece calls before open (a move:
                              # docs/moving-leases.md); its client resumes on the direct connection.
  restoreConsumed @19 :UInt64;  # The call frames the session had consumed when it was checkpointed.
  memoryFile @20 :Bool;       # Emulated devices: the worker's fd 7 is the memory file that holds the device's memory
                              # (a memfd of the agent's), which a move within the agent gives the session's next worker.
  memoryKept @21 :Bool;       # That file holds the session being restored already (its last worker's): the restore
                              # writes none of its memory.
}

interface SessionWorker {
  open @0 (config :WorkerConfig) -> (outcome :Outcome, session :Session, direct :DirectSession);
  # outcome: ok = opened; otherwise why not (the worker then exits), in the shape the agent answers openSession with
  # (agent and worker are one binary, and the refusal reaches the client as this Outcome). windowTaken: the device
  # could not have the session's address window in the worker (its addresses are in use there): another window may
  # do.

  revoke @1 (reason :Text) -> ();
  # The lease ended: free the session's memory and stop its kernels now; later calls answer "the lease of this
  # session ended: " and the reason (such as "revoked by alice"). The agent kills the worker shortly after.

  checkpoint @2 (quietWithinMs :UInt32, memoryStays :Bool) -> (outcome :Outcome, consumed :UInt64, imageBytes :UInt64,
                                                                placedByDriver :Bool, memoryStayed :Bool);
  # memoryStays: the session's next worker gets this one's memory file, so the image may leave the allocations' bytes
  # out; memoryStayed: it did (backend::SessionImage::memory_stays).
  # For a move: stops reading the client's calls at a frame boundary, waits (up to quietWithinMs) for the session to
  # be quiet, and checkpoints it (backend/session_image.h). ok: the image (imageBytes long, read with imagePiece)
  # and the call frames consumed; the session then serves nothing until `resume`, or the worker is killed. Otherwise
  # why not, and the session serves on as before. placedByDriver: the image's modules have variables whose place a
  # restore cannot choose (a GPU's driver places them): a restore may be refused, so the session must be kept until
  # one has succeeded (a move may go ahead; a suspension, which ends the worker first, may not).

  imagePiece @3 (offset :UInt64) -> (data :Data);
  # Up to 16 MiB of the checkpoint's image from `offset` (empty past its end).

  resume @4 () -> ();
  # The move was abandoned: the session serves its client again.

  restorePiece @5 (data :Data, total :UInt64) -> (outcome :Outcome);
  # Before open: the next piece of the image of the session to restore (WorkerConfig.restore), whose whole length is
  # `total` (room for it is made at the first piece).
}
