#include "common/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/json.h"
#include "common/base/status.h"

namespace moe::text {
namespace {

using ojson = nlohmann::ordered_json;
using jinja::Value;

constexpr const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                              "pad_token", "cls_token", "mask_token"};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Value Str(std::string_view s, bool tainted = false) { return Value::Str(std::string(s), tainted); }

// One message as apply_chat_template hands it to the template.
absl::StatusOr<Value> MessageValue(const ojson& m, size_t index) {
  if (!m.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messages[", index, "]: chat messages should be objects, got ", m.type_name()));
  }
  jinja::Dict d;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it.value().is_null()) continue;  // _normalize_chat_messages drops None values
    if (it.key() == "role" && it.value().is_string()) {
      d.Set(Str("role"), Value::Str(it.value().get<std::string>()));  // a fixed vocabulary, not free text
    } else {
      d.Set(Str(it.key(), true), Value::FromJson(it.value(), /*tainted=*/true));
    }
  }
  // _alias_reasoning_fields: {"thinking": r, **message, "reasoning_content": r}
  const Value* reasoning = nullptr;
  for (const char* k : {"reasoning_content", "thinking", "reasoning"}) {
    if ((reasoning = d.FindStr(k)) != nullptr) break;
  }
  if (!reasoning) return Value::MakeDict(std::move(d));
  const Value r = *reasoning;
  jinja::Dict aliased;
  aliased.Set(Str("thinking"), r);
  for (const auto& [k, v] : d.items()) aliased.Set(k, v);
  aliased.Set(Str("reasoning_content"), r);
  return Value::MakeDict(std::move(aliased));
}

ojson ProbeMessages(bool string_args) {
  ojson args = ojson::object();
  args["probe_key"] = "probe_value";
  ojson call = {{"id", "probe0001"},
                {"type", "function"},
                {"function", {{"name", "probe_fn"}, {"arguments", string_args ? ojson(args.dump()) : args}}}};
  return ojson::array({ojson{{"role", "user"}, {"content", "probe"}},
                       ojson{{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array({call})}},
                       ojson{{"role", "tool"}, {"tool_call_id", "probe0001"}, {"content", "probe_result"}}});
}

}  // namespace

bool IsReservedTemplateVariable(std::string_view name) {
  if (name == "messages" || name == "tools" || name == "documents" || name == "add_generation_prompt") return true;
  for (const char* t : kSpecialTokenNames) {
    if (name == t) return true;
  }
  return false;
}

