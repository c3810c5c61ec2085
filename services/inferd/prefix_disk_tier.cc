#include "services/inferd/prefix_disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/atomic_file.h"
#include "common/base/fnv1a.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/format/crc32c.h"

namespace moe::inferd {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'P', 'R', 'F', 'X', '1'};
constexpr uint32_t kVersion = 1;
constexpr char kSuffix[] = ".kvp";
constexpr uint32_t kMaxIdentityBytes = 64 << 10;
// A temp file older than this is a crashed writer's (a live one renames
// within seconds of creating it).
constexpr int64_t kStaleTempNs = int64_t{3600} * 1000000000;
constexpr int64_t kRescanNs = int64_t{2} * 1000000000;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t identity_bytes;
  int64_t num_tokens;
  int64_t payload_bytes;
  uint32_t meta_crc;     // masked CRC32C of this header (both CRCs 0), the identity and the tokens
  uint32_t payload_crc;  // masked CRC32C of the payload
};
static_assert(sizeof(Header) == 40, "Header layout");

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Hex16(uint64_t v) { return absl::StrFormat("%016x", v); }

uint32_t MetaCrc(Header h, std::string_view identity, std::string_view tokens) {
  h.meta_crc = 0;
  h.payload_crc = 0;
  uint32_t c = crc32c::Extend(0, &h, sizeof h);
  c = crc32c::Extend(c, identity.data(), identity.size());
  c = crc32c::Extend(c, tokens.data(), tokens.size());
  return crc32c::Mask(c);
}

// The header's own checks against the file's size; the error says why the file is unusable.
absl::Status CheckHeader(const Header& h, int64_t file_size) {
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    return absl::DataLossError("not a moestream prefix-cache file (bad magic)");
  if (h.version != kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("prefix-cache file version ", h.version, "; this build reads version ", kVersion));
  }
  if (h.identity_bytes > kMaxIdentityBytes || h.num_tokens < 0 || h.payload_bytes < 0 ||
      h.num_tokens > file_size / 4 || h.payload_bytes > file_size) {
    return absl::DataLossError("corrupt header");
  }
  const int64_t want = static_cast<int64_t>(sizeof(Header)) + h.identity_bytes + 4 * h.num_tokens + h.payload_bytes;
  if (file_size < want) return absl::DataLossError(absl::StrCat("truncated (", file_size, " of ", want, " bytes)"));
  if (file_size > want) return absl::DataLossError(absl::StrCat("trailing bytes (", file_size, " for ", want, ")"));
  return absl::OkStatus();
}

absl::Status PRead(int fd, void* dst, size_t n, off_t off, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("read", path);
    if (r == 0) return absl::DataLossError("truncated (shorter than when opened)");
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return absl::OkStatus();
}

