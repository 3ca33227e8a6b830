// Which shared library a piece of the program's memory belongs to: a library's kernels and its calls into the driver
// are named by it in gpupool's messages, since its users cannot rebuild it.
#ifndef GPUPOOL_INTERPOSE_SHARED_OBJECT_H_
#define GPUPOOL_INTERPOSE_SHARED_OBJECT_H_

#include <string>

namespace gpupool::interpose {

// The file name (no directory) of the shared library that maps `address`, e.g. "libcufft.so.12"; "" when the address
// is the main program's or no loaded object maps it.
std::string SharedLibraryAt(const void* address);

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_SHARED_OBJECT_H_
