#include "common/format/container.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status.h"
#include "common/format/crc32c.h"
#include "common/format/quantize.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using nlohmann::json;

absl::Status Loss(const std::string& path, std::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", AV(what)));
}

int64_t ExpertKey(int layer, int expert) { return (static_cast<int64_t>(layer) << 32) | expert; }

}  // namespace

absl::StatusOr<ShardContents> ReadShardContents(const SafetensorsReader& reader, int file) {
  const ShardFile& f = reader.file(file);
  const auto& md = f.metadata;
  auto get = [&](std::string_view key) -> const std::string* {
    auto it = md.find(std::string(key));
    return it == md.end() ? nullptr : &it->second;
  };
  const std::string* magic = get(kMetaMagic);
  if (magic == nullptr || *magic != kContainerMagic) {
    return Loss(f.path, "not a moestream container shard (metadata moestream.magic missing)");
  }
  const std::string* version = get(kMetaVersion);
  if (version == nullptr || *version != std::to_string(kContainerVersion)) {
    return Loss(f.path, absl::StrCat("unsupported container version '",
                                     version ? *version : "", "' (this build reads ",
                                     kContainerVersion, ")"));
  }
  const std::string* tj = get(kMetaTensors);
  const std::string* rj = get(kMetaRecords);
  if (tj == nullptr || rj == nullptr) return Loss(f.path, "missing moestream.tensors/records");
  ShardContents out;
  if (const std::string* plan = get(kMetaPlan)) out.plan = *plan;
  json tensors = json::parse(*tj, nullptr, false);
  json records = json::parse(*rj, nullptr, false);
  if (!tensors.is_object() || !records.is_array()) {
    return Loss(f.path, "moestream.tensors/records is not valid JSON");
  }
  absl::flat_hash_map<std::string, int> index;
  try {
    for (auto& [name, m] : tensors.items()) {
      ContainerTensor t;
      t.name = name;
      t.file = file;
      auto fmt = QFormatFromName(m.at("format").get<std::string>());
      if (!fmt) return Loss(f.path, absl::StrCat("tensor '", name, "': unknown format tag"));
      t.format = *fmt;
      t.role = m.at("role").get<std::string>();
      t.layer = m.at("layer").get<int>();
      t.expert = m.value("expert", -1);
      t.mtp = m.value("mtp", false);
      t.shape = m.at("shape").get<std::vector<int64_t>>();
      if (!MatrixDims(t.shape, &t.rows, &t.cols).ok()) {
        return Loss(f.path, absl::StrCat("tensor '", name, "': bad shape"));
      }
      if (!ParseHex32(m.at("crc32c").get<std::string>(), &t.crc)) {
        return Loss(f.path, absl::StrCat("tensor '", name, "': bad crc32c"));
      }
      LayoutTensor lt;
      lt.format = t.format;
      lt.shape = t.shape;
      lt.rows = t.rows;
      lt.cols = t.cols;
      const TensorInfo* data = reader.Find(m.at("data").get<std::string>());
      if (data == nullptr || data->file != file || DTypeName(data->dtype) != DataDType(t.format) ||
          data->shape != DataShape(lt) ||
          data->nbytes != static_cast<uint64_t>(DataBytes(t.format, t.rows, t.cols))) {
        return Loss(f.path, absl::StrCat("tensor '", name, "': data tensor missing or not ",
                                         AV(Name(t.format)), " of shape [", t.rows, ", ", t.cols,
                                         "]"));
      }
      t.data_offset = data->offset;
      t.data_bytes = data->nbytes;
      const uint64_t sbytes = static_cast<uint64_t>(ScaleBytes(t.format, t.rows, t.cols));
      if (sbytes > 0) {
        const TensorInfo* sc = m.contains("scales")
                                   ? reader.Find(m.at("scales").get<std::string>())
                                   : nullptr;
        if (sc == nullptr || sc->file != file || sc->dtype != DType::kF32 || sc->nbytes != sbytes) {
          return Loss(f.path, absl::StrCat("tensor '", name, "': scale tensor missing or wrong size"));
        }
        t.scales_offset = sc->offset;
        t.scales_bytes = sbytes;
      }
      index[name] = static_cast<int>(out.tensors.size());
      out.tensors.push_back(std::move(t));
    }
    for (const auto& r : records) {
      ShardContents::Record rec;
      rec.layer = r.at("layer").get<int>();
      rec.expert = r.at("expert").get<int>();
      rec.offset = r.at("offset").get<uint64_t>() + f.data_offset;
      rec.length = r.at("length").get<uint64_t>();
      const std::string where = absl::StrCat("expert record (", rec.layer, ", ", rec.expert, ")");
      if (!ParseHex32(r.at("crc32c").get<std::string>(), &rec.crc)) {
        return Loss(f.path, where + ": bad crc32c");
      }
      if (rec.offset % kRecordAlign != 0 || rec.length % kRecordAlign != 0 ||
          rec.offset + rec.length > f.size || rec.offset + rec.length < rec.offset) {
        return Loss(f.path, where + ": not 4096-aligned or outside the file");
      }
      const auto parts = r.at("parts").get<std::vector<std::string>>();
      if (parts.size() != 3) return Loss(f.path, where + ": needs 3 parts");
      for (int p = 0; p < 3; ++p) {
        auto it = index.find(parts[p]);
        if (it == index.end()) return Loss(f.path, where + ": unknown part " + parts[p]);
        const ContainerTensor& t = out.tensors[it->second];
        if (t.data_offset < rec.offset || t.data_offset + t.data_bytes > rec.offset + rec.length ||
            (t.scales_bytes > 0 && (t.scales_offset < rec.offset ||
                                    t.scales_offset + t.scales_bytes > rec.offset + rec.length))) {
          return Loss(f.path, where + ": part " + parts[p] + " lies outside the record");
        }
        rec.parts[p] = it->second;
      }
      out.records.push_back(rec);
    }
  } catch (const json::exception& e) {
    return Loss(f.path, absl::StrCat("malformed moestream metadata: ", e.what()));
  }
  return out;
}