// An open file, closed on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// What a file says about itself: its header, identity and tokens, checked
// (CRC, sizes, identity); `payload` too when asked. Errors: NotFound (gone),
// else why the file must not be used.
struct FileMeta {
  Header h{};
  std::vector<int32_t> tokens;
  std::string payload;
  struct stat st {};
};
absl::StatusOr<FileMeta> ReadFile(const std::string& path, const std::string& identity, bool with_payload) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return ErrnoStatus("open", path);
  FileMeta m;
  if (::fstat(f.fd, &m.st) != 0) return ErrnoStatus("stat", path);
  const int64_t size = m.st.st_size;
  if (size < static_cast<int64_t>(sizeof(Header))) {
    return absl::DataLossError(absl::StrCat("truncated (", size, " bytes; the header alone is ", sizeof(Header), ")"));
  }
  MOE_RETURN_IF_ERROR(PRead(f.fd, &m.h, sizeof m.h, 0, path));
  MOE_RETURN_IF_ERROR(CheckHeader(m.h, size));
  std::string id(m.h.identity_bytes, '\0');
  MOE_RETURN_IF_ERROR(PRead(f.fd, id.data(), id.size(), sizeof(Header), path));
  m.tokens.resize(static_cast<size_t>(m.h.num_tokens));
  const size_t token_bytes = m.tokens.size() * 4;
  if (token_bytes > 0) MOE_RETURN_IF_ERROR(PRead(f.fd, m.tokens.data(), token_bytes, sizeof(Header) + id.size(), path));
  const std::string_view tok(reinterpret_cast<const char*>(m.tokens.data()), token_bytes);
  if (MetaCrc(m.h, id, tok) != m.h.meta_crc) return absl::DataLossError("header checksum mismatch (crc32c)");
  if (id != identity) {
    return absl::FailedPreconditionError(
        absl::StrCat("written for another model (", id, "); this worker's is ", identity));
  }
  if (with_payload) {
    m.payload.resize(static_cast<size_t>(m.h.payload_bytes));
    if (!m.payload.empty()) {
      MOE_RETURN_IF_ERROR(PRead(f.fd, m.payload.data(), m.payload.size(), sizeof(Header) + id.size() + token_bytes, path));
    }
    if (crc32c::Mask(crc32c::Value(m.payload.data(), m.payload.size())) != m.h.payload_crc) {
      return absl::DataLossError("payload checksum mismatch (crc32c)");
    }
  }
  return m;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefixDiskTier>> PrefixDiskTier::Open(const std::string& dir, int64_t max_bytes,
                                                                     std::string identity) {
  if (dir.empty()) return absl::InvalidArgumentError("--prefix-cache-dir: empty directory name");
  if (max_bytes <= 0) return absl::InvalidArgumentError("--prefix-cache-disk-bytes must be > 0");
  if (identity.empty() || identity.size() > kMaxIdentityBytes) {
    return absl::InvalidArgumentError("the model's states cannot be persisted (no state identity)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("--prefix-cache-dir ", dir, ": ", ec.message()));
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) return ErrnoStatus("--prefix-cache-dir: access", dir);
  std::unique_ptr<PrefixDiskTier> t(new PrefixDiskTier(dir, max_bytes, std::move(identity)));
  std::lock_guard<std::mutex> lock(t->mu_);
  t->ScanLocked(/*force=*/true);
  t->EnforceBudgetLocked("");
  return t;
}

PrefixDiskTier::PrefixDiskTier(std::string dir, int64_t max_bytes, std::string identity)
    : dir_(std::move(dir)), max_bytes_(max_bytes), identity_(std::move(identity)), prefix_([&] {
        Fnv1a64 h;
        h.Bytes(identity_);
        return Hex16(h.value()) + "-";
      }()) {
  stats_.max_bytes = max_bytes_;
}

std::string PrefixDiskTier::FileName(std::span<const int32_t> tokens) const {
  Fnv1a64 h;
  h.U64(tokens.size());
  for (int32_t t : tokens) h.U32(static_cast<uint32_t>(t));
  return prefix_ + Hex16(h.value()) + kSuffix;
}

void PrefixDiskTier::IgnoreLocked(const std::string& name, const Seen& seen, const absl::Status& why) {
  auto it = ignored_.find(name);
  if (it != ignored_.end() && it->second.size == seen.size && it->second.mtime_ns == seen.mtime_ns) return;
  ignored_[name] = seen;
  index_.erase(name);
  ++stats_.ignored;
  // Files are only ever replaced whole (rename), so a damaged one stays damaged: it is
  // removed (a writer of that prefix publishes it again). Another version's or another
  // model's file is some other build's or worker's: left alone.
  const bool damaged = absl::IsDataLoss(why);
  if (damaged) ::unlink((dir_ + "/" + name).c_str());
  MOE_LOG(WARNING) << "prefix cache: ignoring " << dir_ << "/" << name << ": " << why.message()
                   << (damaged ? " (removed)" : "");
}

void PrefixDiskTier::ScanLocked(bool force) {
  struct stat ds;
  if (::stat(dir_.c_str(), &ds) != 0) return;  // gone: lookups miss, stores report the error
  const int64_t now = NowNs();
  if (!force && MtimeNs(ds) == dir_mtime_ns_ && now - last_scan_ns_ < kRescanNs) return;
  dir_mtime_ns_ = MtimeNs(ds);
  last_scan_ns_ = now;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  std::map<std::string, Indexed> next;
  std::set<std::string> present;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix_, 0) != 0 || !EndsWith(name, kSuffix)) continue;
    present.insert(name);
    if (auto it = index_.find(name); it != index_.end()) {
      next.insert(index_.extract(it));
      continue;
    }
    const std::string path = dir_ + "/" + name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;
    const Seen seen{static_cast<int64_t>(st.st_size), MtimeNs(st)};
    if (auto it = ignored_.find(name); it != ignored_.end() && it->second.size == seen.size &&
                                        it->second.mtime_ns == seen.mtime_ns) {
      continue;
    }
    auto m = ReadFile(path, identity_, /*with_payload=*/false);
    if (!m.ok()) {
      if (!absl::IsNotFound(m.status())) IgnoreLocked(name, seen, m.status());
      continue;
    }
    if (FileName(m->tokens) != name) {
      IgnoreLocked(name, seen, absl::FailedPreconditionError("its tokens do not hash to its name (renamed or copied)"));
      continue;
    }
    next[name] = Indexed{std::move(m->tokens), static_cast<int64_t>(m->st.st_size)};
  }
  ::closedir(d);
  index_ = std::move(next);
  for (auto it = ignored_.begin(); it != ignored_.end();) it = present.count(it->first) ? std::next(it) : ignored_.erase(it);
  stats_.files = static_cast<int64_t>(index_.size());
}

