// ContainerLocator: RecordLocator over a moestream container (common/format
// Container). Layers are 0 .. num_hidden_layers (the MTP layer is
// num_hidden_layers); dense layers have no records (NotFound). Record CRCs
// are stored masked in the container and unmasked here. Parts are the six
// offsets (gate data, gate scales, up data, up scales, down data, down
// scales) relative to the record start.
//
// Thread safety: immutable after Open.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/expertstore/record_locator.h"
#include "common/format/container.h"

namespace moe::expertstore {

class ContainerLocator final : public RecordLocator {
 public:
  static absl::StatusOr<std::unique_ptr<ContainerLocator>> Open(const std::string& dir);
  explicit ContainerLocator(std::shared_ptr<const Container> c);

  int num_layers() const override { return c_->info().num_hidden_layers + 1; }
  int num_experts() const override { return c_->info().n_routed_experts; }
  std::string model_id() const override { return model_id_; }
  const std::vector<std::string>& files() const override { return files_; }
  absl::StatusOr<RecordLocation> Locate(int layer, int expert) const override;
  const Container& container() const { return *c_; }

 private:
  std::shared_ptr<const Container> c_;
  std::vector<std::string> files_;
  std::string model_id_;
};

}  // namespace moe::expertstore
