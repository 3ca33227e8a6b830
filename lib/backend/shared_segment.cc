#include "backend/shared_segment.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace gpupool::backend {

Result<int> CreateSharedSegment(const char* name, size_t bytes) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return Status(StatusCode::kInternal, fmt::format("memfd_create({}): {}", name, std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    return Status(StatusCode::kInternal, fmt::format("sizing {}: {}", name, std::strerror(e)));
  }
  return fd;
}

Result<void*> MapSharedSegment(int fd, size_t bytes, const char* what) {
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    return Status(StatusCode::kInvalidArgument, fmt::format("the {} descriptor is not a {}", what, what));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return Status(StatusCode::kInternal, fmt::format("mapping the {}: {}", what, std::strerror(errno)));
  }
  return p;
}

Result<int> CreateSharedTable(const char* name, size_t bytes, const char* what,
                              const std::function<void(void*)>& init) {
  auto fd = CreateSharedSegment(name, bytes);
  if (!fd.ok()) return fd.status();
  auto p = MapSharedSegment(*fd, bytes, what);
  if (!p.ok()) {
    close(*fd);
    return p.status();
  }
  init(*p);
  munmap(*p, bytes);
  return *fd;
}

void InitRobustMutex(pthread_mutex_t* m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

void LockRobustMutex(pthread_mutex_t* m) {
  if (pthread_mutex_lock(m) == EOWNERDEAD) pthread_mutex_consistent(m);
}

bool MemberLives(pthread_mutex_t* life) {
  int rc = pthread_mutex_trylock(life);
  if (rc == EBUSY) return true;
  if (rc == EOWNERDEAD) pthread_mutex_consistent(life);
  if (rc == 0 || rc == EOWNERDEAD) pthread_mutex_unlock(life);
  return false;
}

}  // namespace gpupool::backend
