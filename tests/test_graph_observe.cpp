// Seeing the graph: dumps (graph/dump.h, EngineConfig::graph_dump, --graph-dump), the prepared
// graphs of an engine written as JSON and DOT, checked structurally against each other and
// against the engine's own graphs; MINFER_TRACE's per-node statistics; op timing
// (graph/op_timing.h, --profile).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "graph/op_timing.h"
#include "models/model.h"
#include "core/env.h"
#include "synth_model.h"
#include "test_util.h"

namespace minfer {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::shared_ptr<const Model> tiny_model() {
  test::SynthSpec spec;
  spec.arch = "qwen2";
  spec.type = TensorType::Q8_0;
  return Model::load(test::write_synth_model(spec, test::temp_dir()).string());
}

/// Runs a 5-token prompt and two decode steps on an engine that dumps to `path`.
void run_with_dump(const std::shared_ptr<const Model>& model, const std::string& path) {
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = 256;
  c.graph_dump = path;
  Engine e(model, c);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  (void)e.decode(prompt);
  for (int32_t t : {6, 7}) {
    const int32_t one[1] = {t};
    (void)e.decode(one);
  }
  EXPECT_EQ(e.graphs_prepared(), 2);  // the prompt's shape and the decode step's
}

TEST(GraphDump, JsonHoldsEveryPreparedGraphWithConsistentNodesAndEdges) {
  const auto model = tiny_model();
  const auto path = test::temp_dir() / "graphs.json";
  run_with_dump(model, path.string());
  const nlohmann::json doc = nlohmann::json::parse(read_text(path));
  ASSERT_EQ(doc["graphs"].size(), 2u);
  EXPECT_NE(doc["graphs"][0]["label"].get<std::string>().find("ubatch of 5 tokens"), std::string::npos);
  EXPECT_NE(doc["graphs"][1]["label"].get<std::string>().find("ubatch of 1 token,"), std::string::npos);
  std::set<std::string> weights_in_dump;
  for (const auto& g : doc["graphs"]) {
    std::set<int> ids;
    int outputs = 0, matmuls = 0;
    for (const auto& n : g["nodes"]) {
      const int id = n["id"].get<int>();
      for (const auto& s : n["src"]) {
        EXPECT_TRUE(ids.count(s.get<int>())) << "node " << id << " reads " << s << ", not an earlier live node";
      }
      ids.insert(id);
      EXPECT_EQ(n["backend"], "cpu");
      EXPECT_EQ(n["shape"].size(), 4u);
      outputs += n["output"].get<bool>() ? 1 : 0;
      const std::string op = n["op"];
      if (op == "Weight") weights_in_dump.insert(n["tensor"].get<std::string>());
      if (op == "MatMul" || op == "MatMulAdd" || op == "FusedQKV" || op == "FusedFFN") ++matmuls;
      if (op != "Weight" && op != "KvRegion" && n["buffer"].get<int>() >= 0) {
        EXPECT_GT(n["bytes"].get<uint64_t>(), 0u) << n["name"];
      }
    }
    EXPECT_GE(outputs, 1);
    EXPECT_GE(matmuls, 2 * 2);  // at least attention and FFN projections in each of the 2 layers
  }
  // Every weight of the model the graphs use appears by its tensor name.
  for (const graph::WeightTensor& w : model->weights())
    if (w.name.find("blk.") == 0) {
      EXPECT_TRUE(weights_in_dump.count(w.name)) << w.name;
    }
}

TEST(GraphDump, DotHasTheNodesAndEdgesOfTheJsonDump) {
  const auto model = tiny_model();
  const auto json_path = test::temp_dir() / "g.json", dot_path = test::temp_dir() / "g.dot";
  run_with_dump(model, json_path.string());
  run_with_dump(model, dot_path.string());
  const nlohmann::json doc = nlohmann::json::parse(read_text(json_path));
  const std::string dot = read_text(dot_path);
  ASSERT_EQ(dot.rfind("digraph minfer {", 0), 0u);
  ASSERT_EQ(dot.substr(dot.size() - 2), "}\n");
  for (size_t gi = 0; gi < doc["graphs"].size(); ++gi) {
    std::set<int> nodes;
    std::set<std::pair<int, int>> edges;
    const std::regex node_re("^    g" + std::to_string(gi) + "_([0-9]+) \\[label=\"#([0-9]+) ");
    const std::regex edge_re("^    g" + std::to_string(gi) + "_([0-9]+) -> g" + std::to_string(gi) + "_([0-9]+);$");
    std::istringstream lines(dot);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (std::regex_search(line, m, node_re)) {
        EXPECT_EQ(m[1], m[2]);
        nodes.insert(std::stoi(m[1]));
      } else if (std::regex_match(line, m, edge_re)) {
        edges.insert({std::stoi(m[1]), std::stoi(m[2])});
      }
    }
    std::set<int> want_nodes;
    std::set<std::pair<int, int>> want_edges;
    for (const auto& n : doc["graphs"][gi]["nodes"]) {
      want_nodes.insert(n["id"].get<int>());
      for (const auto& s : n["src"]) want_edges.insert({s.get<int>(), n["id"].get<int>()});
    }
    EXPECT_EQ(nodes, want_nodes) << "graph " << gi;
    EXPECT_EQ(edges, want_edges) << "graph " << gi;
  }
}

