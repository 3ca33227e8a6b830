#include "agent/image_spill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/util.h"

namespace gpupool::agent {
namespace {

// Runs `work` on a thread of its own and answers its result on the calling thread's event loop.
template <typename T, typename Work>
kj::Promise<T> OnThread(Work work) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<T>();
  // Held by pointer: a kj::Own may throw from its destructor, which a std::thread's function must not.
  auto* fulfiller = new kj::Own<kj::CrossThreadPromiseFulfiller<T>>(kj::mv(paf.fulfiller));
  std::thread([fulfiller, work = std::move(work)]() mutable {
    (*fulfiller)->fulfill(work());
    delete fulfiller;
  }).detach();
  return kj::mv(paf.promise);
}

// A lease's id is its client's choice: only its letters and digits name a file, never a path.
std::string FileNameOf(const std::string& lease_id) {
  std::string name;
  for (char c : lease_id.substr(0, 64)) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

Status Errno(const std::string& what) { return Status(StatusCode::kInternal, what + ": " + std::strerror(errno)); }

Status WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create " + path);
  for (size_t at = 0; at < bytes.size();) {
    ssize_t n = write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = Errno("cannot write " + path);
      close(fd);
      unlink(path.c_str());
      return s;
    }
    at += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    Status s = Errno("cannot write " + path);
    unlink(path.c_str());
    return s;
  }
  return Status::Ok();
}

Result<Image> ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = Errno("cannot read " + path);
    close(fd);
    return s;
  }
  auto image = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(st.st_size));
  for (size_t at = 0; at < image->size();) {
    ssize_t n = read(fd, image->data() + at, image->size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = n == 0 ? Status(StatusCode::kInternal, path + " is shorter than it was") : Errno("cannot read " + path);
      close(fd);
      return s;
    }
    at += static_cast<size_t>(n);
  }
  close(fd);
  return image;
}

}  // namespace

kj::Promise<Result<std::vector<std::string>>> SpillImages(const std::string& dir, const std::string& lease_id,
                                                          std::vector<Image> images) {
  return OnThread<Result<std::vector<std::string>>>(
      [dir, lease_id, images = std::move(images)]() -> Result<std::vector<std::string>> {
        std::vector<std::string> paths;
        for (size_t i = 0; i < images.size(); ++i) {
          std::string path = fmt::format("{}/{}.{}.{}.image", dir, FileNameOf(lease_id), i, RandomHex(8));
          if (Status s = WriteFile(path, *images[i]); !s.ok()) {
            RemoveSpilled(paths);
            return s;
          }
          paths.push_back(std::move(path));
        }
        return paths;
      });
}

kj::Promise<Result<std::vector<Image>>> LoadSpilledImages(std::vector<std::string> paths) {
  return OnThread<Result<std::vector<Image>>>([paths = std::move(paths)]() -> Result<std::vector<Image>> {
    std::vector<Image> images;
    for (const auto& path : paths) {
      auto image = ReadFile(path);
      if (!image.ok()) return image.status();
      images.push_back(std::move(image).value());
    }
    return images;
  });
}

void RemoveSpilled(const std::vector<std::string>& paths) {
  for (const auto& path : paths) unlink(path.c_str());
}

}  // namespace gpupool::agent
