// JSON text exactly as Python's json.dumps(x, ensure_ascii=..., separators=(", ", ": "))
// writes it -- what chat templates' `tojson` filter (transformers) puts into prompts.
// Keys keep insertion order (nlohmann::ordered_json). Strings must be UTF-8; ill-formed
// bytes are written as U+FFFD. Floats use the shortest round-trip form. Any depth: the
// writer keeps its own stack (client JSON must not overflow the thread's).
// Thread safety: pure function.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace moe::text {

std::string PyJsonDumps(const nlohmann::ordered_json& j, bool ensure_ascii = false);

}  // namespace moe::text
