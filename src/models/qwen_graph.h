// The Qwen2 / Qwen3 / Llama decoder as a compute graph. One builder serves all three: the
// architecture differences (q/k/v biases, q/k RMS norm, tied output, the RoPE layout, scaling
// and frequency factors) are data in HParams.
#pragma once

#include "graph/graph.h"
#include "models/model.h"

namespace minfer {

/// Node ids of the inputs and the output of a built model graph.
struct ModelGraphIO {
  graph::NodeId tokens = graph::kNoNode;     ///< i32 [n_tokens]
  graph::NodeId positions = graph::kNoNode;  ///< i32 [n_tokens]
  graph::NodeId seq_ids = graph::kNoNode;    ///< i32 [n_tokens]
  graph::NodeId kv_cells = graph::kNoNode;   ///< i32 [n_tokens]
  graph::NodeId kv_pos = graph::kNoNode;     ///< i32 [n_kv]
  graph::NodeId kv_seq = graph::kNoNode;     ///< i32 [n_kv]
  graph::NodeId kv_bounds = graph::kNoNode;  ///< i32 [2 * n_tokens] (only when params.seq_window > 0)
  graph::NodeId out_ids = graph::kNoNode;    ///< i32 [n_outputs], kNoNode when all rows output
  graph::NodeId logits = graph::kNoNode;     ///< f32 [n_vocab, n_outputs]
};

/// Builds the forward graph for `params` (n_tokens, n_outputs, KV window and format) over KV
/// regions of `n_ctx` cells. Topology depends on `params` and the model only.
graph::Graph build_model_graph(const Model& model, const graph::GraphParams& params, int64_t n_ctx,
                               ModelGraphIO* io);

}  // namespace minfer