void PrefixDiskTier::EnforceBudgetLocked(const std::string& keep) {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  struct File {
    int64_t mtime_ns, size;
    std::string name;
  };
  std::vector<File> files;
  int64_t total = 0;
  const int64_t now = NowNs();
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const bool temp = name.find(std::string(kSuffix) + ".tmp") != std::string::npos;
    if (!temp && !EndsWith(name, kSuffix)) continue;
    const std::string path = dir_ + "/" + name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (temp) {
      if (now - MtimeNs(st) > kStaleTempNs) ::unlink(path.c_str());
      continue;
    }
    files.push_back({MtimeNs(st), static_cast<int64_t>(st.st_size), name});
    total += st.st_size;
  }
  ::closedir(d);
  std::sort(files.begin(), files.end(),
            [](const File& a, const File& b) { return std::tie(a.mtime_ns, a.name) < std::tie(b.mtime_ns, b.name); });
  for (const File& f : files) {
    if (total <= max_bytes_) break;
    if (f.name == keep) continue;
    if (::unlink((dir_ + "/" + f.name).c_str()) == 0 || errno == ENOENT) {
      total -= f.size;
      index_.erase(f.name);
      ++stats_.evicted;
    }
  }
  stats_.bytes = total;
  stats_.files = static_cast<int64_t>(index_.size());
}

