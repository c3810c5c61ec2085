// moestream.json from an untrusted file: ParseContainerManifest accepts a real manifest and
// refuses by name what would let a manifest nest the parser's stack away, walk out of the
// container directory, or carry impossible counts.
#include <fstream>
#include <iterator>
#include <string>

#include "common/format/container.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

std::string Seed() {
  std::ifstream in(std::string(MOE_SOURCE_DIR) + "/fuzz/corpus/container_manifest/glm_tiny_chat_q4");
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  return p == std::string::npos ? s : s.replace(p, from.size(), to);
}

TEST(ContainerManifest, AcceptsARealManifest) {
  auto info = ParseContainerManifest(Seed(), "m/moestream.json");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model_type, "glm_moe_dsa");
  EXPECT_EQ(info->num_hidden_layers, 4);
  EXPECT_EQ(info->n_routed_experts, 32);
  ASSERT_EQ(info->shards.size(), 1u);
  EXPECT_EQ(info->shards[0], "model.safetensors");
}

TEST(ContainerManifest, RefusesHostileManifestsByName) {
  struct Case {
    std::string text, says;
  };
  const std::string seed = Seed();
  const Case cases[] = {
      {std::string(100000, '[') + std::string(100000, ']'), "not a moestream manifest"},
      {Replace(seed, "\"policy\"", "\"deep\": " + std::string(5000, '[') + std::string(5000, ']') + ", \"policy\""),
       "nest"},
      {Replace(seed, "\"file\": \"model.safetensors\"", "\"file\": \"../../etc/passwd\""), "not a plain file name"},
      {Replace(seed, "\"file\": \"model.safetensors\"", "\"file\": \"..\""), "not a plain file name"},
      {Replace(seed, "\"file\": \"model.safetensors\"", "\"file\": \"\""), "not a plain file name"},
      {Replace(seed, "\"num_hidden_layers\": 4", "\"num_hidden_layers\": -4"), "negative"},
      {Replace(seed, "\"version\": 1", "\"version\": 99"), "unsupported container version 99"},
      {Replace(seed, "\"version\": 1", "\"version\": \"1\""), "malformed manifest"},
      {Replace(seed, "moestream-container", "other"), "magic"},
      {"{\"magic\": \"moestream-container\"", "not a moestream manifest"},
  };
  for (const Case& c : cases) {
    auto info = ParseContainerManifest(c.text, "m/moestream.json");
    ASSERT_FALSE(info.ok()) << c.says;
    EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss) << info.status();
    EXPECT_NE(info.status().message().find(c.says), std::string::npos) << info.status();
    EXPECT_NE(info.status().message().find("m/moestream.json"), std::string::npos) << info.status();
  }
}

}  // namespace
}  // namespace moe
