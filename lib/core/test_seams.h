// Test seams: the behaviours that exist for tests alone, and the one place that reads the environment variables
// that turn them on. Their reading is compiled in only when the build's CMake option GPUPOOL_TEST_SEAMS is ON (the
// default wherever the tests are built, GPUPOOL_BUILD_TESTS); a release build turns it OFF, and then every seam
// answers "off" and its variable does nothing. A knob that users or operators set (GPUPOOL_LOG,
// GPUPOOL_SHARED_MEMORY...) is no seam: it is read where it acts, and documented in the README.
#ifndef GPUPOOL_CORE_TEST_SEAMS_H_
#define GPUPOOL_CORE_TEST_SEAMS_H_

namespace gpupool::test_seams {

inline constexpr const char* kFakeDevicesVariable = "GPUPOOL_FAKE_DEVICES";

// GPUPOOL_FAKE_DEVICES: the interposer lists fake devices from this spec ("2:16GiB"; lib/interpose/fake_devices.h)
// and forwards nothing, for its own tests (tests/interpose). Null when unset.
const char* FakeDevices();

// GPUPOOL_EMU_SUBMISSION_TURNS=1: a session worker shares an emulated device the way it shares a GPU without MPS (the
// session server holds back the submissions of a lease over its share, rather than the emulator pausing its
// kernels), so that path runs without a GPU (tests/remote, bench/share_bench.sh).
bool EmuSubmissionTurns();

// GPUPOOL_TURN_EVENTS=1: a session worker on a GPU learns that a submission has run (for its turns) from an event
// recorded behind it rather than from a host function, which holds the stream until the driver's callback thread
// has run it (DeviceBackend::WhenRan). An experiment the GPU acceptance kit measures against the default (launch
// rate, compute shares); the default stays until a GPU has said which is better.
bool TurnEvents();

// GPUPOOL_MOVE_FAULT: a session worker fails one step of a move (gp-agent ctl migrate), so that the tests see the lease
// stay where it was with its program running: "checkpoint" (the old worker answers its checkpoint with a failure,
// after stopping its client's calls), "restore" (the new worker refuses the image), "restore-crash" (the new worker
// dies while restoring). Between agents (ctl migrate --to), the agent's own process is killed (SIGKILL) at a step:
// "arrive-piece", "arrive-restore", "arrive-commit" on the agent the lease goes to (as the first image piece comes,
// as the restore and the commit are asked), "leave-restore" on the agent it leaves (its images taken, before it sends
// them); "arrive-refuse" makes the agent it goes to refuse it. Empty when unset.
const char* MoveFault();

// GPUPOOL_POLICY_CLOCK: the path of a file whose first line ("YYYY-MM-DD HH:MM[:SS]", local time) is the time the
// agent's policies go by instead of the wall clock, re-read at every look (tests of time windows). Null when unset or
// empty.
const char* PolicyClock();

}  // namespace gpupool::test_seams

#endif  // GPUPOOL_CORE_TEST_SEAMS_H_
