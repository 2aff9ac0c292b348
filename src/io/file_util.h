// Whole-file reads and atomic writes shared by the tensor file formats
// (safetensors, .npy, raw .bin): every error names the file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

// Closes a descriptor on every path out.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor();
};

// Opens a regular file for reading and returns its size.
Status OpenForReading(const std::string& path, FileDescriptor* f, uint64_t* size);

// read() until n bytes; an early end of file is an error.
Status ReadFull(const std::string& path, int fd, uint8_t* dst, uint64_t n);

// Writes the pieces, in order, to a temporary file beside `path`, syncs it and
// renames it over `path`. On any failure the temporary is removed and `path`
// is left as it was.
using FilePiece = std::pair<const void*, uint64_t>;
Status WriteFileAtomically(const std::string& path, const std::vector<FilePiece>& pieces);

}  // namespace cgdr
