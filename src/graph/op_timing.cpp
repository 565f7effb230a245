#include "graph/op_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/env.h"
#include "core/error.h"

namespace minfer::graph {
namespace {

struct Totals {
  uint64_t count = 0;
  double ms = 0.0;
};

/// One trace event, 24 bytes: names are indices into State::names (a run repeats a few hundred
/// node names and op classes), so a million events take 24 MB.
struct TraceEvent {
  uint32_t name, cat;
  double ts_us;
  float dur_us;
  uint8_t tid;  ///< 0 forwards, 1 CPU nodes, 2 CUDA nodes
  bool prefill;
};

struct State {
  std::mutex mu;
  std::map<std::pair<bool, std::string>, Totals> rows;
  Totals steps[2];  ///< [decode, prefill]
  std::string trace_path;  ///< --trace-out file, or empty
  std::vector<TraceEvent> events;
  std::map<std::string, uint32_t, std::less<>> name_ids;  ///< interned names
  std::vector<std::string> names;
  uint64_t dropped = 0;  ///< events past kMaxTraceEvents
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

bool is_prefill(const Graph& g) {
  const NodeId tokens = g.find_input(InputKind::TokenIds);
  return tokens != kNoNode && g.node(tokens).ne[0] > 1;
}

int matrix_weight_source(const Node& n) {
  if (n.op == Op::MatMul || n.op == Op::MatMulAdd) return 0;
  if (n.op == Op::FusedQKV || n.op == Op::FusedFFN) return 1;
  return -1;
}

std::string op_timing_class(const Graph& g, const Node& n) {
  std::string key(op_name(n.op));
  if (n.p.has_norm) key += "+norm";
  if (const int src_w = matrix_weight_source(n); src_w >= 0 && n.n_src > src_w)
    key += fmt::format(" {}", type_name(g.node(n.src[static_cast<size_t>(src_w)]).type));
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
  s.events.clear();
  s.names.clear();
  s.name_ids.clear();
  s.dropped = 0;
}

namespace {
std::atomic<bool> g_trace_on{false};

uint32_t intern(State& s, std::string_view name) {
  const auto it = s.name_ids.find(name);
  if (it != s.name_ids.end()) return it->second;
  const auto id = static_cast<uint32_t>(s.names.size());
  s.names.emplace_back(name);
  s.name_ids.emplace(std::string(name), id);
  return id;
}

void push_event(std::string_view name, std::string_view cat, double ts_us, double dur_us, int tid, bool prefill) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.events.size() >= kMaxTraceEvents) {
    ++s.dropped;
    return;
  }
  s.events.push_back({intern(s, name), intern(s, cat), ts_us, static_cast<float>(dur_us), static_cast<uint8_t>(tid), prefill});
}
}  // namespace

void set_trace_out(const std::string& path) {
  if (!path.empty() && (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0))
    fail("trace file {}: the name must end in .json (Chrome / Perfetto trace-event JSON)", path);
  if (!path.empty()) check_output_path(path);  // a bad folder fails now, not after the run
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    s.trace_path = path;
  }
  g_trace_on.store(!path.empty());
  if (!path.empty()) set_op_timing(true);
}

bool trace_out_enabled() { return g_trace_on.load(std::memory_order_relaxed); }

double trace_clock_ms() {
  static const auto epoch = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch).count();
}

void record_trace_node(bool prefill, std::string_view node, std::string_view op, double start_ms, double dur_ms,
                       bool cuda) {
  if (!trace_out_enabled()) return;
  push_event(node, op, 1000.0 * start_ms, 1000.0 * dur_ms, cuda ? 2 : 1, prefill);
}

void record_trace_step(bool prefill, double start_ms, double dur_ms) {
  if (!trace_out_enabled()) return;
  push_event(prefill ? "prefill forward" : "decode forward", "forward", 1000.0 * start_ms, 1000.0 * dur_ms, 0, prefill);
}

void write_trace_out() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.trace_path.empty()) return;
  // Streamed, not built as one JSON value: a million events stay a million short lines. Names
  // are JSON-escaped once each (model files name the nodes: invalid UTF-8 is replaced).
  std::vector<std::string> quoted;
  quoted.reserve(s.names.size());
  for (const std::string& n : s.names)
    quoted.push_back(nlohmann::json(n).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  std::string out = "{\"displayTimeUnit\":\"ms\",";
  if (s.dropped > 0)
    out += fmt::format("\"otherData\":{{\"dropped_events\":{},\"kept_events\":{}}},", s.dropped, s.events.size());
  out += "\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"minfer\"}}";
  const char* tracks[] = {"forwards", "CPU nodes", "CUDA nodes"};
  for (int t = 0; t < 3; ++t)
    out += fmt::format(",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}", t,
                       tracks[t]);
  AtomicFile f(s.trace_path);
  for (const TraceEvent& e : s.events) {
    // Microseconds with nanosecond digits: no binary-fraction noise in the file.
    out += fmt::format(",\n{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":1,\"tid\":{},"
                       "\"args\":{{\"phase\":\"{}\"}}}}",
                       quoted[e.name], quoted[e.cat], e.ts_us, static_cast<double>(e.dur_us), e.tid,
                       e.prefill ? "prefill" : "decode");
    if (out.size() >= (1u << 20)) {
      f.write(out.data(), out.size());
      out.clear();
    }
  }
  out += "\n]}\n";
  f.write(out.data(), out.size());
  f.commit();
}

}  // namespace minfer::graph