TEST(GraphDump, HoldsAtMostEightShapesAndRefusesOtherExtensions) {
  const auto model = tiny_model();
  const auto path = test::temp_dir() / "many.json";
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = 256;
  c.graph_dump = path.string();
  Engine e(model, c);
  for (int32_t n = 1; n <= 10; ++n) {  // prompts of 1 .. 10 tokens: ten ubatch shapes
    e.reset();
    (void)e.decode(std::vector<int32_t>(static_cast<size_t>(n), 3));
  }
  const nlohmann::json doc = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(doc["graphs"].size(), Engine::kMaxDumpGraphs);
  c.graph_dump = (test::temp_dir() / "graphs.txt").string();
  try {
    Engine bad(model, c);
    FAIL() << "a .txt dump was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("graphs.txt"), std::string::npos) << err.what();
  }
  EXPECT_THROW((void)graph::render_graph_dump({}, "svg"), Error);
}

// MINFER_TRACE=1 names the first node whose output is not finite: a NaN planted in layer 1's
// FFN down projection shows up first in that layer's FFN node, with every earlier node finite.
TEST(GraphTrace, NamesTheFirstNodeWithANonFiniteOutput) {
  test::SynthSpec spec;
  spec.arch = "qwen2";
  spec.type = TensorType::F32;
  spec.edit_values = [](const std::string& name, std::vector<float>& v) {
    if (name == "blk.1.ffn_down.weight") v[7] = std::numeric_limits<float>::quiet_NaN();
  };
  const auto model = Model::load(test::write_synth_model(spec, test::temp_dir()).string());
  env_override("MINFER_TRACE", "1");
  std::string out;
  try {
    EngineConfig c;
    c.n_threads = 1;
    c.n_ctx = 256;
    Engine e(model, c);
    testing::internal::CaptureStderr();
    const std::vector<int32_t> prompt = {1, 2};
    EXPECT_THROW((void)e.decode(prompt), NonFiniteLogitsError);
    out = testing::internal::GetCapturedStderr();
  } catch (...) {
    env_override("MINFER_TRACE", std::nullopt);
    throw;
  }
  env_override("MINFER_TRACE", std::nullopt);
  struct {
    std::string out;
  } r{out};
  const std::string first = "trace: the first node of this forward with a non-finite output is #";
  const size_t at = r.out.find(first);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find("blk.1.ffn"), std::string::npos) << line;
  // Every node traced before it (its own statistics line comes first) was finite, and layer
  // 0's FFN was traced among them.
  const std::string node = line.substr(first.size(), line.find(':', first.size()) - first.size());  // "86 blk.1..."
  const std::string before = r.out.substr(0, at);
  EXPECT_NE(before.find("blk.0.ffn"), std::string::npos) << before;
  std::istringstream lines(before);
  int traced = 0;
  for (std::string l; std::getline(lines, l);) {
    if (l.find("trace: #") == std::string::npos || l.find("not inspected") != std::string::npos) continue;
    ++traced;
    if (l.find("trace: #" + node) != std::string::npos) {
      EXPECT_EQ(l.find(", 0 NaN, 0 Inf"), std::string::npos) << l;
    } else {
      EXPECT_NE(l.find(", 0 NaN, 0 Inf"), std::string::npos) << l;
    }
  }
  EXPECT_GT(traced, 10);
}

