// wire::Outcome, the pool protocol's status (pool.capnp), and gpupool::Status: the one translation between them.
// The agent answers its clients with SetOutcome; a client, and the agent reading its session workers' answers (which
// carry an Outcome too: worker.capnp), read it back with StatusOf. Outcome is the contract with clients and agents of
// other versions, so its codes stay as they are: a StatusCode it has no code for travels as `internal`, and a code
// this version does not know (a newer peer's) reads as kInternal.
#ifndef GPUPOOL_SCHEMA_OUTCOME_H_
#define GPUPOOL_SCHEMA_OUTCOME_H_

#include "gpupool/status.h"
#include "pool.capnp.h"

namespace gpupool {

// The Outcome code a status travels as: kResourceExhausted is `busy`, kUnavailable `draining`, and a code Outcome has
// no name for (kUnsatisfiable, kDisconnected, kTimeout, kProtocolMismatch, kInternal) `internal`.
wire::Outcome::Code OutcomeCodeOf(StatusCode code);

// Writes `status`'s code and message; leaves byPolicy and windowTaken to the caller.
void SetOutcome(wire::Outcome::Builder out, const Status& status);

// The status an Outcome carries, its message as sent.
Status StatusOf(wire::Outcome::Reader outcome);

}  // namespace gpupool

#endif  // GPUPOOL_SCHEMA_OUTCOME_H_
