// Op timing (`--profile` on run and bench, MINFER_OP_TIMING=1): where a forward's time goes, per
// op and weight type, separately for prefill (ubatches of more than one token) and decode; and
// the same measurements as a timeline (`--trace-out FILE.json`).
//
// How each backend measures (off by default; nothing is timed or synchronized while off):
//   CPU   PreparedGraph::execute runs node by node and reads a monotonic clock around each node
//         (the CPU backend runs nodes one after another anyway, so this changes no schedule).
//   CUDA  the backend records a pair of CUDA events around each node's launches and reads them
//         after the split (device time, no host gaps); CUDA graph capture and replay are off
//         while timing, since events inside a replayed graph cannot be read per node.
// The step time is the wall time of PreparedGraph::execute; the table's "share" is the op's
// time over the phase's step time, and the remainder row is what no node accounts for (input
// uploads, readbacks, launch gaps, synchronization).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace minfer::graph {

/// One row of the op-timing table.
struct OpTimeRow {
  bool prefill = false;  ///< prefill (ubatches of > 1 token) or decode
  std::string op;        ///< e.g. "MatMul q6_K", "FusedFFN+norm q4_K", "Attn"
  uint64_t count = 0;    ///< nodes timed
  double ms = 0.0;       ///< their total time, milliseconds
};

/// True while op timing is on: MINFER_OP_TIMING=1, or set_op_timing(true) (--profile).
bool op_timing_enabled();
/// Turns op timing on or off for the rest of the process (before engines are created: the CUDA
/// backend decides at creation whether it captures graphs).
void set_op_timing(bool on);

/// Op timing's phase of a graph: prefill when its ubatch holds more than one token (the
/// TokenIds input's length), else decode.
bool is_prefill(const Graph& g);

/// The source index of the weight of a matrix op (MatMul, MatMulAdd: 0; FusedQKV, FusedFFN: 1),
/// -1 for other ops.
int matrix_weight_source(const Node& n);

/// The row name of node `n` of `g`: its op, "+norm" where an RmsNorm is folded in, and the
/// weight type of the matrix ops (MatMul, MatMulAdd, FusedQKV, FusedFFN).
std::string op_timing_class(const Graph& g, const Node& n);

/// Adds `ms` of node time to row (prefill, op). Thread-safe.
void record_op_time(bool prefill, std::string_view op, double ms);
/// Adds one forward of `ms` wall time to the phase's step time. Thread-safe.
void record_step_time(bool prefill, double ms);

/// The rows so far, prefill first, each phase by time (largest first).
std::vector<OpTimeRow> op_time_rows();
/// Total step time (ms) and forwards of a phase so far.
double op_timing_step_ms(bool prefill, uint64_t* steps = nullptr);
/// The table as printed after a run: per phase a header with the step count and time, then
/// "op, count, total ms, mean us, share" rows and the remainder row. Empty when nothing was timed.
std::string op_timing_table();
/// Forgets every row, step and trace event (tests).
void reset_op_timing();

// ---- trace-event file (--trace-out FILE.json) ----
// A Chrome / Perfetto trace-event JSON ("traceEvents" of complete events, ph "X", times in
// microseconds since the first event of the process): one event per timed node (name: the
// node's name; cat: its op_timing_class; args: phase) on the track of its backend (tid 1 CPU,
// 2 CUDA), and one per forward on tid 0 ("prefill forward" / "decode forward"), so the gaps
// between forwards are the host's time outside the graph. CUDA node times are device times
// placed from the host clock read when the split's first event was queued (an estimate of
// where they start; their durations and order are exact). Opens in ui.perfetto.dev and
// chrome://tracing. At most kMaxTraceEvents events are kept (then the file says how many were
// dropped), so memory stays bounded on long runs.
inline constexpr size_t kMaxTraceEvents = 1000000;

/// Starts collecting trace events for `path` (which must end in .json: otherwise throws
/// minfer::Error naming it) and turns op timing on. Empty: off.
void set_trace_out(const std::string& path);
/// True while trace events are collected.
bool trace_out_enabled();
/// Milliseconds of the process's trace clock (steady_clock since the first call).
double trace_clock_ms();
/// A node event: `node` the node's name, `op` its class, start and duration in trace-clock ms,
/// `cuda` its track. Thread-safe; ignored when trace events are off.
void record_trace_node(bool prefill, std::string_view node, std::string_view op, double start_ms, double dur_ms,
                       bool cuda);
/// A forward's event (start and duration in trace-clock ms). Thread-safe; ignored when off.
void record_trace_step(bool prefill, double start_ms, double dur_ms);
/// Writes the collected events to the set_trace_out file (through a temporary and a rename).
/// Does nothing when off. Throws minfer::Error naming the file when it cannot be written.
void write_trace_out();

}  // namespace minfer::graph
