#include "services/peer/expert_stream.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/format/crc32c.h"
#include "common/format/qformat.h"

namespace moe::peer {
namespace {

const ExpertMatrix& Matrix(const ExpertWeights& w, int i) { return i == 0 ? w.gate : i == 1 ? w.up : w.down; }

}  // namespace

bool StreamExpert(const ExpertWeights& w, uint32_t record_crc, const std::function<bool(const ExpertChunk&)>& emit) {
  ExpertChunk header;
  uint32_t crc = 0;
  std::vector<std::pair<const uint8_t*, int64_t>> parts;
  for (int i = 0; i < 3; ++i) {
    const ExpertMatrix& m = Matrix(w, i);
    StoredMatrix* s = header.add_matrices();
    s->set_format(static_cast<int>(m.format));
    s->set_rows(m.rows);
    s->set_cols(m.cols);
    s->set_data_bytes(DataBytes(m.format, m.rows, m.cols));
    s->set_scale_bytes(m.scales == nullptr ? 0 : ScaleBytes(m.format, m.rows, m.cols));
    parts.push_back({m.data, s->data_bytes()});
    parts.push_back({reinterpret_cast<const uint8_t*>(m.scales), s->scale_bytes()});
  }
  for (const auto& [p, n] : parts) crc = crc32c::Extend(crc, p, static_cast<size_t>(n));
  header.set_record_crc(record_crc);
  header.set_bytes_crc(crc);
  if (!emit(header)) return false;
  ExpertChunk c;
  for (const auto& [p, n] : parts) {
    for (int64_t at = 0; at < n;) {
      const int64_t room = static_cast<int64_t>(kExpertChunkBytes) - static_cast<int64_t>(c.data().size());
      const int64_t take = std::min(room, n - at);
      c.mutable_data()->append(reinterpret_cast<const char*>(p + at), static_cast<size_t>(take));
      at += take;
      if (c.data().size() == kExpertChunkBytes) {
        if (!emit(c)) return false;
        c.clear_data();
      }
    }
  }
  return c.data().empty() || emit(c);
}

int64_t ExpertAssembler::PartBytes(int p) const {
  const StoredMatrix& m = header_.matrices(p / 2);
  return p % 2 == 0 ? m.data_bytes() : m.scale_bytes();
}

absl::Status ExpertAssembler::Add(const ExpertChunk& chunk) {
  if (!have_header_) {
    if (chunk.matrices_size() != 3 || !chunk.data().empty()) {
      return absl::DataLossError("the stream does not start with a header of three matrices");
    }
    for (const StoredMatrix& m : chunk.matrices()) {
      const bool known = m.format() >= 0 && m.format() <= static_cast<int>(QFormat::kQ4G128);
      const QFormat f = static_cast<QFormat>(known ? m.format() : 0);
      if (!known || m.rows() < 1 || m.cols() < 1 || m.data_bytes() != DataBytes(f, m.rows(), m.cols()) ||
          (m.scale_bytes() != 0 && m.scale_bytes() != ScaleBytes(f, m.rows(), m.cols()))) {
        return absl::DataLossError(absl::StrCat("a matrix header does not match its format (format ", m.format(),
                                                ", ", m.rows(), " x ", m.cols(), ")"));
      }
    }
    header_ = chunk;
    have_header_ = true;
    owned_ = std::make_unique<Owned>();
    int64_t at = 0;
    for (int p = 0; p < 6; ++p) {
      offsets_.push_back(at);
      total_ += PartBytes(p);
      at += (PartBytes(p) + 63) / 64 * 64;
    }
    owned_->bytes.resize(static_cast<size_t>(at) + 64);
    base_ = owned_->bytes.data();
    base_ += (64 - reinterpret_cast<uintptr_t>(base_) % 64) % 64;
    return absl::OkStatus();
  }
  if (chunk.matrices_size() != 0) return absl::DataLossError("a second header in the stream");
  const std::string& d = chunk.data();
  size_t pos = 0;
  while (pos < d.size()) {
    while (part_ < 6 && in_part_ == PartBytes(part_)) {
      ++part_;
      in_part_ = 0;
    }
    if (part_ >= 6) return absl::DataLossError(absl::StrCat("more bytes than the ", total_, " announced"));
    const size_t n = std::min<size_t>(d.size() - pos, static_cast<size_t>(PartBytes(part_) - in_part_));
    std::memcpy(base_ + offsets_[part_] + in_part_, d.data() + pos, n);
    in_part_ += static_cast<int64_t>(n);
    pos += n;
  }
  crc_ = crc32c::Extend(crc_, d.data(), d.size());
  got_ += static_cast<int64_t>(d.size());
  return absl::OkStatus();
}

absl::StatusOr<ExpertLease> ExpertAssembler::Finish() {
  if (!have_header_) return absl::DataLossError("an empty stream");
  if (got_ != total_) return absl::DataLossError(absl::StrCat(got_, " of the ", total_, " bytes announced"));
  if (crc_ != header_.bytes_crc()) return absl::DataLossError("the bytes' CRC32C differs from the header's");
  ExpertMatrix* m3[3] = {&owned_->w.gate, &owned_->w.up, &owned_->w.down};
  for (int i = 0; i < 3; ++i) {
    const StoredMatrix& m = header_.matrices(i);
    m3[i]->format = static_cast<QFormat>(m.format());
    m3[i]->rows = m.rows();
    m3[i]->cols = m.cols();
    m3[i]->data = base_ + offsets_[2 * i];
    m3[i]->scales = m.scale_bytes() > 0 ? reinterpret_cast<const float*>(base_ + offsets_[2 * i + 1]) : nullptr;
  }
  Owned* raw = owned_.release();
  return ExpertLease(&raw->w, [raw] { delete raw; });
}

}  // namespace moe::peer
