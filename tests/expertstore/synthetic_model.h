// Test helper: writes synthetic expert shards (random bytes, 4 KiB-aligned
// records, crc32c) and a manifest, standing in for the converted container.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/base/aligned_buffer.h"
#include "common/format/crc32c.h"
#include "common/expertstore/record_locator.h"

namespace moe::expertstore::testing {

struct SyntheticModel {
  std::string dir, manifest;
  std::vector<std::string> files;
  std::vector<std::pair<std::pair<int, int>, RecordLocation>> recs;
  int layers = 0, experts = 0;
};

// Deterministic content of record (layer, expert): byte i = f(layer, expert, i).
inline uint8_t RecordByte(int layer, int expert, uint64_t i) {
  uint64_t x = (uint64_t(layer) * 1000003u + uint64_t(expert) * 7919u + i) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint8_t>(x >> 56);
}

inline std::string MakeTempDir(const std::string& tag) {
  std::string t = "/tmp/moe_" + tag + "_XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back(0);
  char* d = mkdtemp(buf.data());
  return d ? std::string(d) : std::string();
}

// `size_of(layer, expert)` gives each record's length; records go into
// `num_files` shards round-robin by layer.
inline SyntheticModel WriteSyntheticModel(const std::string& dir, int layers, int experts,
                                          const std::function<uint64_t(int, int)>& size_of, int num_files = 2,
                                          const std::string& model_id = "synthetic-test") {
  SyntheticModel m;
  m.dir = dir;
  m.layers = layers;
  m.experts = experts;
  std::vector<int> fds;
  std::vector<uint64_t> ends(num_files, 0);
  for (int f = 0; f < num_files; ++f) {
    m.files.push_back(dir + "/shard-" + std::to_string(f) + ".bin");
    fds.push_back(::open(m.files.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  }
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      int f = l % num_files;
      RecordLocation r;
      r.file = f;
      r.offset = ends[f];
      r.length = size_of(l, e);
      std::vector<uint8_t> buf(AlignUp(r.length, 4096), 0);
      for (uint64_t i = 0; i < r.length; ++i) buf[i] = RecordByte(l, e, i);
      r.crc32c = crc32c::Extend(0, buf.data(), r.length);
      r.num_parts = 3;
      r.part_offsets[0] = 0;
      r.part_offsets[1] = r.length / 3;
      r.part_offsets[2] = 2 * (r.length / 3);
      // The last record of a shard is written unpadded (file ends mid-block).
      size_t n = (l + num_files >= layers && e == experts - 1) ? r.length : buf.size();
      if (::pwrite(fds[f], buf.data(), n, static_cast<off_t>(r.offset)) != ssize_t(n)) return m;
      ends[f] += buf.size();
      m.recs.push_back({{l, e}, r});
    }
  }
  for (int fd : fds) ::close(fd);
  m.manifest = dir + "/experts.manifest";
  auto s = ManifestLocator::Write(m.manifest, model_id, layers, experts, m.files, m.recs);
  (void)s;
  return m;
}

inline bool CheckRecordBytes(const uint8_t* p, int layer, int expert, uint64_t len) {
  for (uint64_t i = 0; i < len; i += 97) {
    if (p[i] != RecordByte(layer, expert, i)) return false;
  }
  return len == 0 || p[len - 1] == RecordByte(layer, expert, len - 1);
}

}  // namespace moe::expertstore::testing
