#include "common/base/flags.h"

#include "common/base/status.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace moe {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  std::string_view t = SV(absl::StripAsciiWhitespace(AV(text)));
  if (t.empty()) return absl::InvalidArgumentError("empty byte size");
  uint64_t mult = 1;
  if (t.back() == 'B' || t.back() == 'b') t.remove_suffix(1);             // "1GB"
  if (!t.empty() && t.back() == 'i' && t.size() >= 2) t.remove_suffix(1);  // "1GiB"
  if (t.empty()) return absl::InvalidArgumentError(absl::StrCat("bad byte size '", AV(text), "'"));
  switch (t.back()) {
    case 'K': case 'k': mult = 1ull << 10; break;
    case 'M': case 'm': mult = 1ull << 20; break;
    case 'G': case 'g': mult = 1ull << 30; break;
    case 'T': case 't': mult = 1ull << 40; break;
    default: break;
  }
  if (mult != 1) t.remove_suffix(1);
  double v = 0;
  if (!absl::SimpleAtod(AV(t), &v) || !(v >= 0) || std::isinf(v)) {
    return absl::InvalidArgumentError(absl::StrCat("bad byte size '", AV(text), "'"));
  }
  long double bytes = static_cast<long double>(v) * mult;
  if (bytes > 1.8e19L) return absl::InvalidArgumentError(absl::StrCat("byte size too large '", AV(text), "'"));
  return static_cast<uint64_t>(std::llround(static_cast<double>(bytes)));
}

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::Add(Flag f) { flags_.push_back(std::move(f)); }

void FlagSet::AddString(std::string name, std::string* out, std::string help) {
  Add({name, std::move(help), *out, false, [out](std::string_view v) {
         *out = std::string(v);
         return absl::OkStatus();
       }});
}

void FlagSet::AddInt(std::string name, int64_t* out, std::string help) {
  Add({name, std::move(help), absl::StrCat(*out), false, [out, name](std::string_view v) {
         int64_t x;
         if (!absl::SimpleAtoi(AV(v), &x)) {
           return absl::InvalidArgumentError(absl::StrCat("--", name, ": not an integer: '", AV(v), "'"));
         }
         *out = x;
         return absl::OkStatus();
       }});
}

void FlagSet::AddDouble(std::string name, double* out, std::string help) {
  Add({name, std::move(help), absl::StrCat(*out), false, [out, name](std::string_view v) {
         double x;
         if (!absl::SimpleAtod(AV(v), &x) || std::isnan(x)) {
           return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a number: '", AV(v), "'"));
         }
         *out = x;
         return absl::OkStatus();
       }});
}

void FlagSet::AddBool(std::string name, bool* out, std::string help) {
  Add({name, std::move(help), *out ? "true" : "false", true, [out, name](std::string_view v) {
         if (v == "true" || v == "1" || v == "yes") *out = true;
         else if (v == "false" || v == "0" || v == "no") *out = false;
         else return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a boolean: '", AV(v), "'"));
         return absl::OkStatus();
       }});
}

void FlagSet::AddBytes(std::string name, uint64_t* out, std::string help) {
  Add({name, std::move(help), absl::StrCat(*out), false, [out, name](std::string_view v) {
         auto r = ParseByteSize(v);
         if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", r.status().message()));
         *out = *r;
         return absl::OkStatus();
       }});
}

void FlagSet::AddStringList(std::string name, std::vector<std::string>* out, std::string help) {
  Add({name, std::move(help), "", false, [out](std::string_view v) {
         out->emplace_back(v);
         return absl::OkStatus();
       }});
}

const FlagSet::Flag* FlagSet::Find(std::string_view name) const {
  for (const auto& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  return std::find(set_.begin(), set_.end(), name) != set_.end();
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return Parse(args);
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  bool flags_done = false;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (flags_done || a.size() < 2 || a[0] != '-' || a == "-") {
      positional_.emplace_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    std::string_view body = a.substr(a[1] == '-' ? 2 : 1);
    if (body == "help" || body == "h") {
      help_ = true;
      continue;
    }
    std::string_view name = body, value;
    bool has_value = false;
    if (auto eq = body.find('='); eq != std::string_view::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    const Flag* f = Find(name);
    if (f == nullptr && !has_value && absl::StartsWith(AV(name), "no-")) {
      const Flag* neg = Find(name.substr(3));
      if (neg != nullptr && neg->is_bool) {
        absl::Status s = neg->set("false");
        if (!s.ok()) return s;
        set_.push_back(neg->name);
        continue;
      }
    }
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(command_, ": unknown flag '--", AV(name), "' (see --help)"));
    }
    if (!has_value) {
      if (f->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(command_, ": flag '--", AV(name), "' needs a value"));
      }
    }
    absl::Status s = f->set(value);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(command_, ": ", s.message()));
    set_.push_back(f->name);
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::ostringstream o;
  o << "usage: moe " << command_ << " [flags]\n" << summary_ << "\n\nflags:\n";
  for (const auto& f : flags_) {
    o << "  --" << f.name;
    if (!f.is_bool) o << "=VALUE";
    o << "\n      " << f.help;
    if (!f.default_text.empty()) o << " (default: " << f.default_text << ")";
    o << "\n";
  }
  return o.str();
}

}  // namespace moe