absl::Status VerifyShardData(const SafetensorsReader& reader, int file,
                             const ShardContents& contents) {
  const std::string& path = reader.file(file).path;
  // CRCs over fixed chunks: memory stays at one chunk whatever the tensor
  // (GLM-5's lm_head is ~1 GB at q8).
  constexpr uint64_t kChunk = 8ull << 20;
  std::vector<uint8_t> buf(kChunk);
  auto extend = [&](uint32_t crc, uint64_t off, uint64_t len) -> absl::StatusOr<uint32_t> {
    for (uint64_t done = 0; done < len;) {
      const uint64_t n = std::min(kChunk, len - done);
      MOE_RETURN_IF_ERROR(reader.ReadRange(file, off + done, n, buf.data()));
      crc = crc32c::Extend(crc, buf.data(), n);
      done += n;
    }
    return crc;
  };
  for (const auto& t : contents.tensors) {
    MOE_ASSIGN_OR_RETURN(uint32_t crc, extend(0, t.data_offset, t.data_bytes));
    MOE_ASSIGN_OR_RETURN(crc, extend(crc, t.scales_offset, t.scales_bytes));
    if (crc32c::Mask(crc) != t.crc) {
      return Loss(path, absl::StrCat("tensor '", t.name, "': CRC32C mismatch"));
    }
  }
  for (const auto& r : contents.records) {
    MOE_ASSIGN_OR_RETURN(uint32_t crc, extend(0, r.offset, r.length));
    if (crc32c::Mask(crc) != r.crc) {
      return Loss(path, absl::StrCat("expert record (", r.layer, ", ", r.expert,
                                     "): CRC32C mismatch"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ContainerInfo> ParseContainerManifest(std::string_view text, const std::string& path) {
  auto parsed = ParseJson(text);  // depth-bounded: the file may be anything
  if (!parsed.ok()) return Loss(path, absl::StrCat("not a moestream manifest: ", parsed.status().message()));
  const json& m = *parsed;
  ContainerInfo info;
  try {
    if (!m.is_object() || m.value("magic", "") != kContainerMagic) {
      return Loss(path, "not a moestream manifest (magic)");
    }
    info.version = m.at("version").get<int>();
    if (info.version != kContainerVersion) {
      return Loss(path, absl::StrCat("unsupported container version ", info.version));
    }
    const json& model = m.at("model");
    info.model_type = model.at("model_type").get<std::string>();
    info.num_hidden_layers = model.at("num_hidden_layers").get<int>();
    info.n_routed_experts = model.value("n_routed_experts", 0);
    if (info.num_hidden_layers < 0 || info.n_routed_experts < 0) {
      return Loss(path, "negative num_hidden_layers or n_routed_experts");
    }
    info.policy = m.value("policy", "");
    info.plan = m.value("plan", "");
    for (const auto& s : m.at("shards")) {
      std::string file = s.at("file").get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        return Loss(path, absl::StrCat("shard file name '", file, "' is not a plain file name"));
      }
      info.shards.push_back(std::move(file));
    }
  } catch (const json::exception& e) {
    return Loss(path, absl::StrCat("malformed manifest: ", e.what()));
  }
  return info;
}

absl::StatusOr<std::unique_ptr<Container>> Container::Open(const std::string& dir) {
  const std::string mpath = dir + "/" + std::string(kManifestFileName);
  std::ifstream in(mpath);
  if (!in) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, ": no ", AV(kManifestFileName),
        " (not a moestream container, or `moe convert` has not finished)"));
  }
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::unique_ptr<Container> c(new Container);
  MOE_ASSIGN_OR_RETURN(c->info_, ParseContainerManifest(text, mpath));
  c->plan_ = c->info_.plan;
  c->dir_ = dir;
  OpenOptions opt;
  opt.check_fp8_scales = false;
  MOE_ASSIGN_OR_RETURN(c->reader_, SafetensorsReader::Open(dir, opt));
  for (int f = 0; f < c->reader_->num_files(); ++f) {
    MOE_ASSIGN_OR_RETURN(ShardContents sc, ReadShardContents(*c->reader_, f));
    const int base = static_cast<int>(c->tensors_.size());
    for (auto& t : sc.tensors) {
      if (!c->by_name_.emplace(t.name, static_cast<int>(c->tensors_.size())).second) {
        return Loss(c->reader_->file(f).path, "tensor '" + t.name + "' appears in two shards");
      }
      c->tensors_.push_back(std::move(t));
    }
    for (const auto& r : sc.records) {
      ExpertRecordInfo e;
      e.layer = r.layer;
      e.expert = r.expert;
      e.file = f;
      e.offset = r.offset;
      e.length = r.length;
      e.crc = r.crc;
      for (int p = 0; p < 3; ++p) e.parts[p].data_offset = r.parts[p] + base;  // fixed below
      if (!c->by_expert_.emplace(ExpertKey(r.layer, r.expert), static_cast<int>(c->records_.size()))
               .second) {
        return Loss(c->reader_->file(f).path,
                    absl::StrCat("expert (", r.layer, ", ", r.expert, ") stored twice"));
      }
      c->records_.push_back(e);
    }
  }
  // Resolve part pointers now that tensors_ no longer moves.
  for (auto& e : c->records_) {
    for (auto& p : e.parts) {
      p.tensor = &c->tensors_[p.data_offset];
      p.data_offset = p.tensor->data_offset - e.offset;
      p.scales_offset = p.tensor->scales_bytes > 0 ? p.tensor->scales_offset - e.offset : 0;
    }
  }
  return c;
}

const ContainerTensor* Container::Find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const ExpertRecordInfo* Container::FindExpert(int layer, int expert) const {
  auto it = by_expert_.find(ExpertKey(layer, expert));
  return it == by_expert_.end() ? nullptr : &records_[it->second];
}

absl::StatusOr<std::span<const uint8_t>> Container::ReadRecord(const ExpertRecordInfo& r,
                                                               AlignedBuffer* buf) const {
  MOE_ASSIGN_OR_RETURN(auto span, reader_->ReadRangeDirect(r.file, r.offset, r.length, buf));
  if (crc32c::Mask(crc32c::Value(span.data(), span.size())) != r.crc) {
    return Loss(file_path(r.file),
                absl::StrCat("expert record (", r.layer, ", ", r.expert, "): CRC32C mismatch"));
  }
  return span;
}

std::array<QMatrixView, 3> Container::ViewRecord(const ExpertRecordInfo& r, const uint8_t* record) {
  std::array<QMatrixView, 3> v;
  for (int p = 0; p < 3; ++p) {
    const ContainerTensor& t = *r.parts[p].tensor;
    v[p].format = t.format;
    v[p].rows = t.rows;
    v[p].cols = t.cols;
    v[p].data = record + r.parts[p].data_offset;
    v[p].scales = t.scales_bytes > 0
                      ? reinterpret_cast<const float*>(record + r.parts[p].scales_offset)
                      : nullptr;
  }
  return v;
}

absl::Status Container::ReadTensor(const ContainerTensor& t, std::vector<uint8_t>* data,
                                   std::vector<float>* scales) const {
  data->resize(t.data_bytes);
  scales->resize(t.scales_bytes / 4);
  MOE_RETURN_IF_ERROR(reader_->ReadRange(t.file, t.data_offset, t.data_bytes, data->data()));
  uint32_t crc = crc32c::Value(data->data(), data->size());
  if (t.scales_bytes > 0) {
    MOE_RETURN_IF_ERROR(reader_->ReadRange(t.file, t.scales_offset, t.scales_bytes, scales->data()));
    crc = crc32c::Extend(crc, scales->data(), t.scales_bytes);
  }
  if (crc32c::Mask(crc) != t.crc) {
    return Loss(file_path(t.file), absl::StrCat("tensor '", t.name, "': CRC32C mismatch"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Container::ReadTensorF32(const ContainerTensor& t) const {
  std::vector<uint8_t> data;
  std::vector<float> scales;
  MOE_RETURN_IF_ERROR(ReadTensor(t, &data, &scales));
  std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
  DequantizeMatrix(t.format, data.data(), scales.data(), t.rows, t.cols, out.data());
  return out;
}

namespace {

// One read-only shared mapping of a whole file; unmapped when the last holder goes.
struct FileMapping {
  void* addr = MAP_FAILED;
  size_t len = 0;
  ~FileMapping() {
    if (addr != MAP_FAILED) munmap(addr, len);
  }
};

absl::StatusOr<std::shared_ptr<FileMapping>> MapWholeFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(e)));
  }
  auto m = std::make_shared<FileMapping>();
  m->len = static_cast<size_t>(st.st_size);
  if (m->len > 0) m->addr = mmap(nullptr, m->len, PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (m->len > 0 && m->addr == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": mmap: ", std::strerror(e)));
  }
  return m;
}

}  // namespace