absl::Status PrefixDiskTier::Store(std::span<const int32_t> tokens, std::string_view payload) {
  if (tokens.empty()) return absl::InvalidArgumentError("prefix cache: an empty prefix is not stored");
  const std::string name = FileName(tokens);
  const std::string path = dir_ + "/" + name;
  const std::string_view tok(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  const int64_t file_bytes = static_cast<int64_t>(sizeof(Header) + identity_.size() + tok.size() + payload.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (file_bytes > max_bytes_) {
      ++stats_.too_large;
      return absl::OkStatus();
    }
    auto it = index_.find(name);
    struct stat st;
    if (it != index_.end() &&
        std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens.begin(), tokens.end()) &&
        ::stat(path.c_str(), &st) == 0 && st.st_size == it->second.bytes) {
      ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // stored already: now recently used
      return absl::OkStatus();
    }
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.identity_bytes = static_cast<uint32_t>(identity_.size());
  h.num_tokens = static_cast<int64_t>(tokens.size());
  h.payload_bytes = static_cast<int64_t>(payload.size());
  h.meta_crc = MetaCrc(h, identity_, tok);
  h.payload_crc = crc32c::Mask(crc32c::Value(payload.data(), payload.size()));
  absl::Status st = [&]() -> absl::Status {
    MOE_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path, TempName::kUnique));
    MOE_RETURN_IF_ERROR(f.Append(std::string_view(reinterpret_cast<const char*>(&h), sizeof h)));
    MOE_RETURN_IF_ERROR(f.Append(identity_));
    MOE_RETURN_IF_ERROR(f.Append(tok));
    MOE_RETURN_IF_ERROR(f.Append(payload));
    return f.Commit();
  }();
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    ++stats_.write_errors;
    return Annotate(st, "prefix cache");
  }
  ++stats_.writes;
  // This model's files holding a proper prefix of this one are redundant now.
  for (auto it = index_.begin(); it != index_.end();) {
    const auto& t = it->second.tokens;
    if (it->first != name && t.size() < tokens.size() && std::equal(t.begin(), t.end(), tokens.begin())) {
      ::unlink((dir_ + "/" + it->first).c_str());
      it = index_.erase(it);
    } else {
      ++it;
    }
  }
  index_[name] = Indexed{std::vector<int32_t>(tokens.begin(), tokens.end()), file_bytes};
  ignored_.erase(name);
  EnforceBudgetLocked(name);
  return absl::OkStatus();
}

PrefixDiskTier::Candidate PrefixDiskTier::FindLongest(std::span<const int32_t> prompt, int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  ScanLocked(/*force=*/false);
  Candidate best;
  const auto* best_entry = static_cast<const std::pair<const std::string, Indexed>*>(nullptr);
  const size_t lim = static_cast<size_t>(std::clamp<int64_t>(limit, 0, static_cast<int64_t>(prompt.size())));
  for (const auto& e : index_) {
    const auto& t = e.second.tokens;
    const size_t n = std::min(lim, t.size());
    size_t k = 0;
    while (k < n && t[k] == prompt[k]) ++k;
    if (static_cast<int64_t>(k) > best.common) {
      best.common = static_cast<int64_t>(k);
      best_entry = &e;
    }
  }
  if (best_entry != nullptr) {
    best.path = dir_ + "/" + best_entry->first;
    best.tokens = best_entry->second.tokens;
  }
  return best;
}

absl::StatusOr<std::string> PrefixDiskTier::Read(const Candidate& c) {
  const std::string name = c.path.substr(c.path.find_last_of('/') + 1);
  auto m = ReadFile(c.path, identity_, /*with_payload=*/true);
  std::lock_guard<std::mutex> lock(mu_);
  if (!m.ok()) {
    if (absl::IsNotFound(m.status())) {
      index_.erase(name);  // evicted by another worker since the scan
      stats_.files = static_cast<int64_t>(index_.size());
      return m.status();
    }
    struct stat st {};
    ::stat(c.path.c_str(), &st);
    IgnoreLocked(name, Seen{static_cast<int64_t>(st.st_size), MtimeNs(st)}, m.status());
    return absl::DataLossError(absl::StrCat(c.path, ": ", m.status().message()));
  }
  if (m->tokens != c.tokens) {
    IgnoreLocked(name, Seen{static_cast<int64_t>(m->st.st_size), MtimeNs(m->st)},
                 absl::FailedPreconditionError("its tokens differ from the indexed ones"));
    return absl::DataLossError(absl::StrCat(c.path, ": its tokens differ from the indexed ones"));
  }
  ::utimensat(AT_FDCWD, c.path.c_str(), nullptr, 0);  // recently used: evicted last
  ++stats_.reads;
  return std::move(m->payload);
}

void PrefixDiskTier::Reject(const std::string& path, const absl::Status& why) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  struct stat st {};
  ::stat(path.c_str(), &st);
  std::lock_guard<std::mutex> lock(mu_);
  IgnoreLocked(name, Seen{static_cast<int64_t>(st.st_size), MtimeNs(st)}, why);
}

PrefixDiskStats PrefixDiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace moe::inferd
