// libFuzzer target for the safetensors reader (not part of ctest).
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
//         -DMOE_FUZZ=ON -DMOE_SANITIZE=ON -DMOE_BUILD_SERVICES=OFF -DMOE_BUILD_BENCH=OFF
//   cmake --build build-fuzz --target safetensors_fuzz
//   build-fuzz/tests/format/safetensors_fuzz -max_total_time=60 tests/data/format/interop.safetensors
// (a corpus directory of seed files works too). Each input is a whole file:
// it goes through Open (via a memfd) and, when accepted, every read path.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/format/safetensors.h"
#include "common/format/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moe;
  const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto r = SafetensorsReader::Open(path);
  if (r.ok()) {
    const SafetensorsReader& reader = **r;
    AlignedBuffer buf;
    for (const TensorInfo& t : reader.tensors()) {
      if (t.nbytes > (64u << 20) || t.numel() > (16 << 20)) continue;  // keep iterations fast
      std::vector<uint8_t> raw(t.nbytes);
      (void)reader.ReadTensorRaw(t, raw.data());
      (void)reader.ReadTensorDirect(t, &buf);
      std::vector<float> f(static_cast<size_t>(t.numel()));
      (void)reader.ReadTensorF32(t, f.data());
      if (t.rows() > 1) (void)reader.ReadRowsF32(t, 1, t.rows(), f.data());
    }
  }
  ::close(fd);
  return 0;
}
