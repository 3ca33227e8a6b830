// A session as it stood at a quiet point (nothing queued, nothing running): what it takes to rebuild it on another
// device, or another server, at the same device addresses and with the same handles, so that the pointers its
// program holds (and stores in device memory) and the handles its client holds stay valid. Plain C++ values: how it
// travels between processes is its carrier's business. Taken and applied by the session server
// (SessionControl::checkpoint / restore); the groundwork of moving leases (issue 43).
#ifndef GPUPOOL_BACKEND_SESSION_IMAGE_H_
#define GPUPOOL_BACKEND_SESSION_IMAGE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/device_backend.h"

namespace gpupool::backend {

struct SessionImage {
  // Device memory at an address, with its bytes.
  struct Memory {
    uint64_t address = 0;
    uint64_t bytes = 0;
    std::vector<uint8_t> data;
  };
  struct Module {
    uint64_t handle = 0;
    std::vector<uint8_t> image;    // As the client sent it (moduleLoad).
    std::vector<Memory> variables;  // Where the module placed its variables, in the order it placed them, and their
                                    // values.
  };
  struct Function {
    uint64_t handle = 0;
    uint64_t module = 0;  // Its module's handle.
    std::string name;
    std::vector<std::pair<int, int>> attributes;  // functionSetAttribute's, in the order the client set them.
  };
  struct Global {
    uint64_t address = 0, bytes = 0;
    uint64_t module = 0;
  };
  struct Texture {
    uint64_t handle = 0;  // As the client holds it (the device's, which a restore must give again).
    TextureSpec spec;
  };
  // Virtual memory management: address space reserved, physical memory made, and where it is mapped.
  struct Reservation {
    uint64_t address = 0, bytes = 0;
  };
  struct Physical {
    uint64_t handle = 0, bytes = 0;
    bool released = false;  // The client released it: it lives on in its mappings.
  };
  struct Mapping {
    uint64_t address = 0, bytes = 0;
    uint64_t memory = 0, offset = 0;  // Its physical memory's handle, and where in it the mapping starts.
    std::vector<uint8_t> data;        // The bytes seen there (a physical memory mapped twice is saved twice).
  };

  uint64_t window_base = 0, window_bytes = 0;  // The session's address window: a restore needs the same.
  std::vector<Memory> allocations;            // memAlloc's, with their reserved bytes as `bytes`.
  std::vector<Module> modules;
  std::vector<Function> functions;
  std::vector<Global> globals;  // moduleGetGlobal's answers, which the session's pointer checks accept.
  std::vector<uint64_t> streams, events;  // Handles; the work behind them had all run when the image was taken.
  std::vector<Texture> textures;  // Texture and surface objects.
  std::vector<Reservation> reservations;
  std::vector<Physical> physical;
  std::vector<Mapping> mappings;
  // The allocations' bytes are not in the image: the session's memory stays where it is, in a memory file its next
  // worker maps (EmuBackendConfig::memory_fd, a move within one agent). A checkpoint's caller sets it to ask for that;
  // the checkpoint leaves it set only where it could (a device whose memory is such a file, and no virtual memory
  // mappings, whose physical memory is not in it). A restore of such an image needs a device given that memory
  // (DeviceBackend::MemoryKept).
  bool memory_stays = false;
  // Not part of the stream (session_image_stream.h): set by a checkpoint whose device cannot place module variables
  // (DeviceBackend::PlacesModuleVariables) when the image holds any. A restore of it is refused unless the device
  // happens to place them where they were.
  bool variables_placed_by_driver = false;
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SESSION_IMAGE_H_
