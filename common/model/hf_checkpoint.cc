#include "common/model/hf_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/base/status.h"
#include "common/model/bf16.h"

namespace moe {

using nlohmann::json;

HfCheckpoint::~HfCheckpoint() {
  for (auto& m : maps_) munmap(m.addr, m.size);
}

int64_t HfCheckpoint::total_bytes() const {
  int64_t n = 0;
  for (const auto& [_, t] : tensors_) n += t.bytes;
  return n;
}

const TensorRef* HfCheckpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

static int64_t DtypeSize(const std::string& d) {
  if (d == "F32" || d == "I32") return 4;
  if (d == "BF16" || d == "F16" || d == "I16") return 2;
  if (d == "F8_E4M3" || d == "I8" || d == "U8" || d == "BOOL") return 1;
  if (d == "F64" || d == "I64") return 8;
  return 0;
}

absl::Status HfCheckpoint::AddFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": cannot stat"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": too small for a safetensors file"));
  }
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED) return absl::DataLossError(absl::StrCat(path, ": mmap failed"));
  maps_.push_back({addr, size});
  const uint8_t* base = static_cast<const uint8_t*>(addr);
  uint64_t hlen;
  std::memcpy(&hlen, base, 8);
  if (hlen > size - 8) return absl::DataLossError(absl::StrCat(path, ": header length exceeds file"));
  json h = json::parse(base + 8, base + 8 + hlen, nullptr, false);
  if (h.is_discarded() || !h.is_object()) return absl::DataLossError(absl::StrCat(path, ": bad header JSON"));
  const uint8_t* data = base + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& e = it.value();
    TensorRef t;
    t.name = it.key();
    if (!e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") || !e.contains("data_offsets")) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name, ": incomplete header entry"));
    }
    t.dtype = e["dtype"].get<std::string>();
    for (const auto& d : e["shape"]) t.shape.push_back(d.get<int64_t>());
    const uint64_t b = e["data_offsets"][0].get<uint64_t>(), en = e["data_offsets"][1].get<uint64_t>();
    if (b > en || en > data_size) return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name, ": offsets out of range"));
    const int64_t es = DtypeSize(t.dtype);
    if (es == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", t.name, ": unsupported dtype ", t.dtype));
    if (static_cast<int64_t>(en - b) != t.numel() * es) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name, ": byte size does not match shape"));
    }
    t.data = data + b;
    t.bytes = static_cast<int64_t>(en - b);
    if (tensors_.count(t.name)) return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name, " appears twice"));
    tensors_.emplace(t.name, std::move(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HfCheckpoint>> HfCheckpoint::Open(const std::string& dir) {
  std::unique_ptr<HfCheckpoint> ck(new HfCheckpoint());
  ck->dir_ = dir;
  const std::string index = dir + "/model.safetensors.index.json";
  std::ifstream in(index);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::DataLossError(absl::StrCat(index, ": no weight_map"));
    }
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) files.insert(it.value().get<std::string>());
    for (const auto& f : files) MOE_RETURN_IF_ERROR(ck->AddFile(dir + "/" + f));
  } else {
    MOE_RETURN_IF_ERROR(ck->AddFile(dir + "/model.safetensors"));
  }
  return ck;
}

absl::StatusOr<std::unique_ptr<HfCheckpoint>> HfCheckpoint::OpenFile(const std::string& path) {
  std::unique_ptr<HfCheckpoint> ck(new HfCheckpoint());
  ck->dir_ = path;
  MOE_RETURN_IF_ERROR(ck->AddFile(path));
  return ck;
}

namespace {
float Fp8ToF32(uint8_t v) {
  const int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
  float r;
  if (e == 15 && m == 7) {
    r = NAN;
  } else if (e == 0) {
    r = std::ldexp(static_cast<float>(m), -9);
  } else {
    r = std::ldexp(1.0f + m / 8.0f, e - 7);
  }
  return s ? -r : r;
}
}  // namespace

absl::Status DecodeToF32(const std::string& dtype, const uint8_t* src, int64_t n, float* out) {
  if (dtype == "F32") {
    std::memcpy(out, src, n * 4);
  } else if (dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, src + 2 * i, 2);
      out[i] = BF16BitsToF32(b);
    }
  } else if (dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
      float r;
      if (e == 0) r = std::ldexp(static_cast<float>(m), -24);
      else if (e == 31) r = m ? NAN : INFINITY;
      else r = std::ldexp(1.0f + m / 1024.0f, e - 15);
      out[i] = s ? -r : r;
    }
  } else if (dtype == "F8_E4M3") {
    for (int64_t i = 0; i < n; ++i) out[i] = Fp8ToF32(src[i]);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", dtype));
  }
  return absl::OkStatus();
}

}  // namespace moe