// ---- once-per-shard checks -------------------------------------------------

namespace {

constexpr std::string_view kStampDir = ".moestream-verified";

// What a stamp vouches for: this file, unchanged since it was checked.
absl::StatusOr<std::string> StampText(const std::string& path, const std::string& plan) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, ": stat: ", std::strerror(errno)));
  return absl::StrCat("moestream-verified 1 plan=", plan, " size=", static_cast<uint64_t>(st.st_size),
                      " mtime_ns=", static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + st.st_mtim.tv_nsec,
                      " ino=", static_cast<uint64_t>(st.st_ino), " dev=", static_cast<uint64_t>(st.st_dev), "\n");
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return in ? std::string(std::istreambuf_iterator<char>(in), {}) : std::string();
}

}  // namespace

Container::VerifyStats Container::verify_stats() const {
  std::lock_guard<std::mutex> lock(check_mu_);
  return verify_stats_;
}

absl::Status Container::EnsureChecked(int file) const {
  std::lock_guard<std::mutex> lock(check_mu_);
  if (checked_.size() < static_cast<size_t>(reader_->num_files())) checked_.resize(reader_->num_files(), false);
  if (checked_[file]) return absl::OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& path = file_path(file);
  const std::string name = std::filesystem::path(path).filename().string();
  const std::string sdir = dir_ + "/" + std::string(kStampDir);
  const std::string stamp = sdir + "/" + name;
  MOE_ASSIGN_OR_RETURN(const std::string want, StampText(path, plan_));
  // Stamps need a writable container directory; without one every process checks.
  int lock_fd = -1;
  if (::mkdir(sdir.c_str(), 0755) == 0 || errno == EEXIST) {
    lock_fd = ::open((stamp + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd >= 0) ::flock(lock_fd, LOCK_EX);  // a worker checking this shard now: wait for it
  }
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) ::close(fd);  // releases the flock
    }
  } unlock{lock_fd};
  auto done = [&] {
    checked_[file] = true;
    verify_stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (lock_fd >= 0 && ReadSmallFile(stamp) == want) {
    ++verify_stats_.shards_stamped;
    done();
    return absl::OkStatus();
  }
  constexpr uint64_t kChunk = 8ull << 20;
  std::vector<uint8_t> buf(kChunk);
  const int drop_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool all_good = true;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ContainerTensor& t = tensors_[i];
    if (t.file != file || t.expert >= 0) continue;  // records are checked on every read
    uint32_t crc = 0;
    absl::Status s;
    for (auto [off, len] : {std::pair{t.data_offset, t.data_bytes}, std::pair{t.scales_offset, t.scales_bytes}}) {
      for (uint64_t at = 0; s.ok() && at < len; at += kChunk) {
        const uint64_t n = std::min(kChunk, len - at);
        s = reader_->ReadRange(file, off + at, n, buf.data());
        if (s.ok()) crc = crc32c::Extend(crc, buf.data(), n);
      }
    }
    verify_stats_.bytes_checked += t.data_bytes + t.scales_bytes;
    if (s.ok() && crc32c::Mask(crc) != t.crc) s = Loss(path, absl::StrCat("tensor '", t.name, "': CRC32C mismatch"));
    if (!s.ok()) {
      bad_[static_cast<int>(i)] = s;
      all_good = false;
    }
    // Embedding tables: one row per token is read; do not keep them in RAM.
    if (t.role == RoleName(TensorRole::kEmbedding) && drop_fd >= 0) {
      ::posix_fadvise(drop_fd, static_cast<off_t>(t.data_offset), static_cast<off_t>(t.data_bytes), POSIX_FADV_DONTNEED);
      if (t.scales_bytes > 0)
        ::posix_fadvise(drop_fd, static_cast<off_t>(t.scales_offset), static_cast<off_t>(t.scales_bytes),
                        POSIX_FADV_DONTNEED);
    }
  }
  if (drop_fd >= 0) ::close(drop_fd);
  ++verify_stats_.shards_checked;
  if (all_good && lock_fd >= 0) {
    const std::string tmp = stamp + ".tmp";
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << want;
    f.close();
    if (!f || ::rename(tmp.c_str(), stamp.c_str()) != 0) std::remove(tmp.c_str());  // no stamp: check again next time
  }
  done();
  return absl::OkStatus();
}

