// What cudart_devices and driver_dlopen share: both take `COUNT [BYTES]` (the devices the interposer is expected to
// show, and each one's memory) and count failed checks, each printed on stdout as one FAIL line (never stderr: the
// tests count the interposer's stderr lines).
#ifndef GPUPOOL_TESTS_INTERPOSE_DEVICE_CHECKS_H_
#define GPUPOOL_TESTS_INTERPOSE_DEVICE_CHECKS_H_

#include <cstdio>
#include <cstdlib>

namespace {

int failures = 0;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++failures;
  }
}

struct ExpectedDevices {
  int count = 0;                 // 0: the program must see no device at all.
  unsigned long long bytes = 0;  // Each device's memory; 0: not given.
};

// COUNT [BYTES] from the command line; without COUNT, prints the usage and exits with status 2.
ExpectedDevices ParseExpectedDevices(int argc, char** argv) {
  if (argc < 2) {
    std::printf("usage: %s COUNT [BYTES]\n", argv[0]);
    std::exit(2);
  }
  ExpectedDevices expected;
  expected.count = std::atoi(argv[1]);
  expected.bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  return expected;
}

}  // namespace

#endif  // GPUPOOL_TESTS_INTERPOSE_DEVICE_CHECKS_H_
