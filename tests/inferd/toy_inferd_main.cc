// inferd over the toy test model (see toy_model.h): for serving tests and
// the load tool, never for users.
#include "common/text/output_vocab.h"
#include "services/inferd/service.h"
#include "tests/inferd/toy_model.h"

namespace {

class ToyFactory final : public moe::inferd::ModelFactory {
 public:
  void AddFlags(moe::FlagSet& f) override {
    f.AddInt("toy-step-us", &step_us_, "simulated cost of one step (us)");
    f.AddInt("toy-row-us", &row_us_, "simulated cost per fed token (us)");
    f.AddInt("toy-context", &context_, "context length");
  }
  absl::StatusOr<std::unique_ptr<moe::inferd::SequenceModel>> Create() override {
    moe::inferd::testing::ToyConfig c;
    c.step_us = step_us_;
    c.row_us = row_us_;
    c.max_context = context_;
    return std::unique_ptr<moe::inferd::SequenceModel>(std::make_unique<moe::inferd::testing::ToyModel>(c));
  }
  // The byte-level vocabulary of the gateway's ByteCodec.
  absl::StatusOr<moe::inferd::ConstraintVocab> Vocabulary(const std::string& tokenizer) override {
    if (!tokenizer.empty()) return absl::InvalidArgumentError("the toy worker's vocabulary is byte-level only");
    return moe::inferd::ConstraintVocab{moe::text::ByteLevelTexts(), {moe::text::kByteLevelEos}, "byte-level"};
  }

 private:
  int64_t step_us_ = 2000;
  int64_t row_us_ = 5;
  int64_t context_ = 4096;
};

}  // namespace

int main(int argc, char** argv) {
  ToyFactory f;
  return moe::inferd::RunInferd(argc, argv, f);
}