absl::StatusOr<ChatTemplate::SpecialTokens> ChatTemplate::ReadSpecialTokens(const std::string& dir) {
  SpecialTokens tokens;
  const std::string path = dir + "/tokenizer_config.json";
  auto text = ReadFile(path);
  if (!text.ok()) return tokens;
  auto cfg = ParseOrderedJson(*text);
  if (!cfg.ok()) return Annotate(cfg.status(), path);
  if (!cfg->is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  for (const char* name : kSpecialTokenNames) {
    auto it = cfg->find(name);
    if (it == cfg->end() || it->is_null()) continue;
    if (it->is_string()) {
      tokens.emplace_back(name, it->get<std::string>());
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      tokens.emplace_back(name, (*it)["content"].get<std::string>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ": '", name, "' must be a string or an AddedToken object"));
    }
  }
  return tokens;
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::Build(std::vector<Named> templates,
                                                                       std::string pinned, SpecialTokens tokens) {
  auto t = std::shared_ptr<ChatTemplate>(new ChatTemplate());
  t->templates_ = std::move(templates);
  t->pinned_ = std::move(pinned);
  t->tokens_ = std::move(tokens);
  // A list without a default is usable only with a name (transformers raises at apply time).
  MOE_RETURN_IF_ERROR(t->Select(false).status());
  for (Named& n : t->templates_) {
    auto probe = [&](bool string_args) {
      ChatInputs in;
      in.messages = ProbeMessages(string_args);
      in.add_generation_prompt = true;
      jinja::RenderOptions opt;  // a tiny conversation: a template that runs away is cut short
      opt.limits.max_output_bytes = 1 << 20;
      opt.limits.max_steps = 200'000;
      opt.limits.max_work_bytes = 16 << 20;
      auto r = t->RenderWith(n.tmpl, in, opt);
      return r.ok() && r->text.find("probe_value") != std::string::npos;
    };
    n.string_arguments = !probe(false) && probe(true);
  }
  return std::shared_ptr<const ChatTemplate>(std::move(t));
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromSource(std::string_view source, std::string origin,
                                                                            SpecialTokens tokens) {
  MOE_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source, std::move(origin)));
  std::vector<Named> v;
  v.push_back(Named{"", std::move(t), false});
  return Build(std::move(v), "", std::move(tokens));
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::Load(const std::string& dir,
                                                                      const std::string& override_file,
                                                                      const std::string& name) {
  MOE_ASSIGN_OR_RETURN(SpecialTokens tokens, ReadSpecialTokens(dir));
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (!name.empty() && (!override_file.empty() || std::filesystem::exists(jinja_path))) {
    return absl::InvalidArgumentError(absl::StrCat("chat template name '", name, "': names pick one of tokenizer_config.json's "
                                                   "list of templates, but the template comes from ",
                                                   override_file.empty() ? jinja_path : override_file));
  }
  if (!override_file.empty()) {
    auto src = ReadFile(override_file);
    if (!src.ok()) return absl::NotFoundError(absl::StrCat("chat template: cannot read ", override_file));
    MOE_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(*src, override_file));
    std::vector<Named> v;
    v.push_back(Named{"", std::move(t), false});
    return Build(std::move(v), "", std::move(tokens));
  }
  if (std::filesystem::exists(jinja_path)) {
    MOE_ASSIGN_OR_RETURN(std::string src, ReadFile(jinja_path));
    MOE_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(src, jinja_path));
    std::vector<Named> v;
    v.push_back(Named{"", std::move(t), false});
    return Build(std::move(v), "", std::move(tokens));
  }
  const std::string cfg_path = dir + "/tokenizer_config.json";
  auto text = ReadFile(cfg_path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("no chat template in ", dir,
                                            ": neither chat_template.jinja nor tokenizer_config.json exists "
                                            "(give one with --chat-template FILE)"));
  }
  MOE_ASSIGN_OR_RETURN(ojson cfg, ParseOrderedJson(*text));
  if (!cfg.is_object() || !cfg.contains("chat_template") || cfg["chat_template"].is_null()) {
    return absl::NotFoundError(absl::StrCat(cfg_path, ": no 'chat_template' (and no chat_template.jinja beside it; "
                                            "give one with --chat-template FILE)"));
  }
  const ojson& ct = cfg["chat_template"];
  std::vector<Named> v;
  if (ct.is_string()) {
    MOE_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(ct.get<std::string>(), cfg_path));
    v.push_back(Named{"", std::move(t), false});
  } else if (ct.is_array()) {
    for (size_t i = 0; i < ct.size(); ++i) {
      const ojson& e = ct[i];
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
          !e["template"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(cfg_path, ": chat_template[", i, "] must be {\"name\": string, \"template\": string}"));
      }
      const std::string n = e["name"].get<std::string>();
      MOE_ASSIGN_OR_RETURN(jinja::Template t,
                           jinja::Template::Parse(e["template"].get<std::string>(),
                                                  absl::StrCat(cfg_path, " chat_template '", n, "'")));
      v.push_back(Named{n, std::move(t), false});
    }
    if (v.empty()) return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": 'chat_template' is an empty list"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": 'chat_template' must be a string or a list of named templates"));
  }
  if (!name.empty() && ct.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": has a single chat template; there is no template named '",
                                                   name, "'"));
  }
  return Build(std::move(v), name, std::move(tokens));
}

