// What the gateway needs from the text layer: tokenize prompts, render chat
// requests through the model's chat template, turn generated token ids back
// into bytes, and split assistant output into content / reasoning /
// tool calls.
//
// The gateway owns all text handling: workers see token ids only. That keeps
// stop strings, the incremental detokenizer and the reasoning/tool-call
// parser in one process, next to the HTTP response they shape (a worker
// stops a sequence the step after the gateway's Cancel).
// Implementations: ByteCodec (byte-level, for test models) and the adapter
// over common/text (the model's tokenizer and its own chat template).
// Thread safety: implementations are immutable after construction; methods
// are safe to call concurrently. OutputParser instances are per choice.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/structured/constraint_spec.h"
#include "nlohmann/json.hpp"
#include "services/gateway/protocol.h"

namespace moe::gateway {

// Incremental split of assistant text into what OpenAI calls content,
// reasoning_content and tool_calls.
class OutputParser {
 public:
  struct Delta {
    std::string content;
    std::string reasoning;
    nlohmann::json tool_calls = nlohmann::json::array();  // complete calls, OpenAI shape, "index" set
    bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  };
  virtual ~OutputParser() = default;
  virtual Delta Push(std::string_view text) = 0;
  virtual Delta Finish() = 0;  // end of output: releases anything held
};

// Everything is content.
class PlainOutputParser final : public OutputParser {
 public:
  Delta Push(std::string_view text) override {
    Delta d;
    d.content = std::string(text);
    return d;
  }
  Delta Finish() override { return {}; }
};

// A chat request's prompt: its ids, and whether the prompt leaves the model inside a
// reasoning block (the output parser then starts in reasoning).
struct ChatPromptIds {
  std::vector<int32_t> ids;
  bool opens_reasoning = false;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual int32_t vocab_size() const = 0;
  // Raw text (completions prompt) as HF's tokenizer(text): special tokens in the text
  // parsed, the post-processor's (BOS ...) added unless add_special_tokens is false.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = true) const = 0;
  // The chat template applied to messages (+ tools, kwargs), ending with the
  // assistant generation prompt; InvalidArgument names the bad message, kwarg
  // or template line.
  virtual absl::StatusOr<ChatPromptIds> EncodeChat(const ChatRequest& request) const = 0;
  // Bytes of one token as it appears in the output (may be partial UTF-8): TokenTexts()[id]
  // (special tokens "" except the chat format's markers, which the output parser reads).
  std::string TokenBytes(int32_t id) const {
    const auto& t = TokenTexts();
    return id >= 0 && static_cast<size_t>(id) < t.size() ? t[id] : std::string();
  }
  // skip_special_tokens=false: special tokens as their text too.
  virtual std::string TokenBytesWithSpecial(int32_t id) const = 0;
  // Every token's output text (common/text/output_vocab.h): what structured outputs are
  // compiled against on the workers (its fingerprint travels with constrained requests).
  virtual const std::vector<std::string>& TokenTexts() const = 0;
  // The control markers of the chat format's output (kept out of constrained free text).
  virtual std::vector<std::string> OutputMarkers() const = 0;
  // How the chat format writes a tool call, or nullopt when tool calls cannot be
  // constrained for it (tool_choice required/named and parallel_tool_calls=false are then
  // refused).
  virtual std::optional<structured::ToolSyntax> ToolCallSyntax() const = 0;
  // Token ids that end generation (EOS, end-of-turn).
  virtual std::vector<int32_t> StopTokenIds() const = 0;
  virtual std::unique_ptr<OutputParser> NewChatParser(const ChatRequest& request, bool opens_reasoning) const = 0;
};

// Holds back an incomplete UTF-8 sequence at the end of the byte stream.
class Utf8Assembler {
 public:
  std::string Push(std::string_view bytes);
  std::string Flush();  // whatever is left (may be invalid UTF-8)

 private:
  std::string pending_;
};

}  // namespace moe::gateway
