#include "shared_object.h"

#include <dlfcn.h>
#include <sys/auxv.h>

#include <cstring>

namespace gpupool::interpose {

std::string SharedLibraryAt(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr || info.dli_fname[0] == '\0') {
    return "";
  }
  // The main program: the object holding its own program headers (AT_PHDR).
  Dl_info program{};
  const auto* program_headers = reinterpret_cast<const void*>(getauxval(AT_PHDR));
  if (program_headers != nullptr && dladdr(program_headers, &program) != 0 && program.dli_fbase == info.dli_fbase) {
    return "";
  }
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash != nullptr ? slash + 1 : info.dli_fname;
}

}  // namespace gpupool::interpose
