#include "graph/dump.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"

namespace minfer::graph {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// A DOT double-quoted string's contents: quotes and backslashes escaped, control bytes dropped.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

std::string shape_text(const Shape& ne) {
  std::string s = fmt::format("{}", ne[0]);
  int last = 3;
  while (last > 1 && ne[static_cast<size_t>(last)] == 1) --last;
  for (int i = 1; i <= last; ++i) s += fmt::format(" x {}", ne[static_cast<size_t>(i)]);
  return s;
}

/// Bytes of a node's output, 0 where the type has no block layout for the shape (a dump must
/// not throw on a node the backends run).
uint64_t node_bytes(const Node& n) {
  try {
    return n.nbytes();
  } catch (const Error&) {
    return 0;
  }
}

/// DOT fill colours per op family (Graphviz X11 colour names; op names as op_name gives them).
const char* op_colour(const std::string& op) {
  if (op == "Input") return "lightgrey";
  if (op == "Weight") return "khaki";
  if (op == "KvRegion") return "lightsalmon";
  if (op == "MatMul" || op == "MatMulAdd" || op == "FusedQKV" || op == "FusedFFN") return "lightblue";
  if (op == "Attn" || op == "QkvBiasRopeStore" || op == "KvcacheStore") return "palegreen";
  return "white";
}

std::string render_json(const std::vector<GraphDump>& graphs) {
  nlohmann::json doc;
  doc["graphs"] = nlohmann::json::array();
  for (const GraphDump& g : graphs) {
    nlohmann::json gj;
    gj["label"] = g.label;
    gj["nodes"] = nlohmann::json::array();
    for (const DumpNode& n : g.nodes) {
      nlohmann::json j;
      j["id"] = n.id;
      j["name"] = n.name;
      j["op"] = n.op;
      j["type"] = n.type;
      j["shape"] = {n.ne[0], n.ne[1], n.ne[2], n.ne[3]};
      j["bytes"] = n.bytes;
      j["backend"] = n.backend;
      j["output"] = n.output;
      j["buffer"] = n.buffer;
      j["offset"] = n.offset;
      if (!n.tensor.empty()) j["tensor"] = n.tensor;
      j["src"] = n.src;
      gj["nodes"].push_back(std::move(j));
    }
    doc["graphs"].push_back(std::move(gj));
  }
  // Invalid UTF-8 in names is replaced: a model file's tensor names are untrusted bytes.
  return doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string render_dot(const std::vector<GraphDump>& graphs) {
  std::string out = "digraph minfer {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"monospace\"];\n";
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    const GraphDump& g = graphs[gi];
    out += fmt::format("  subgraph cluster_{} {{\n    label=\"{}\";\n", gi, dot_escape(g.label));
    for (const DumpNode& n : g.nodes) {
      std::string label = fmt::format("#{} {}\\n{} {} [{}]\\n{} B on {}", n.id, dot_escape(n.name), dot_escape(n.op),
                                      n.type, shape_text(n.ne), n.bytes, n.backend);
      if (n.buffer >= 0) label += fmt::format(", buffer {} + {}", n.buffer, n.offset);
      if (!n.tensor.empty()) label += "\\n" + dot_escape(n.tensor);
      out += fmt::format("    g{}_{} [label=\"{}\", fillcolor={}{}];\n", gi, n.id, label, op_colour(n.op),
                         n.output ? ", peripheries=2" : "");
    }
    for (const DumpNode& n : g.nodes)
      for (const NodeId s : n.src) out += fmt::format("    g{}_{} -> g{}_{};\n", gi, s, gi, n.id);
    out += "  }\n";
  }
  return out + "}\n";
}

}  // namespace

std::string graph_dump_format(const std::string& path) {
  if (ends_with(path, ".dot") || ends_with(path, ".gv")) return "dot";
  if (ends_with(path, ".json")) return "json";
  fail("graph dump {}: the file name must end in .dot (Graphviz) or .json", path);
}

GraphDump snapshot_graph(const PreparedGraph& pg, std::string label) {
  GraphDump d;
  d.label = std::move(label);
  const Graph& g = pg.graph();
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (n.dead) continue;
    const TensorRef& ref = pg.plan().home(g, id);
    DumpNode r;
    r.id = id;
    r.name = n.name;
    r.op = std::string(op_name(n.op));
    r.type = std::string(type_name(n.type));
    r.backend = std::string(backend_name(n.backend));
    r.ne = n.ne;
    r.bytes = node_bytes(n);
    r.output = n.is_output;
    r.buffer = ref.buffer;
    r.offset = ref.buffer >= 0 ? ref.offset : 0;
    if (n.op == Op::Weight && n.weight != nullptr) r.tensor = n.weight->name;
    for (int i = 0; i < n.n_src; ++i) r.src.push_back(n.src[static_cast<size_t>(i)]);
    d.nodes.push_back(std::move(r));
  }
  return d;
}

std::string render_graph_dump(const std::vector<GraphDump>& graphs, const std::string& format) {
  if (format == "dot") return render_dot(graphs);
  if (format == "json") return render_json(graphs);
  fail("graph dump: unknown format '{}' (dot or json)", format);
}

void write_graph_dump(const std::vector<GraphDump>& graphs, const std::string& path) {
  const std::string text = render_graph_dump(graphs, graph_dump_format(path));
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace minfer::graph
