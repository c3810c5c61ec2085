// The work budget of the render running on this thread: bytes of text and list storage the
// template builds, copies or scans. The step budget (interpreter.h) counts statements and
// expressions, but one step can copy or search a long string -- a loop doubling a string, a
// join of many references to one long string, `s[i]` over a long message -- so memory and
// time are bounded by this count too. Every place that builds or walks bytes charges it:
// TString's appends, copies and slices, list and dict storage, the code point index of a
// string, string search; operations whose result is a multiple of an argument (repetition,
// padding widths, indent) check the projected size before they build anything.
//
//   RenderBudget budget(limits.max_work_bytes);   // for the duration of one render
//   RenderBudget::Charge(bytes);                  // anywhere in the engine
//
// Exceeding it raises TemplateError MemoryError naming the limit; the interpreter adds the
// template line. Outside a render (parsing, JSON input) charging is free and never raises.
// Thread safety: the budget in force is per thread (a render runs on one thread).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moe::text::jinja {

class RenderBudget {
 public:
  explicit RenderBudget(uint64_t max_bytes);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // Spends `bytes` of the current render's budget; raises when it is exhausted.
  static void Charge(uint64_t bytes);
  // Raises when building `bytes` more would exhaust the current render's budget (spends
  // nothing: the build that follows charges what it really builds).
  static void Check(uint64_t bytes);

 private:
  [[noreturn]] void Exhausted() const;
  uint64_t max_ = 0;
  uint64_t used_ = 0;
  RenderBudget* prev_ = nullptr;
};

}  // namespace moe::text::jinja
