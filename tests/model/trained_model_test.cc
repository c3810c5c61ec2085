// The embedded demo model (models/glm-tiny-chat, trained by tools/train): the engine reproduces
// Hugging Face on it (goldens: tests/data/model/glm-tiny-chat/goldens.json, written by
// tools/train/gen_goldens.py), and the model answers the demo's chat task types recognisably
// through the text stack (tokenizer + GLM chat template + engine + decode), greedy.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/text/model_text.h"
#include "tests/model/oracle_util.h"

namespace moe {
namespace {

using testing::Ids;

const std::string kModelDir = std::string(MOE_SOURCE_DIR) + "/models/glm-tiny-chat";

nlohmann::json Goldens() {
  std::ifstream in(std::string(MOE_SOURCE_DIR) + "/tests/data/model/glm-tiny-chat/goldens.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

class TrainedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = Engine::Open(kModelDir, EngineConfig{});
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = e->release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  static Engine* engine_;
};
Engine* TrainedModelTest::engine_ = nullptr;

// The trained model's logit margins are small (an under-trained toy: many top1-top2 gaps are 0 or
// one BF16 step) and the DSA indexer's ReLU scores tie at zero, so a bit-faithful engine may still
// flip a near-tie (docs/MODEL.md section 6 item 6). Criterion, as the oracle test's robust branch: greedy
// tokens equal HF's up to the first difference, which must be at a near-tie of HF's greedy path;
// at least 3 of 4 prompts identical to the end; teacher-forced argmax differs only at near-ties.
TEST_F(TrainedModelTest, GreedyAndTeacherForcedMatchHf) {
  ASSERT_NE(engine_, nullptr);
  const auto g = Goldens();
  ASSERT_EQ(g["model_dir"], "models/glm-tiny-chat");
  const double near_tie = g["sanity"]["near_tie_margin"].get<double>();
  ASSERT_GE(g["prompts"].size(), 6u);
  int identical = 0, prompts = 0, tf_total = 0, tf_far = 0;
  for (const auto& pr : g["prompts"]) {
    const auto prompt = Ids(pr["ids"]);
    const auto want = Ids(pr["greedy"]["tokens"]);
    const auto gmargin = pr["greedy"]["margin"].get<std::vector<double>>();
    KvCache cache = engine_->NewCache();
    auto r = engine_->Generate(prompt, static_cast<int64_t>(want.size()), SamplingParams{}, cache);
    ASSERT_TRUE(r.ok()) << r.status();
    size_t first_diff = 0;
    while (first_diff < want.size() && first_diff < r->tokens.size() && r->tokens[first_diff] == want[first_diff]) {
      ++first_diff;
    }
    ++prompts;
    if (first_diff == want.size() && r->tokens.size() == want.size()) {
      ++identical;
    } else {
      ASSERT_LT(first_diff, want.size()) << pr["name"];
      EXPECT_LT(gmargin[first_diff], near_tie)
          << pr["name"] << ": greedy differs from HF at " << first_diff << " (not a near-tie); HF: " << pr["answer"];
    }
    const auto ids = Ids(pr["teacher_forced"]["ids"]);
    const auto am = Ids(pr["teacher_forced"]["argmax"]);
    const auto margin = pr["teacher_forced"]["margin"].get<std::vector<double>>();
    const auto nlp = pr["teacher_forced"]["next_logprob"].get<std::vector<double>>();
    auto rows = engine_->Score(ids);
    ASSERT_TRUE(rows.ok()) << rows.status();
    for (size_t i = 0; i < ids.size(); ++i) {
      if ((*rows)[i].argmax != am[i]) {
        EXPECT_LT(margin[i], near_tie) << pr["name"] << " position " << i;
      }
      if (i + 1 < ids.size()) {
        ++tf_total;
        tf_far += std::abs((*rows)[i].next_logprob - nlp[i]) > 0.1;
      }
    }
  }
  std::printf("glm-tiny-chat: greedy identical to HF on %d/%d prompts; next-token log-prob off by > 0.1 at %d/%d\n",
              identical, prompts, tf_far, tf_total);
  EXPECT_GE(identical * 4, prompts * 3);
  EXPECT_LE(tf_far * 32, tf_total);
  // Held-out prose (never trained on): teacher-forced argmax, >= 31 of 32 positions.
  const auto& h = g["heldout_teacher_forced"];
  const auto ids = Ids(h["ids"]);
  const auto am = Ids(h["argmax"]);
  const auto margin = h["margin"].get<std::vector<double>>();
  auto rows = engine_->Score(ids);
  ASSERT_TRUE(rows.ok()) << rows.status();
  int mismatch = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if ((*rows)[i].argmax != am[i]) {
      ++mismatch;
      EXPECT_LT(margin[i], near_tie) << "held-out position " << i;
    }
  }
  EXPECT_LE(mismatch * 32, static_cast<int>(ids.size()));
}

// The MTP layer reproduces the reference composition of HF modules (gen_oracle.py's
// mtp_teacher_forced) on the chat sequences; the acceptance rate is printed.
TEST_F(TrainedModelTest, MtpDraftsMatchReference) {
  ASSERT_NE(engine_, nullptr);
  ASSERT_TRUE(engine_->model().has_mtp());
  const auto g = Goldens();
  int total = 0, equal = 0, accepted = 0, acc_total = 0;
  for (const auto& pr : g["prompts"]) {
    const auto ids = Ids(pr["mtp_teacher_forced"]["ids"]);
    const auto want = Ids(pr["mtp_teacher_forced"]["draft_argmax"]);
    auto d = engine_->TeacherForcedMtpDrafts(ids);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(want.size(), d->draft.size());
    for (size_t j = 0; j < want.size(); ++j) {
      ++total;
      equal += d->draft[j] == want[j];
      if (j + 2 < ids.size()) {
        ++acc_total;
        accepted += d->draft[j] == d->main_argmax[j + 1];
      }
    }
  }
  EXPECT_LE((total - equal) * 32, total);
  std::printf("glm-tiny-chat MTP: drafts equal to reference %d/%d; acceptance %d/%d\n", equal, total, accepted,
              acc_total);
}

struct ChatCase {
  const char* question;
  bool thinking;
  const char* expect;  // substring of the decoded answer
};

// What the shipped demo model answers (models/glm-tiny-chat/MODEL_CARD.md lists every measured
// answer): it follows the chat template, stops at <|endoftext|> and answers the trained task types
// correctly — counting continues, successor days/months/letters, a product, the social answers, and
// with thinking on a reasoning line before the answer. (It still gets 2 + 3 and 9 - 4 wrong and
// overshoots the end of "count from a to b"; those are not checked here, the card says so.)
const ChatCase kChat[] = {
    {"Who are you?", false, "I am a tiny language model"},
    {"Hi", false, "Hello"},
    {"Thank you!", false, "welcome"},
    {"Continue counting: 11, 12, 13,", false, "14, 15, 16"},
    {"What day comes after Monday?", false, "The day after Monday is Tuesday."},
    {"What day comes before Friday?", false, "The day before Friday is Thursday."},
    {"What month comes after March?", false, "The month after March is April."},
    {"What letter comes after C?", false, "The letter after C is D."},
    {"List the days of the week.", false, "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday."},
    {"What is 3 times 4?", false, "= 12."},
    {"What day comes after Thursday?", true, "The day after Thursday is Friday."},  // reasoning + answer
};

TEST_F(TrainedModelTest, AnswersChatPromptsInEnglish) {
  ASSERT_NE(engine_, nullptr);
  auto mt = text::LoadModelText(kModelDir, {});
  ASSERT_TRUE(mt.ok()) << mt.status();
  for (const ChatCase& cc : kChat) {
    text::ChatInputs in;
    in.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", std::string(cc.question)}}});
    in.add_generation_prompt = true;
    in.kwargs["enable_thinking"] = cc.thinking;
    auto chat = mt->EncodeChat(in);
    ASSERT_TRUE(chat.ok()) << chat.status();
    const auto& ids = chat->ids;
    KvCache cache = engine_->NewCache();
    auto r = engine_->Generate(ids, 48, SamplingParams{}, cache);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->stopped_at_eos) << cc.question;
    const std::string answer = mt->tokenizer->Decode(r->tokens, /*skip_special=*/true);
    EXPECT_NE(answer.find(cc.expect), std::string::npos) << cc.question << " -> " << answer << " (want " << cc.expect << ")";
    std::printf("Q: %s%s\nA: %s\n", cc.question, cc.thinking ? " [thinking]" : "", answer.c_str());
  }
}

}  // namespace
}  // namespace moe
