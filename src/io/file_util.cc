#include "io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/strcat.h"

namespace cgdr {
namespace {

Status Fail(const std::string& path, const std::string& msg) { return Status::Invalid(Cat(path, ": ", msg)); }

Status WriteAll(const std::string& path, int fd, const void* p, uint64_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, std::min<uint64_t>(n, 1u << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Fail(path, Cat("cannot write: ", std::strerror(errno)));
    c += w;
    n -= static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

// A temporary beside the target; removed unless Commit() renamed it over the target.
class TempFile {
 public:
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  Status Create(const std::string& target) {
    target_ = target;
    const std::filesystem::path t(target);
    if (!t.has_filename()) return Fail(target, "not a file name");
    dir_ = t.parent_path().empty() ? std::filesystem::path(".") : t.parent_path();
    std::string name = ".";  // hidden, and named after the target for whoever finds a leftover
    name += t.filename().string();
    name += ".tmp-XXXXXX";
    std::string tmpl = (dir_ / name).string();
    fd_ = ::mkstemp(tmpl.data());
    if (fd_ < 0)
      return Fail(target, Cat("cannot create a temporary file in '", dir_.string(), "': ", std::strerror(errno)));
    tmp_ = tmpl;
    ::fchmod(fd_, 0644);  // mkstemp makes 0600; results are ordinary files
    return Status::Ok();
  }
  int fd() const { return fd_; }
  // fsync, close, rename over the target, then fsync the directory so the rename is durable.
  Status Commit() {
    if (::fsync(fd_) != 0) return Fail(target_, Cat("cannot sync: ", std::strerror(errno)));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Fail(target_, Cat("cannot close: ", std::strerror(errno)));
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      return Fail(target_, Cat("cannot rename into place: ", std::strerror(errno)));
    tmp_.clear();
    FileDescriptor dir;
    dir.fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir.fd >= 0) ::fsync(dir.fd);  // best effort: the file is complete either way
    return Status::Ok();
  }

 private:
  std::string target_, tmp_;
  std::filesystem::path dir_;
  int fd_ = -1;
};

}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd >= 0) ::close(fd);
}

Status OpenForReading(const std::string& path, FileDescriptor* f, uint64_t* size) {
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return Fail(path, Cat("cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(f->fd, &st) != 0) return Fail(path, Cat("cannot stat: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return Fail(path, "not a regular file");
  *size = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

Status ReadFull(const std::string& path, int fd, uint8_t* dst, uint64_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, dst, std::min<uint64_t>(n, 1u << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Fail(path, Cat("cannot read: ", std::strerror(errno)));
    if (r == 0) return Fail(path, "unexpected end of file (was it truncated while being read?)");
    dst += r;
    n -= static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, const std::vector<FilePiece>& pieces) {
  TempFile tmp;
  Status s = tmp.Create(path);
  for (size_t i = 0; i < pieces.size() && s.ok(); ++i) s = WriteAll(path, tmp.fd(), pieces[i].first, pieces[i].second);
  if (s.ok()) s = tmp.Commit();
  return s;
}

}  // namespace cgdr
