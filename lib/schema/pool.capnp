# The pool service: what a gp-agent offers to clients for allocating slices of its devices.
# Every agent is the authority for its own devices; clients place requests and then reserve + commit.
@0xafb528e2ebba77e0;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("gpupool::wire");
using Session = import "session.capnp".Session;
using DirectSession = import "session.capnp".DirectSession;

const protocolVersion :UInt32 = 3;  # 2: direct session connections speak framed messages. 3: quiet replies.
# Bumped on any incompatible change. hello() is ordinal 0 forever so that every version can tell.

struct Outcome {
  # The result of a call that can fail for ordinary reasons (busy, unknown lease...). Cap'n Proto exceptions
  # are kept for broken connections and bugs.
  code @0 :Code;
  message @1 :Text;
  byPolicy @2 :Bool;  # The refusal is this agent's policy's: another agent's policy may allow the request.
  windowTaken @3 :Bool;  # openSession (code busy): the session's address window is taken on this agent, and another
                         # window may do. Other busy refusals of openSession (the agent's [limits]) would refuse any
                         # window alike.
  moved @4 :LeaseMoved;  # Set (code notFound) when the lease named was moved to another agent: ask there.

  enum Code {
    ok @0;
    invalidArgument @1;
    busy @2;             # Not enough free capacity now.
    notFound @3;         # No such lease or reservation (expired, released, or the agent restarted).
    permissionDenied @4; # Wrong secret for the lease.
    draining @5;         # The agent takes no new reservations.
    internal @6;
  }
}

struct LeaseMoved {
  # Where a lease held here went (gp-agent ctl migrate --to): calls about it go to `server` now, its slice on device
  # fromDevices[i] here being on toDevices[i] there.
  server @0 :Text;  # The agent's address as this agent reached it (the pool's name for it).
  fromDevices @1 :List(UInt32);
  toDevices @2 :List(UInt32);
}

struct LeaseKey {
  id @0 :Text;      # Public: shown by describe().
  secret @1 :Text;  # Private: proves the caller holds the lease.
}

struct Owner {
  user @0 :Text;
  host @1 :Text;
  pid @2 :UInt32;
  label @3 :Text;
}

struct SliceSpec {
  device @0 :UInt32;       # Device index on this agent.
  memoryBytes @1 :UInt64;
  shareMicros @2 :UInt32;  # Compute share in millionths of the device.
}

struct Activity {
  # One telemetry sample of a device or a lease, over the agent's sampling interval (one second).
  unixMs @0 :Int64;                     # When the agent took it.
  memoryUsed @1 :UInt64;                # Device memory in use, bytes.
  utilization @2 :Float32 = -1;         # 0..1 of the interval the device ran its work; negative: unknown.
  callsPerSecond @3 :Float32;
  bytesToDevicePerSecond @4 :Float64;
  bytesFromDevicePerSecond @5 :Float64;
  temperatureC @6 :Float32 = -1;        # Physical GPUs (NVML) only; negative: unknown.
  powerW @7 :Float32 = -1;              # Physical GPUs (NVML) only; negative: unknown.
}

struct Device {
  index @0 :UInt32;
  uuid @1 :Text;
  model @2 :Text;
  deviceClass @3 :Text;
  emulated @4 :Bool;
  memoryTotal @5 :UInt64;
  memoryAllocated @6 :UInt64;
  shareAllocatedMicros @7 :UInt32;
  activity @8 :Activity;          # The latest sample; unset from an agent without telemetry.
  history @9 :List(Activity);     # Oldest first, as many as describe's historySeconds asked for.
  cordoned @10 :Bool;             # An administrator stopped new leases on it; its leases go on.
}

struct SessionView {
  # One running session of a lease: one process's CUDA work on one of its slices.
  device @0 :UInt32;
  pid @1 :UInt32;                 # The session's worker process on the agent's host.
  activity @2 :Activity;
}

struct LeaseView {
  id @0 :Text;
  owner @1 :Owner;
  slices @2 :List(SliceSpec);
  committed @3 :Bool;
  expiresInMs @4 :UInt64;
  ageMs @5 :UInt64;
  activity @6 :Activity;          # The latest sample of all its sessions on this agent; unset before its first.
  history @7 :List(Activity);
  sessions @8 :UInt32;            # Running now (one per process per slice).
  callsTotal @9 :UInt64;          # Since it was granted, ended sessions included.
  bytesToDeviceTotal @10 :UInt64;
  bytesFromDeviceTotal @11 :UInt64;
  idleMs @12 :UInt64;             # Since its last call or device work (or its grant, if none).
  idle @13 :Bool;                 # idleMs has reached the agent's idle threshold.
  userVerified @15 :Bool;         # owner.user was authenticated (kernel, token, TLS certificate); else it is
                                  # "anonymous", whatever the client claimed.
  userClaimed @16 :Text;          # Unverified: the user name the client claimed (shown, trusted for nothing).
  sessionList @14 :List(SessionView);  # Each running session's latest sample.
  suspended @17 :Bool;            # Suspended: its sessions are kept as images, its slices hold nothing of their
                                  # devices until its next call resumes it (devices: where it was).
}

