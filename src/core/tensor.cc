#include <cstdint>
#include <limits>
#include <sstream>

#include "cgdr/cgdr.hpp"

namespace cgdr {

TensorView::TensorView(const void* p, DType t, std::initializer_list<int64_t> dims)
    : TensorView(p, t, std::vector<int64_t>(dims)) {}

TensorView::TensorView(const void* p, DType t, const std::vector<int64_t>& dims)
    : data(const_cast<void*>(p)), dtype(t), rank(static_cast<int>(dims.size() > kMaxRank ? kMaxRank + 1 : dims.size())) {
  // A rank above kMaxRank is kept as kMaxRank + 1 so validation reports it.
  for (size_t i = 0; i < dims.size() && i < kMaxRank; ++i) shape[i] = dims[i];
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i) {
    const int64_t d = shape[i];
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return std::numeric_limits<int64_t>::max();
    n *= d;
  }
  return n;
}

std::string TensorView::ShapeString() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < rank && i < kMaxRank; ++i) os << (i ? ", " : "") << shape[i];
  if (rank > kMaxRank) os << ", ...";
  os << "]";
  return os.str();
}

}  // namespace cgdr
