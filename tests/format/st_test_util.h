// Test helpers: write safetensors files (valid or deliberately broken) from C++.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe::testing {

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// [u64 LE len(header)][header][data]
inline std::string MakeSafetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

// One tensor entry of a header: "name":{"dtype":..,"shape":[..],"data_offsets":[b,e]}
inline std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                         uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// A fresh, empty directory under the build tree (a real file system, so
// O_DIRECT works where the build dir supports it), removed at destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info ? info->test_suite_name() : "t") + "." + (info ? info->name() : "x");
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::path(MOE_BINARY_DIR) / "test_tmp" /
            (tag + "." + name + "." + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct TestTensor {
  std::string name;
  std::string dtype;   // safetensors dtype string
  std::string shape;   // comma-separated dims, e.g. "2,3"
  std::string bytes;   // raw data
};

// A valid safetensors file of `tensors`, laid out in order; each tensor's data
// starts at a multiple of `align` within the data section (gaps are zeros).
inline std::string BuildSafetensors(const std::vector<TestTensor>& tensors, const std::string& metadata_json = "",
                                    uint64_t align = 1) {
  std::string header = "{";
  std::string data;
  if (!metadata_json.empty()) header += "\"__metadata__\":" + metadata_json;
  for (const TestTensor& t : tensors) {
    while (data.size() % align != 0) data.push_back('\0');
    const uint64_t b = data.size();
    data += t.bytes;
    if (header.size() > 1) header += ",";
    header += Entry(t.name, t.dtype, t.shape, b, data.size());
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');
  return MakeSafetensors(header, data);
}

inline std::string Fixture(const std::string& rel) {
  return std::string(MOE_SOURCE_DIR) + "/tests/data/format/" + rel;
}

}  // namespace moe::testing
