// The gateway's text codec over the committed GLM test tokenizer and template, loaded once
// per fuzzer process (the targets that go through ModelTextCodec share it).
#pragma once

#include <cstdlib>
#include <string>

#include "services/gateway/text_codec_model.h"

namespace moe::fuzz {

inline const gateway::ModelTextCodec* GlmCodec() {
  static const auto* codec = [] {
    auto c = gateway::ModelTextCodec::Load(std::string(MOE_SOURCE_DIR) + "/tests/data/text/glm_tiny");
    if (!c.ok()) std::abort();
    return c->release();
  }();
  return codec;
}

}  // namespace moe::fuzz