// Op timing: one row per op class and phase, counts that follow the graph (one FFN node per layer
// per forward), and node times that add up to most of the measured forward time. The bound: on
// the CPU the nodes run back to back inside PreparedGraph::execute, so what lies outside them is
// the loop, the clock reads and the logits readback; at least half the step is inside the nodes
// even for this 2-layer model of microsecond nodes, and never more than the step.
TEST(OpTiming, CountsFollowTheGraphAndNodeTimesAddUpToTheStep) {
  test::SynthSpec spec;
  spec.arch = "qwen2";
  spec.type = TensorType::Q8_0;
  const auto model = Model::load(test::write_synth_model(spec, test::temp_dir()).string());
  graph::reset_op_timing();
  graph::set_op_timing(true);
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = 256;
  Engine e(model, c);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  (void)e.decode(prompt);
  constexpr int kDecode = 12;
  for (int i = 0; i < kDecode; ++i) {
    const int32_t one[1] = {9 + i};
    (void)e.decode(one);
  }
  graph::set_op_timing(false);
  uint64_t prefill_steps = 0, decode_steps = 0;
  const double prefill_ms = graph::op_timing_step_ms(true, &prefill_steps);
  const double decode_ms = graph::op_timing_step_ms(false, &decode_steps);
  EXPECT_EQ(prefill_steps, 1u);
  EXPECT_EQ(decode_steps, static_cast<uint64_t>(kDecode));
  double prefill_nodes = 0.0, decode_nodes = 0.0;
  bool ffn_seen = false;
  for (const graph::OpTimeRow& r : graph::op_time_rows()) {
    (r.prefill ? prefill_nodes : decode_nodes) += r.ms;
    EXPECT_GE(r.ms, 0.0) << r.op;
    if (r.op == "FusedFFN+norm q8_0" || r.op == "FusedFFN q8_0") {
      ffn_seen = true;
      EXPECT_EQ(r.count, static_cast<uint64_t>(spec.n_layer) * (r.prefill ? 1 : kDecode)) << r.op;
    }
  }
  EXPECT_TRUE(ffn_seen) << graph::op_timing_table();
  EXPECT_LE(prefill_nodes, prefill_ms);
  EXPECT_LE(decode_nodes, decode_ms);
  EXPECT_GE(prefill_nodes, 0.5 * prefill_ms) << graph::op_timing_table();
  EXPECT_GE(decode_nodes, 0.5 * decode_ms) << graph::op_timing_table();
  const std::string table = graph::op_timing_table();
  EXPECT_NE(table.find("op timing, prefill: 1 forwards"), std::string::npos) << table;
  EXPECT_NE(table.find("op timing, decode: 12 forwards"), std::string::npos) << table;
  EXPECT_NE(table.find("(outside the nodes)"), std::string::npos) << table;
  graph::reset_op_timing();
  EXPECT_TRUE(graph::op_timing_table().empty());
}

// --trace-out: a trace-event JSON with one complete event per executed (timed) node and one per
// forward, each node inside its forward's span, on named tracks.
TEST(OpTiming, TraceFileHasAnEventPerNodeInsideItsForward) {
  test::SynthSpec spec;
  spec.arch = "qwen3";
  spec.type = TensorType::Q4_K;
  const auto model = Model::load(test::write_synth_model(spec, test::temp_dir()).string());
  const auto path = test::temp_dir() / "trace.json";
  graph::reset_op_timing();
  graph::set_trace_out(path.string());
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = 256;
  Engine e(model, c);
  (void)e.decode(std::vector<int32_t>{1, 2, 3});
  for (int32_t t : {4, 5}) {
    const int32_t one[1] = {t};
    (void)e.decode(one);
  }
  graph::write_trace_out();
  uint64_t rows_count = 0;
  for (const graph::OpTimeRow& r : graph::op_time_rows()) rows_count += r.count;
  graph::set_trace_out("");
  graph::set_op_timing(false);
  graph::reset_op_timing();
  const nlohmann::json doc = nlohmann::json::parse(read_text(path));
  std::vector<std::pair<double, double>> forwards;
  std::vector<nlohmann::json> nodes;
  std::set<std::string> track_names;
  for (const auto& ev : doc["traceEvents"]) {
    if (ev["ph"] == "M") {
      track_names.insert(ev["args"]["name"].get<std::string>());
      continue;
    }
    ASSERT_EQ(ev["ph"], "X") << ev.dump();
    ASSERT_GE(ev["dur"].get<double>(), 0.0) << ev.dump();
    if (ev["tid"] == 0) {
      forwards.push_back({ev["ts"].get<double>(), ev["ts"].get<double>() + ev["dur"].get<double>()});
    } else {
      EXPECT_EQ(ev["tid"], 1) << ev.dump();  // CPU nodes
      nodes.push_back(ev);
    }
  }
  EXPECT_TRUE(track_names.count("forwards") && track_names.count("CPU nodes"));
  ASSERT_EQ(forwards.size(), 3u);
  EXPECT_EQ(nodes.size(), rows_count);  // one event per timed node
  for (const auto& n : nodes) {
    const double ts = n["ts"].get<double>(), end = ts + n["dur"].get<double>();
    const bool inside = std::any_of(forwards.begin(), forwards.end(),
                                    [&](const auto& f) { return ts >= f.first && end <= f.second; });
    EXPECT_TRUE(inside) << n.dump();
  }
  EXPECT_THROW(graph::set_trace_out((test::temp_dir() / "trace.txt").string()), Error);
}

}  // namespace
}  // namespace minfer