absl::StatusOr<Container::MappedTensor> Container::MapTensor(const ContainerTensor& t) const {
  if (t.file < 0 || t.file >= reader_->num_files()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': file index ", t.file, " out of range"));
  }
  const bool record_part = t.expert >= 0;
  if (!record_part) {
    MOE_RETURN_IF_ERROR(EnsureChecked(t.file));
    std::lock_guard<std::mutex> lock(check_mu_);
    if (auto it = bad_.find(static_cast<int>(&t - tensors_.data())); it != bad_.end()) return it->second;
  }
  std::shared_ptr<const void> keep;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    if (maps_.size() < static_cast<size_t>(reader_->num_files())) maps_.resize(reader_->num_files());
    if (!maps_[t.file]) {
      MOE_ASSIGN_OR_RETURN(std::shared_ptr<FileMapping> m, MapWholeFile(file_path(t.file)));
      maps_[t.file] = std::move(m);
    }
    keep = maps_[t.file];
  }
  const auto* fm = static_cast<const FileMapping*>(keep.get());
  if (t.data_offset + t.data_bytes > fm->len || t.scales_offset + t.scales_bytes > fm->len) {
    return Loss(file_path(t.file), absl::StrCat("tensor '", t.name, "' extends beyond the file"));
  }
  const uint8_t* base = static_cast<const uint8_t*>(fm->addr);
  MappedTensor out;
  out.data = base + t.data_offset;
  if (t.scales_bytes > 0) {
    if (t.scales_offset % alignof(float) != 0) {
      return Loss(file_path(t.file), absl::StrCat("tensor '", t.name, "': scales are not 4-byte aligned"));
    }
    out.scales = reinterpret_cast<const float*>(base + t.scales_offset);
  }
  if (record_part) {  // not covered by the shard check: checked here, through the mapping
    uint32_t crc = crc32c::Value(out.data, t.data_bytes);
    if (t.scales_bytes > 0) crc = crc32c::Extend(crc, out.scales, t.scales_bytes);
    if (crc32c::Mask(crc) != t.crc) {
      return Loss(file_path(t.file), absl::StrCat("tensor '", t.name, "': CRC32C mismatch"));
    }
  }
  out.keep = std::move(keep);
  return out;
}

}  // namespace moe
