// Exact agreement with Hugging Face `tokenizers` (goldens from tools/text/make_goldens.py).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/text/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/text/test_util.h"

namespace moe::text {
namespace {

using json = nlohmann::ordered_json;
using namespace moe::text::testing;

class TextGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TextGoldenTest, EncodeDecodeMatchHuggingFace) {
  const json g = LoadJson(DataDir() + "goldens/" + GetParam() + ".json");
  const Tokenizer* tok = CachedTokenizer(g["tokenizer"].get<std::string>());
  ASSERT_NE(tok, nullptr);
  const Tokenizer& t = *tok;
  EXPECT_EQ(t.vocab_size(), g["vocab_size"].get<size_t>());
  for (const auto& c : g["cases"]) {
    const std::string label = c["label"].get<std::string>();
    const std::string raw = Unhex(c["hex"].get<std::string>());
    EXPECT_EQ(t.Encode(raw), c["ids"].get<std::vector<int32_t>>()) << label;
    EXPECT_EQ(t.Encode(raw, {.parse_special = true, .add_special_tokens = false}),
              c["ids_no_post"].get<std::vector<int32_t>>())
        << label;
    EXPECT_EQ(t.Encode(raw, {.parse_special = false, .add_special_tokens = true}),
              c["ids_special_as_text"].get<std::vector<int32_t>>())
        << label;
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(t.Decode(ids), c["decoded"].get<std::string>()) << label;
    EXPECT_EQ(t.Decode(ids, /*skip_special=*/true), c["decoded_skip_special"].get<std::string>()) << label;
  }
  for (const auto& r : g["decode_runs"]) {
    const auto ids = r["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(t.Decode(ids), r["decoded"].get<std::string>());
    EXPECT_EQ(t.Decode(ids, true), r["decoded_skip_special"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Text, TextGoldenTest,
                         ::testing::Values("glm_tiny", "flags", "anthropic", "deepseek_llm", "deepseek_v3"));

}  // namespace
}  // namespace moe::text
