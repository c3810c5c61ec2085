#include "common/text/jinja/template.h"

#include <ctime>
#include <exception>

#include "absl/strings/str_cat.h"
#include "common/text/jinja/parser.h"

namespace moe::text::jinja {
namespace {

absl::Status ToStatus(const TemplateError& e, const std::string& origin) {
  const std::string where = e.line > 0 ? absl::StrCat(origin, " line ", e.line) : origin;
  if (e.kind == "TemplateError") return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.message));
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.kind, ": ", e.message));
}

}  // namespace

std::string StrftimeNow(const std::string& fmt) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string out(256, '\0');
  for (int tries = 0; tries < 4; ++tries) {
    const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    if (n > 0 || fmt.empty()) {
      out.resize(n);
      return out;
    }
    out.resize(out.size() * 4);
  }
  return std::string();
}

absl::StatusOr<Template> Template::Parse(std::string_view source, std::string origin) {
  Template t;
  t.origin_ = std::move(origin);
  try {
    std::shared_ptr<const TemplateAst> ast = jinja::Parse(source);
    t.names_ = ReferencedNames(*ast);
    t.literals_ = Literals(*ast);
    t.ast_ = std::move(ast);
  } catch (const TemplateError& e) {
    return ToStatus(e, t.origin_);
  } catch (const std::exception& e) {  // (the bounds keep the engine from these)
    return absl::ResourceExhaustedError(absl::StrCat(t.origin_, ": ", e.what()));
  }
  return t;
}

absl::StatusOr<TString> Template::Render(const Dict& vars, const RenderOptions& opt) const {
  Interpreter in(*ast_, opt.limits, opt.strftime ? opt.strftime : StrftimeNow);
  try {
    return in.Render(vars);
  } catch (const TemplateError& e) {
    return ToStatus(e, origin_);
  } catch (const std::exception& e) {  // (the bounds keep the engine from these: bad_alloc)
    return absl::ResourceExhaustedError(absl::StrCat(origin_, ": ", e.what()));
  }
}

}  // namespace moe::text::jinja
