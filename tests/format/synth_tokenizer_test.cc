// FitTokenizerIds (common/format/synth_tokenizer.h): a small model's tokenizer lent to a
// full-size stand-in gets its special tokens moved onto the release config's stop ids, so
// the stack (gateway, workers' constraint vocabulary) can serve the stand-in; and moe synth
// --tokenizer applies it.
#include "common/format/synth_tokenizer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/format/synth_model.h"
#include "common/text/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/format/synth_fixture.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
const std::string kDonor = std::string(MOE_SOURCE_DIR) + "/models/tiny-glm-random";

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// GLM-5's stop ids (<|endoftext|>, <|user|>, <|observation|>); the donor has them at 12256, 12263, 12265.
const std::vector<int64_t> kGlm5Stops = {154820, 154827, 154829};

TEST(FitTokenizerIds, MovesTheDonorsSpecialTokensOntoTheReleaseStopIds) {
  std::string tok = ReadAll(kDonor + "/tokenizer.json"), cfg = ReadAll(kDonor + "/tokenizer_config.json");
  const std::string tok0 = tok;
  auto off = FitTokenizerIds(&tok, &cfg, 154880, kGlm5Stops);
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(*off, 154820 - 12256);
  auto before = text::Tokenizer::FromJson(tok0, "donor");
  auto after = text::Tokenizer::FromJson(tok, "fitted");
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ((*after)->vocab_size(), 154820 - 12256 + 12288u);
  // Special tokens now carry the release's ids; ordinary text keeps its BPE ids.
  EXPECT_EQ((*after)->Encode("<|endoftext|><|user|><|observation|>", {}),
            (std::vector<int32_t>{154820, 154827, 154829}));
  EXPECT_EQ((*after)->Encode("hello world", {}), (*before)->Encode("hello world", {}));
  // Already fitted: nothing to do, nothing rewritten.
  const std::string fitted = tok;
  auto again = FitTokenizerIds(&tok, &cfg, 154880, kGlm5Stops);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(tok, fitted);
}

TEST(FitTokenizerIds, RefusesWhatCannotBeFittedNamingTheCause) {
  const std::string tok0 = ReadAll(kDonor + "/tokenizer.json"), cfg0 = ReadAll(kDonor + "/tokenizer_config.json");
  std::string tok = tok0, cfg = cfg0;
  auto no_cfg = FitTokenizerIds(&tok, nullptr, 154880, kGlm5Stops);
  ASSERT_FALSE(no_cfg.ok());
  EXPECT_NE(no_cfg.status().message().find("eos_token"), std::string::npos) << no_cfg.status().message();
  auto small = FitTokenizerIds(&tok, &cfg, 154840, kGlm5Stops);  // <|endoftext|> fits, the last specials do not
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("past the vocabulary"), std::string::npos) << small.status().message();
  auto mismatch = FitTokenizerIds(&tok, &cfg, 154880, std::vector<int64_t>{154820, 154826 + 100});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("do not all fall"), std::string::npos) << mismatch.status().message();
  EXPECT_EQ(tok, tok0);  // refusals rewrite nothing
  EXPECT_EQ(cfg, cfg0);
  std::string broken = "{";
  EXPECT_FALSE(FitTokenizerIds(&broken, &cfg, 154880, kGlm5Stops).ok());
}

TEST(FitTokenizerIds, SynthWithADonorTokenizerWritesAFittedOneAndSaysSo) {
  const fs::path dir = fs::temp_directory_path() / ("moe_synth_tok_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto sets = testing_synth::NarrowGlm5();
  for (auto& [k, v] : sets) {
    if (k == "vocab_size") v = "20000";
    if (k == "eos_token_id") v = "[17256, 17263]";  // the donor's <|endoftext|>, <|user|> + 5000
    if (k == "pad_token_id") v = "17256";
  }
  auto text = BuiltinConfig("glm-5");
  ASSERT_TRUE(text.ok());
  auto cfg = ApplyConfigOverrides(*text, sets);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  SynthOptions o;
  o.tokenizer_dir = kDonor;
  auto plan = PlanSynthCheckpoint(*cfg, o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto r = SynthesizeCheckpoint(*plan, o, dir.string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto tok = text::Tokenizer::FromFile((dir / "tokenizer.json").string());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ((*tok)->Encode("<|endoftext|><|user|>", {}), (std::vector<int32_t>{17256, 17263}));
  const auto s = nlohmann::json::parse(ReadAll(dir / "synth.json"));
  EXPECT_EQ(s["tokenizer_id_offset"], 5000);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe
