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
#include "io/safetensors.h"

namespace cgdr {
namespace {

// The path escaped: it may come from a file (a manifest's "file"), and messages stay one line.
Status Fail(const std::string& path, const std::string& msg) {
  return Status::Invalid(Cat(PrintableName(path, 1024), ": ", msg));
}

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

// "a FIFO", "a directory", ... for messages about what a path names.
const char* FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a file";
}

constexpr int kMaxSymlinkHops = 40;  // as the kernel's own limit (ELOOP)

// Where a file written to `path` goes (docs/cli.md, "Output paths"): `path`
// itself when it names nothing yet or a regular file; the file a symbolic
// link points to (followed link by link, relative links from the link's own
// folder), so the link stays and its target gets the result. A directory,
// device, FIFO or socket is refused before anything is written.
Status ResolveOutputPath(const std::string& path, std::string* target) {
  std::filesystem::path p(path);
  for (int hops = 0; hops <= kMaxSymlinkHops; ++hops) {
    struct stat st {};
    const std::string shown = PrintableName(p.string(), 1024);  // a link's target, for messages
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno != ENOENT) return Fail(path, Cat("cannot stat '", shown, "': ", std::strerror(errno)));
      *target = p.string();  // a new file (a missing folder is reported when the temporary is created)
      return Status::Ok();
    }
    if (S_ISREG(st.st_mode)) {
      *target = p.string();
      return Status::Ok();
    }
    if (!S_ISLNK(st.st_mode)) {
      const std::string via = hops > 0 ? Cat(" (where the symbolic link leads: '", shown, "')") : "";
      return Fail(path, Cat("is ", FileTypeName(st.st_mode), via,
                            "; results are written only to a new file or over a regular file"));
    }
    std::string link(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096), '\0');
    const ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n < 0) return Fail(path, Cat("cannot read the symbolic link '", shown, "': ", std::strerror(errno)));
    link.resize(static_cast<size_t>(n));
    p = std::filesystem::path(link).is_absolute() ? std::filesystem::path(link) : p.parent_path() / link;
  }
  return Fail(path, Cat("more than ", kMaxSymlinkHops, " symbolic links in a row (a loop?)"));
}

// A temporary beside the target; removed unless Commit() renamed it over the target.
class TempFile {
 public:
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  // `label`: the path as given, for messages; `target`: where the file goes.
  Status Create(const std::string& label, const std::string& target) {
    label_ = label;
    target_ = target;
    const std::filesystem::path t(target);
    if (!t.has_filename()) return Fail(label, "not a file name");
    dir_ = t.parent_path().empty() ? std::filesystem::path(".") : t.parent_path();
    std::string name = ".";  // hidden, and named after the target for whoever finds a leftover
    name += t.filename().string();
    name += ".tmp-XXXXXX";
    std::string tmpl = (dir_ / name).string();
    fd_ = ::mkstemp(tmpl.data());
    if (fd_ < 0)
      return Fail(label, Cat("cannot create a temporary file in '", dir_.string(), "': ", std::strerror(errno)));
    tmp_ = tmpl;
    ::fchmod(fd_, 0644);  // mkstemp makes 0600; results are ordinary files
    return Status::Ok();
  }
  int fd() const { return fd_; }
  // fsync, close, rename over the target, then fsync the directory so the rename is durable.
  Status Commit() {
    if (::fsync(fd_) != 0) return Fail(label_, Cat("cannot sync: ", std::strerror(errno)));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Fail(label_, Cat("cannot close: ", std::strerror(errno)));
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      return Fail(label_, Cat("cannot rename into place: ", std::strerror(errno)));
    tmp_.clear();
    FileDescriptor dir;
    dir.fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir.fd >= 0) ::fsync(dir.fd);  // best effort: the file is complete either way
    return Status::Ok();
  }

 private:
  std::string label_, target_, tmp_;
  std::filesystem::path dir_;
  int fd_ = -1;
};

}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd >= 0) ::close(fd);
}

// stat() comes first, so a FIFO or device is refused without being opened
// (opening a FIFO blocks until a writer appears; opening a device can act on
// it); O_NONBLOCK and fstat() cover a path swapped in between.
Status OpenForReading(const std::string& path, FileDescriptor* f, uint64_t* size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Fail(path, Cat("cannot open: ", std::strerror(errno)));
  if (S_ISREG(st.st_mode)) {
    f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f->fd < 0) return Fail(path, Cat("cannot open: ", std::strerror(errno)));
    if (::fstat(f->fd, &st) != 0) return Fail(path, Cat("cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return Fail(path, Cat("not a regular file (", FileTypeName(st.st_mode), ")"));
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
  std::string target;
  Status s = ResolveOutputPath(path, &target);
  if (!s.ok()) return s;
  TempFile tmp;
  s = tmp.Create(path, target);
  for (size_t i = 0; i < pieces.size() && s.ok(); ++i) s = WriteAll(path, tmp.fd(), pieces[i].first, pieces[i].second);
  if (s.ok()) s = tmp.Commit();
  return s;
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  return WriteFileAtomically(path, {{bytes.data(), bytes.size()}});
}

}  // namespace cgdr