struct AgentState {
  name @0 :Text;
  protocolVersion @1 :UInt32;
  draining @2 :Bool;
  devices @3 :List(Device);
  leases @4 :List(LeaseView);
  leaseTtlMs @5 :UInt64;
  renewIntervalMs @6 :UInt64;
  idleAfterMs @7 :UInt64;         # A lease whose sessions made no call for this long is flagged idle.
  personality @8 :Text;           # The policy personality in force; empty: none (nothing restricted).
  personalityNext @9 :Text;       # What comes next and when ("night from Fri 20:00"); empty: nothing changes.
  policy @10 :Text;               # The agent's personalities, one line each.
  instanceId @11 :Text;           # Random, drawn when the agent starts: two addresses of one agent (a TCP and a Unix
                                  # socket, two host names) answer the same, so a client counts that agent once.
                                  # Empty from an older agent.
  movesUntold @12 :UInt32;        # Leases this agent moved to other agents whose holders may not all know yet (none
                                  # has asked here since, or one did less than a renewal interval ago): stopping
                                  # this agent now could leave a process of them asking in vain.
}

interface Agent {
  hello @0 (clientVersion :UInt32, token :Text) -> (serverVersion :UInt32, name :Text, user :Text, refused :Text);
  # Called first on every connection; the client refuses an agent of another version. `token`: a TCP client's
  # per-user token (ignored on a Unix socket, where the kernel says who the peer is). `user`: who the agent takes
  # the client to be, empty if it could not tell. `refused` non-empty: the agent requires authentication and this
  # connection has none (why, and what to do); every later call on it fails.

  describe @1 (withLeases :Bool, historySeconds :UInt32) -> (state :AgentState);
  # Placement only needs devices; gp-ls asks for the leases too, gp-top for some history of each.

  reserve @2 (lease :LeaseKey, owner :Owner, slices :List(SliceSpec))
      -> (outcome :Outcome, reservationTtlMs :UInt64);
  # All or nothing. The reservation holds the capacity for reservationTtlMs unless committed.

  commit @3 (lease :LeaseKey) -> (outcome :Outcome, leaseTtlMs :UInt64, renewIntervalMs :UInt64);

  renew @4 (lease :LeaseKey) -> (outcome :Outcome, leaseTtlMs :UInt64, slices :List(SliceSpec),
                                 policyEnd :Text, policyEndsInMs :UInt64);
  # Also how a process that attaches to a lease learns its slices on this agent. `policyEnd` non-empty: the
  # agent's policy is to end the lease in `policyEndsInMs` (its personality's max_lease, or the end of a grace after
  # a change of personality whose rules it breaks), and why, so that its holder can warn in time. Empty from an
  # older agent.

  release @5 (lease :LeaseKey) -> (outcome :Outcome);
  # Frees a committed lease (or a reservation) and everything it holds.

  cancel @6 (lease :LeaseKey) -> (outcome :Outcome);
  # Drops an uncommitted reservation (placement rollback). Committed leases are left alone.

  openSession @7 (lease :LeaseKey, device :UInt32, windowBase :UInt64, windowBytes :UInt64, resumeTicket :Data)
      -> (outcome :Outcome, session :Session, direct :DirectSession);
  # Opens the CUDA session of a committed lease's slice on `device`. Device addresses of the session lie in
  # [windowBase, windowBase + windowBytes), chosen by the client so that the pointers of all its slices, on any
  # servers, never collide. Outcome busy with windowTaken: that window is taken on this agent; pick another.
  # `session` reaches the session through the agent; `direct`, when set, says where the client may reach the
  # session's worker itself (then it drops `session`, and the agent forwards nothing).
  # `resumeTicket` set: not a new session, but where the session the client entered with that ticket went when it
  # moved (migrate): `direct` is its new worker's door, restored after the call frames its entered frame says; the
  # client then sends the rest again there (docs/moving-leases.md). notFound: the session did not move, it ended.

  cordon @8 (device :Int32, cordoned :Bool) -> (outcome :Outcome);
  # Administrators only ([auth] admins): stops (cordoned) or resumes new leases on device `device`, or on every
  # device when it is -1. Leases already held go on.

