#include "services/gateway/byte_codec.h"

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/text/output_vocab.h"
#include "common/base/status.h"

namespace moe::gateway {

absl::StatusOr<std::vector<int32_t>> ByteCodec::Encode(std::string_view text, bool) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string ByteCodec::RenderChat(const ChatRequest& request) {
  std::string s;
  if (!request.tools.is_null() && request.tool_choice != "none") {
    s += "<|tools|>\n";
    for (const auto& t : request.tools) s += DumpJson(t["function"]) + "\n";
  }
  for (const auto& m : request.messages) {
    s += "<|" + m.role + "|>\n" + m.content;
    if (m.tool_calls.is_array()) {
      for (const auto& tc : m.tool_calls) {
        const auto& f = tc["function"];
        std::string args = f.contains("arguments") ? f["arguments"].get<std::string>() : "{}";
        s += "<tool_call>" + f["name"].get<std::string>() + " " + args + "</tool_call>";
      }
    }
    s += "\n";
  }
  if (request.add_generation_prompt) s += "<|assistant|>\n";
  return s;
}

absl::StatusOr<ChatPromptIds> ByteCodec::EncodeChat(const ChatRequest& request) const {
  if (!request.chat_template_kwargs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("chat_template_kwargs.", request.chat_template_kwargs.begin().key(),
                                                   ": the byte-level test codec's template takes no variables"));
  }
  if (!request.reasoning_effort.empty()) {
    return absl::InvalidArgumentError("reasoning_effort: the byte-level test codec's template takes no variables");
  }
  ChatPromptIds p;
  MOE_ASSIGN_OR_RETURN(p.ids, Encode(RenderChat(request)));
  return p;
}

const std::vector<std::string>& ByteCodec::TokenTexts() const {
  static const std::vector<std::string> texts = text::ByteLevelTexts();  // the end token renders as nothing
  return texts;
}

namespace {

// Splits <think>..</think> and <tool_call>NAME ARGS</tool_call> spans out of
// streamed text. Holds back a tail that may be the start of a tag.
class TaggedParser final : public OutputParser {
 public:
  explicit TaggedParser(bool tools) : tools_(tools) {}

  Delta Push(std::string_view text) override {
    buf_.append(text);
    Delta d;
    while (true) {
      if (mode_ == kContent) {
        size_t think = buf_.find("<think>");
        size_t call = tools_ ? buf_.find("<tool_call>") : std::string::npos;
        size_t tag = std::min(think, call);
        if (tag == std::string::npos) {
          size_t keep = HoldBack(buf_, tools_ ? std::vector<std::string>{"<think>", "<tool_call>"}
                                              : std::vector<std::string>{"<think>"});
          d.content += buf_.substr(0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return d;
        }
        d.content += buf_.substr(0, tag);
        if (tag == think) {
          buf_.erase(0, tag + 7);
          mode_ = kThink;
        } else {
          buf_.erase(0, tag + 11);
          mode_ = kCall;
        }
      } else if (mode_ == kThink) {
        size_t end = buf_.find("</think>");
        if (end == std::string::npos) {
          size_t keep = HoldBack(buf_, {"</think>"});
          d.reasoning += buf_.substr(0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return d;
        }
        d.reasoning += buf_.substr(0, end);
        buf_.erase(0, end + 8);
        mode_ = kContent;
      } else {
        // A call is emitted whole; search only what arrived since the last look.
        size_t end = buf_.find("</tool_call>", call_scanned_);
        if (end == std::string::npos) {
          call_scanned_ = buf_.size() >= 12 ? buf_.size() - 11 : 0;
          return d;
        }
        call_scanned_ = 0;
        std::string body = buf_.substr(0, end);
        buf_.erase(0, end + 12);
        mode_ = kContent;
        size_t sp = body.find(' ');
        std::string name = body.substr(0, sp);
        std::string args = sp == std::string::npos ? "{}" : body.substr(sp + 1);
        nlohmann::json call{{"index", calls_},
                            {"id", absl::StrCat("call_", calls_)},
                            {"type", "function"},
                            {"function", {{"name", name}, {"arguments", args}}}};
        ++calls_;
        d.tool_calls.push_back(call);
      }
    }
  }

  Delta Finish() override {
    Delta d;
    if (mode_ == kThink) {
      d.reasoning = buf_;
    } else if (mode_ == kCall) {
      d.content = "<tool_call>" + buf_;  // unterminated call: show it as text
    } else {
      d.content = buf_;
    }
    buf_.clear();
    call_scanned_ = 0;
    return d;
  }

 private:
  static size_t HoldBack(const std::string& s, const std::vector<std::string>& tags) {
    size_t hold = 0;
    for (const auto& t : tags) {
      for (size_t k = std::min(s.size(), t.size() - 1); k > hold; --k) {
        if (s.compare(s.size() - k, k, t, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    return hold;
  }

  enum Mode { kContent, kThink, kCall } mode_ = kContent;
  bool tools_;
  std::string buf_;
  size_t call_scanned_ = 0;  // kCall: buf_ before this offset holds no "</tool_call>"
  int calls_ = 0;
};

}  // namespace

std::unique_ptr<OutputParser> ByteCodec::NewChatParser(const ChatRequest& request, bool /*opens_reasoning*/) const {
  return std::make_unique<TaggedParser>(!request.tools.is_null() && request.tool_choice != "none");
}

}  // namespace moe::gateway
