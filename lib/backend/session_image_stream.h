// A session image (session_image.h) as a stream of bytes, for moving it between processes, servers or a spill file:
// written and read piece by piece through callbacks, so that an image of many GiB never has to sit in one buffer or
// one message (a Cap'n Proto list or Data stops at 2^29 elements). The bytes are treated as hostile when read: every
// count and length is bounded, long runs of bytes are allocated as they arrive rather than as announced, and a short
// or corrupt stream is an error, never a partial image. Little-endian, fixed-width fields; the layout is
// kImageMagic's version.
#ifndef GPUPOOL_BACKEND_SESSION_IMAGE_STREAM_H_
#define GPUPOOL_BACKEND_SESSION_IMAGE_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "backend/session_image.h"
#include "core/call_status.h"

namespace gpupool::backend {

// Takes the next `bytes` bytes of the stream; false when they cannot be written (the stream is then abandoned).
using ImageSink = std::function<bool(const uint8_t* data, size_t bytes)>;
// Fills `data` with the next `bytes` bytes of the stream; false at its end or on an error before that many.
using ImageSource = std::function<bool(uint8_t* data, size_t bytes)>;

CallStatus WriteSessionImage(const SessionImage& image, const ImageSink& sink);
// Reads an image WriteSessionImage wrote. CUDA_ERROR_INVALID_VALUE, naming what is wrong, for anything else.
CallStatus ReadSessionImage(const ImageSource& source, SessionImage* image);
// As above, for an image held whole in memory: `bytes` at `data`.
CallStatus ReadSessionImage(const uint8_t* data, size_t bytes, SessionImage* image);

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_SESSION_IMAGE_STREAM_H_
