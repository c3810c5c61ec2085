#include "common/base/config_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/status.h"

namespace moe {

absl::StatusOr<std::vector<std::string>> ParseConfigSection(const std::string& text,
                                                            const std::string& section,
                                                            const std::string& origin) {
  std::vector<std::string> args;
  std::istringstream in(text);
  std::string line;
  std::string current;  // "" = global lines before any section
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string_view l = SV(absl::StripAsciiWhitespace(AV(line)));
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l[0] == '[') {
      if (l.back() != ']' || l.size() < 3) {
        return absl::InvalidArgumentError(
            absl::StrCat(AV(origin), ":", lineno, ": bad section header '", AV(l), "'"));
      }
      current = std::string(l.substr(1, l.size() - 2));
      continue;
    }
    size_t eq = l.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(AV(origin), ":", lineno, ": expected 'key = value', got '", AV(l), "'"));
    }
    std::string_view key = SV(absl::StripAsciiWhitespace(AV(l.substr(0, eq))));
    std::string_view value = SV(absl::StripAsciiWhitespace(AV(l.substr(eq + 1))));
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(AV(origin), ":", lineno, ": empty key"));
    }
    if (current.empty() || current == section) {
      args.push_back(absl::StrCat("--", AV(key), "=", AV(value)));
    }
  }
  return args;
}

absl::StatusOr<std::vector<std::string>> ReadConfigSection(const std::string& path,
                                                           const std::string& section) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open config file ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseConfigSection(ss.str(), section, path);
}

absl::StatusOr<std::vector<std::string>> ArgsWithConfig(int argc, char** argv,
                                                        const std::string& section) {
  std::vector<std::string> rest;
  std::string config;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config") {
      if (i + 1 >= argc) return absl::InvalidArgumentError("--config needs a path");
      config = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config = a.substr(9);
    } else {
      rest.push_back(std::move(a));
    }
  }
  std::vector<std::string> out{argc > 0 ? argv[0] : section};
  if (!config.empty()) {
    MOE_ASSIGN_OR_RETURN(auto from_file, ReadConfigSection(config, section));
    out.insert(out.end(), from_file.begin(), from_file.end());
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

}  // namespace moe