absl::StatusOr<const ChatTemplate::Named*> ChatTemplate::Select(bool has_tools) const {
  if (templates_.size() == 1 && templates_[0].name.empty()) return &templates_[0];  // not the list form
  auto find = [&](std::string_view n) -> const Named* {
    for (const Named& t : templates_) {
      if (t.name == n) return &t;
    }
    return nullptr;
  };
  std::vector<std::string> names;
  for (const Named& t : templates_) names.push_back(t.name);
  if (!pinned_.empty()) {
    if (const Named* t = find(pinned_)) return t;
    return absl::InvalidArgumentError(absl::StrCat(origin(), ": no chat template named '", pinned_,
                                                   "' (it has: ", absl::StrJoin(names, ", "), ")"));
  }
  if (has_tools) {
    if (const Named* t = find("tool_use")) return t;
  }
  if (const Named* t = find("default")) return t;
  return absl::InvalidArgumentError(absl::StrCat(origin(), ": several chat templates (", absl::StrJoin(names, ", "),
                                                 ") and none named 'default'; choose one by name"));
}

bool ChatTemplate::Reads(std::string_view name) const {
  for (const Named& t : templates_) {
    if (t.tmpl.referenced_names().count(std::string(name))) return true;
  }
  return false;
}

std::vector<std::string> ChatTemplate::Literals() const {
  std::vector<std::string> out;
  for (const Named& t : templates_) out.insert(out.end(), t.tmpl.literals().begin(), t.tmpl.literals().end());
  return out;
}

bool ChatTemplate::WantsStringArguments(bool has_tools) const {
  auto t = Select(has_tools);
  return t.ok() && (*t)->string_arguments;
}

absl::StatusOr<ChatPrompt> ChatTemplate::Render(const ChatInputs& in, const jinja::RenderOptions& opt) const {
  MOE_ASSIGN_OR_RETURN(const Named* t, Select(!in.tools.is_null()));
  return RenderWith(t->tmpl, in, opt);
}

absl::StatusOr<ChatPrompt> ChatTemplate::RenderWith(const jinja::Template& t, const ChatInputs& in,
                                                      const jinja::RenderOptions& opt) const {
  if (!in.messages.is_array()) return absl::InvalidArgumentError("chat template: 'messages' must be an array");
  if (!in.tools.is_null() && !in.tools.is_array()) return absl::InvalidArgumentError("chat template: 'tools' must be an array");
  if (!in.documents.is_null() && !in.documents.is_array()) {
    return absl::InvalidArgumentError("chat template: 'documents' must be an array");
  }
  if (!in.kwargs.is_object()) return absl::InvalidArgumentError("chat template: kwargs must be an object");
  jinja::Dict vars;
  try {
    for (const auto& [k, v] : tokens_) vars.Set(Str(k), Str(v));
    for (auto it = in.kwargs.begin(); it != in.kwargs.end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools" || it.key() == "documents" || it.key() == "add_generation_prompt") {
        return absl::InvalidArgumentError(absl::StrCat("chat template kwarg '", it.key(), "' is not a template kwarg"));
      }
      vars.Set(Str(it.key()), Value::FromJson(it.value(), /*tainted=*/true));
    }
    jinja::List msgs;
    for (size_t i = 0; i < in.messages.size(); ++i) {
      MOE_ASSIGN_OR_RETURN(Value m, MessageValue(in.messages[i], i));
      msgs.push_back(std::move(m));
    }
    vars.Set(Str("messages"), Value::MakeList(std::move(msgs)));
    if (in.documents.is_array()) {
      for (size_t i = 0; i < in.documents.size(); ++i) {
        if (!in.documents[i].is_object()) {
          return absl::InvalidArgumentError("chat template: documents should be a list of objects");
        }
      }
    }
    vars.Set(Str("tools"), in.tools.is_null() ? Value::None() : Value::FromJson(in.tools, true));
    vars.Set(Str("documents"), in.documents.is_null() ? Value::None() : Value::FromJson(in.documents, true));
    vars.Set(Str("add_generation_prompt"), Value::Bool(in.add_generation_prompt));
  } catch (const jinja::TemplateError& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template inputs: ", e.message));
  }
  MOE_ASSIGN_OR_RETURN(jinja::TString out, t.Render(vars, opt));
  ChatPrompt r;
  for (const jinja::TaintSpan& s : out.taint()) r.client_spans.push_back({s.begin, s.end});
  r.text = out.Release();
  return r;
}

}  // namespace moe::text
