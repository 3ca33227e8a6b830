#include "core/test_seams.h"

#include <cstdlib>
#include <string_view>

namespace gpupool::test_seams {

// GPUPOOL_TEST_SEAMS is 1 or 0 for this file alone (lib/CMakeLists.txt): a build without the seams has no reader
// of their variables.
#if GPUPOOL_TEST_SEAMS

const char* FakeDevices() { return std::getenv(kFakeDevicesVariable); }

bool EmuSubmissionTurns() {
  const char* v = std::getenv("GPUPOOL_EMU_SUBMISSION_TURNS");
  return v != nullptr && std::string_view(v) == "1";
}

bool TurnEvents() {
  const char* v = std::getenv("GPUPOOL_TURN_EVENTS");
  return v != nullptr && std::string_view(v) == "1";
}

const char* MoveFault() {
  const char* v = std::getenv("GPUPOOL_MOVE_FAULT");
  return v != nullptr ? v : "";
}

const char* PolicyClock() {
  const char* path = std::getenv("GPUPOOL_POLICY_CLOCK");
  return path != nullptr && *path != '\0' ? path : nullptr;
}

#else

const char* FakeDevices() { return nullptr; }
bool EmuSubmissionTurns() { return false; }
bool TurnEvents() { return false; }
const char* PolicyClock() { return nullptr; }
const char* MoveFault() { return ""; }

#endif

}  // namespace gpupool::test_seams
