// A whole untrusted .safetensors file (through a memfd): SafetensorsReader::Open and, when it
// is accepted, every read path (raw, O_DIRECT-aligned, f32 conversion, row ranges).
// Checks: no crash, no sanitizer report, no read outside the file; accepted tensors lie
// inside the data section.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
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
      if (t.nbytes > size) std::abort();  // a tensor larger than the file was accepted
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
