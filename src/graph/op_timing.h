// Op timing (`--profile` on run and bench, MINFER_OP_TIMING=1): where a forward's time goes, per
// op and weight type, separately for prefill (ubatches of more than one token) and decode.
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
/// Forgets every row and step (tests).
void reset_op_timing();

}  // namespace minfer::graph
