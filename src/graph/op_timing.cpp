#include "graph/op_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "core/env.h"

namespace minfer::graph {
namespace {

struct Totals {
  uint64_t count = 0;
  double ms = 0.0;
};

struct State {
  std::mutex mu;
  std::map<std::pair<bool, std::string>, Totals> rows;
  Totals steps[2];  ///< [decode, prefill]
};

State& state() {
  static State s;
  return s;
}

/// -1: not decided yet (the environment decides on first use), 0 off, 1 on.
std::atomic<int> g_on{-1};

}  // namespace

bool op_timing_enabled() {
  int on = g_on.load(std::memory_order_relaxed);
  if (on < 0) {
    on = env_flag("MINFER_OP_TIMING") ? 1 : 0;
    g_on.store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

void set_op_timing(bool on) { g_on.store(on ? 1 : 0, std::memory_order_relaxed); }

std::string op_timing_class(const Graph& g, const Node& n) {
  std::string key(op_name(n.op));
  if (n.p.has_norm) key += "+norm";
  const int src_w = n.op == Op::MatMul || n.op == Op::MatMulAdd           ? 0
                    : n.op == Op::FusedQKV || n.op == Op::FusedFFN ? 1
                                                                   : -1;
  if (src_w >= 0 && n.n_src > src_w) key += fmt::format(" {}", type_name(g.node(n.src[static_cast<size_t>(src_w)]).type));
  return key;
}

void record_op_time(bool prefill, std::string_view op, double ms) {
  State& s = state();
  std::lock_guard lock(s.mu);
  Totals& t = s.rows[{prefill, std::string(op)}];
  ++t.count;
  t.ms += ms;
}

void record_step_time(bool prefill, double ms) {
  State& s = state();
  std::lock_guard lock(s.mu);
  Totals& t = s.steps[prefill ? 1 : 0];
  ++t.count;
  t.ms += ms;
}

std::vector<OpTimeRow> op_time_rows() {
  State& s = state();
  std::lock_guard lock(s.mu);
  std::vector<OpTimeRow> out;
  for (const auto& [key, t] : s.rows) out.push_back({key.first, key.second, t.count, t.ms});
  std::sort(out.begin(), out.end(), [](const OpTimeRow& a, const OpTimeRow& b) {
    if (a.prefill != b.prefill) return a.prefill;
    return a.ms > b.ms;
  });
  return out;
}

double op_timing_step_ms(bool prefill, uint64_t* steps) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (steps != nullptr) *steps = s.steps[prefill ? 1 : 0].count;
  return s.steps[prefill ? 1 : 0].ms;
}

std::string op_timing_table() {
  const std::vector<OpTimeRow> rows = op_time_rows();
  std::string out;
  for (const bool prefill : {true, false}) {
    uint64_t steps = 0;
    const double step_ms = op_timing_step_ms(prefill, &steps);
    if (steps == 0) continue;
    out += fmt::format("op timing, {}: {} forwards, {:.3f} ms ({:.3f} ms each)\n", prefill ? "prefill" : "decode", steps,
                       step_ms, step_ms / static_cast<double>(steps));
    out += fmt::format("  {:<28} {:>8} {:>12} {:>11} {:>7}\n", "op", "count", "total ms", "mean us", "share");
    double timed = 0.0;
    for (const OpTimeRow& r : rows) {
      if (r.prefill != prefill) continue;
      timed += r.ms;
      out += fmt::format("  {:<28} {:>8} {:>12.3f} {:>11.2f} {:>6.1f}%\n", r.op, r.count, r.ms,
                         1000.0 * r.ms / static_cast<double>(r.count), step_ms > 0 ? 100.0 * r.ms / step_ms : 0.0);
    }
    out += fmt::format("  {:<28} {:>8} {:>12.3f} {:>11} {:>6.1f}%\n", "(outside the nodes)", "", step_ms - timed, "",
                       step_ms > 0 ? 100.0 * (step_ms - timed) / step_ms : 0.0);
  }
  return out;
}

void reset_op_timing() {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.rows.clear();
  s.steps[0] = s.steps[1] = Totals{};
}

}  // namespace minfer::graph