  revoke @9 (leaseId :Text) -> (outcome :Outcome);
  # Administrators only: ends a lease (or reservation) now, without its secret. Its sessions are revoked: their
  # programs' next call fails, saying the lease ended.

  migrate @10 (leaseId :Text, device :Int32) -> (outcome :Outcome, sessions :UInt32, bytes :UInt64, pauseMs :UInt32,
                                                devices :List(UInt32));
  # Administrators only: moves a running lease's slices to other devices of this agent (`device`, or -1: any other
  # that fits), with every session of it, while its programs run: each session is stopped at a quiet point,
  # checkpointed, and restored in a new worker at the same addresses; its client follows it on its next call. On
  # any failure the lease stays where it was, its programs running. Answers the sessions moved, their image bytes,
  # the longest pause, and the devices the lease now holds (by slice).

  suspend @11 (leaseId :Text) -> (outcome :Outcome, sessions :UInt32, bytes :UInt64);
  # Administrators only: stops a running lease's sessions at a quiet point, keeps them as images in the agent's
  # memory and gives its slices back to the pool; the lease keeps its id, token and TTL. Its programs' next CUDA call
  # resumes it (on any of the agent's devices that fits; the call waits while none does). On failure nothing changes.

  resume @12 (leaseId :Text) -> (outcome :Outcome);
  # Administrators only: resumes a suspended lease now rather than at its programs' next call. busy: no room now.

  migrateTo @13 (leaseId :Text, server :Text) -> (outcome :Outcome, sessions :UInt32, bytes :UInt64, pauseMs :UInt32,
                                                  devices :List(UInt32));
  # Administrators only: as migrate, to the agent at `server` (which this agent reaches as a client, and must
  # administer: its uid on a Unix socket, else GPUPOOL_TOKEN in its environment). That agent places the lease as a
  # new one (its policies, classes, cordons) and restores its sessions; then this agent answers calls about the
  # lease with `Outcome.moved`. `devices`: the lease's devices there.

  adopt @14 (lease :LeaseKey, owner :Owner, ownerVerified :Bool, slices :List(ArrivingSlice),
             sessions :List(ArrivingSession)) -> (outcome :Outcome, arrival :LeaseArrival, devices :List(UInt32));
  # Administrators only (another agent, moving a lease here): reserves the lease with its key, as `owner` (verified
  # by the calling agent when ownerVerified), places its slices on devices of the same model and starts a worker
  # per session. The images then arrive through `arrival`; dropping it before its commit ends all of it here.
}

struct ArrivingSlice {
  memoryBytes @0 :UInt64;
  shareMicros @1 :UInt32;
  model @2 :Text;
  emulated @3 :Bool;
  fromDevice @4 :UInt32;  # Its device on the agent it comes from.
  deviceClass @5 :Text;   # That device's class: the lease asked for it (gp-run --class), so it keeps it.
}

struct ArrivingSession {
  slice @0 :UInt32;        # Index in adopt's slices.
  windowBase @1 :UInt64;
  windowBytes @2 :UInt64;
  tickets @3 :List(Data);  # The door tickets its client may ask here with (resumeTicket): the one it entered with last
                           # and, if the session moved before it came back, the ones it entered with before.
}

interface LeaseArrival {
  piece @0 (session :UInt32, offset :UInt64, data :Data, total :UInt64) -> stream;
  # Bytes of a session's checkpoint image, in order from offset 0; `total`: the whole image's size.
  restore @1 (consumed :List(UInt64)) -> (outcome :Outcome);
  # Every image whole (`consumed`: each session's call frames consumed): the sessions are restored; answered once
  # each worker is open (or one failed).
  commit @2 () -> (outcome :Outcome);
  # The lease is this agent's from now on; the arrival is over.
  memory @3 (session :UInt32, offset :UInt64, data :Data) -> stream;
  # Bytes of a session's device memory, `offset` bytes from its window's start, for an image that leaves them out
  # (its memory_stays): written into the memory file of the session's new worker, which restores writing none of it.
}

struct DirectoryEntry {
  # What an agent publishes about itself in the pool's directory (etcd, under PREFIX/agents/INSTANCE-ID, as JSON),
  # kept alive by an etcd lease whose TTL is the agent's liveness. A hint for placement: the agent still decides.
  format @0 :UInt32;              # 1.
  name @1 :Text;
  instanceId @2 :Text;
  address @3 :Text;               # Where clients reach the agent ("host:port", "tls:host:port").
  draining @4 :Bool;
  personality @5 :Text;           # The policy personality in force; empty: none.
  devices @6 :List(Device);       # Without activity and history.
  leases @7 :UInt32;              # Leases held (committed or reserved).
  protocolVersion @8 :UInt32;
  leaseTtlMs @9 :UInt64;
}
