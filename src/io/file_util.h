// Whole-file reads and atomic writes shared by the tensor file formats
// (safetensors, .npy, raw .bin): every error names the file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

// Closes a descriptor on every path out.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor();
};

// Opens a regular file for reading and returns its size. Anything else (a
// FIFO, device, socket, directory) is refused before it is opened, so nothing
// can block on it or act on it (docs/cli.md, "Reading case files").
Status OpenForReading(const std::string& path, FileDescriptor* f, uint64_t* size);

// read() until n bytes; an early end of file is an error.
Status ReadFull(const std::string& path, int fd, uint8_t* dst, uint64_t n);

// Writes the pieces, in order, to a temporary file beside the target, syncs it
// and renames it over the target. On any failure the temporary is removed, the
// target is left as it was, and the error names the file. The target (docs/cli.md,
// "Output paths"): `path` if it names nothing yet or a regular file; if it is
// a symbolic link, the file it leads to (the link stays a link); a directory,
// device, FIFO or socket is refused before anything is written.
using FilePiece = std::pair<const void*, uint64_t>;
Status WriteFileAtomically(const std::string& path, const std::vector<FilePiece>& pieces);
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace cgdr
