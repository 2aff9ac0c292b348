// Replays the fuzz targets' seed corpora (fuzz/corpus/<target>/*) through the
// same entry functions the libFuzzer binaries call (fuzz/fuzz_targets.h), in
// the normal build and under ASan/UBSan. A broken invariant aborts with its
// message; the file being replayed is printed first so a failure names it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_targets.h"

namespace cgdr::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> CorpusFiles(const char* target) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(CGDR_FUZZ_CORPUS) / target)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Feeds every file of the corpus to `entry`; returns how many were replayed.
size_t Replay(const char* target, int (*entry)(const uint8_t*, size_t)) {
  const std::vector<fs::path> files = CorpusFiles(target);
  for (const fs::path& p : files) {
    std::ifstream f(p, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replaying %s\n", p.c_str());
    EXPECT_EQ(entry(bytes.data(), bytes.size()), 0) << p;
  }
  return files.size();
}

TEST(FuzzReplay, Safetensors) { EXPECT_GE(Replay("safetensors", FuzzSafetensors), 20u); }
TEST(FuzzReplay, Api) { EXPECT_GE(Replay("api", FuzzApi), 20u); }
TEST(FuzzReplay, Differential) { EXPECT_GE(Replay("differential", FuzzDifferential), 20u); }
TEST(FuzzReplay, DecodeDifferential) { EXPECT_GE(Replay("decode_differential", FuzzDecodeDifferential), 20u); }
TEST(FuzzReplay, TensorFiles) { EXPECT_GE(Replay("tensor_files", FuzzTensorFiles), 10u); }

// Inputs of every length up to 64 bytes, all zeros and all ones: the targets
// must accept any byte string, the shortest ones included.
TEST(FuzzReplay, ShortAndUniformInputs) {
  for (uint8_t fill : {uint8_t{0}, uint8_t{0xff}}) {
    for (size_t n = 0; n <= 64; ++n) {
      const std::vector<uint8_t> bytes(n, fill);
      EXPECT_EQ(FuzzSafetensors(bytes.data(), n), 0);
      EXPECT_EQ(FuzzApi(bytes.data(), n), 0);
      EXPECT_EQ(FuzzDifferential(bytes.data(), n), 0);
      EXPECT_EQ(FuzzDecodeDifferential(bytes.data(), n), 0);
      EXPECT_EQ(FuzzTensorFiles(bytes.data(), n), 0);
    }
  }
}

}  // namespace
}  // namespace cgdr::fuzz
