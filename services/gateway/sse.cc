#include "services/gateway/sse.h"

#include "common/base/json.h"

namespace moe::gateway {

std::string SseData(const nlohmann::json& event) {
  return "data: " + DumpJson(event) + "\n\n";
}

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string SseComment(std::string_view text) {
  std::string out = ": ";
  for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
  return out + "\n\n";
}

std::vector<std::string> SseParse(std::string* buffer) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = buffer->find("\n\n", start);
    if (end == std::string::npos) break;
    std::string_view frame(buffer->data() + start, end - start);
    size_t pos = 0;
    std::string data;
    bool has_data = false;
    while (pos <= frame.size()) {
      size_t nl = frame.find('\n', pos);
      if (nl == std::string_view::npos) nl = frame.size();
      std::string_view line = frame.substr(pos, nl - pos);
      if (line.rfind("data:", 0) == 0) {
        std::string_view v = line.substr(5);
        if (!v.empty() && v[0] == ' ') v.remove_prefix(1);
        if (has_data) data += '\n';
        data.append(v);
        has_data = true;
      }
      pos = nl + 1;
    }
    if (has_data) out.push_back(std::move(data));
    start = end + 2;
  }
  buffer->erase(0, start);
  return out;
}

}  // namespace moe::gateway
