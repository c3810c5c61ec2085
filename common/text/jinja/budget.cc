#include "common/text/jinja/budget.h"

#include "absl/strings/str_cat.h"
#include "common/text/jinja/value.h"

namespace moe::text::jinja {
namespace {
thread_local RenderBudget* current = nullptr;
}  // namespace

RenderBudget::RenderBudget(uint64_t max_bytes) : max_(max_bytes), prev_(current) { current = this; }

RenderBudget::~RenderBudget() { current = prev_; }

void RenderBudget::Charge(uint64_t bytes) {
  RenderBudget* b = current;
  if (!b) return;
  if (bytes > b->max_ - b->used_) b->Exhausted();
  b->used_ += bytes;
}

void RenderBudget::Check(uint64_t bytes) {
  const RenderBudget* b = current;
  if (b && bytes > b->max_ - b->used_) b->Exhausted();
}

void RenderBudget::Exhausted() const {
  Throw("MemoryError", absl::StrCat("the template built or scanned more than ", max_,
                                    " bytes of text and lists (limit max_work_bytes)"));
}

}  // namespace moe::text::jinja
