// Graph dumps: a prepared graph (after assignment, fusion and allocation) as Graphviz DOT or JSON,
// for `--graph-dump FILE` / MINFER_GRAPH_DUMP (issue: a graph you can see).
#pragma once

#include <string>
#include <vector>

#include "graph/prepared_graph.h"

namespace minfer::graph {

/// One node of a dumped graph, copied out of the prepared graph (which the engine may free
/// before the dump is written again).
struct DumpNode {
  NodeId id = kNoNode;
  std::string name, op, type, backend;
  Shape ne{1, 1, 1, 1};
  uint64_t bytes = 0;       ///< the output's size (0 where the type has no layout for the shape)
  bool output = false;      ///< read back by the engine
  int32_t buffer = -1;      ///< pool buffer of the output (-1: a weight, an alias, memory outside the pool)
  uint64_t offset = 0;      ///< byte offset in `buffer`
  std::string tensor;       ///< Weight nodes: the model tensor's name
  std::vector<NodeId> src;  ///< sources (the edges)
};

/// One prepared graph of a dump, with the label it is shown under (e.g. "ubatch of 7 tokens").
struct GraphDump {
  std::string label;
  std::vector<DumpNode> nodes;  ///< live nodes in execution order
};

/// The live nodes of `pg` (after assignment, fusion and allocation) under `label`.
GraphDump snapshot_graph(const PreparedGraph& pg, std::string label);

/// The dump format a file name asks for: "dot" for *.dot / *.gv, "json" for *.json.
/// Throws minfer::Error naming the file for any other extension.
std::string graph_dump_format(const std::string& path);

/// The graphs as one document in `format` ("dot" or "json"), every DumpNode field per node.
/// DOT: one `subgraph cluster_i` per graph, node ids prefixed "g<i>_", an edge per source,
/// outputs drawn with a double border; JSON: {"graphs": [{"label", "nodes": [{"id", "name",
/// "op", "type", "shape" (ne0 first), "bytes", "backend", "output", "buffer", "offset",
/// ["tensor",] "src"}]}]}. Throws minfer::Error for another format.
std::string render_graph_dump(const std::vector<GraphDump>& graphs, const std::string& format);

/// Writes render_graph_dump(graphs, graph_dump_format(path)) to `path` (replacing the file
/// through a temporary and a rename, so a reader never sees half a dump). Throws minfer::Error
/// naming the file when it cannot be written.
void write_graph_dump(const std::vector<GraphDump>& graphs, const std::string& path);

}  // namespace minfer::graph
