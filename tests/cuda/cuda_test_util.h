// Helpers of the device tests: skipping without a device, running one small graph on the CPU or
// the CUDA backend (through PreparedGraph, as the engine does), comparing results with a named
// tolerance and saying what differs (first mismatching index, the values, the largest |d|).
#pragma once

#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "graph/prepared_graph.h"

/// Skips the test (GTEST_SKIP) when no CUDA device can be used, saying why.
#define MINFER_REQUIRE_CUDA()                                                 \
  do {                                                                        \
    std::string minfer_why_;                                                  \
    if (!::minfer::cuda::CudaContext::available(&minfer_why_))                \
      GTEST_SKIP() << "no usable CUDA device: " << minfer_why_;               \
  } while (0)

namespace minfer::test {

/// Sets an environment variable for the life of the object and re-reads the env table (the
/// previous value is restored on destruction).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
    env_reload();
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
    env_reload();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float sigma = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

/// One small graph and the data to run it: input bytes per Input node, the weights it reads
/// (registered on the CUDA backend), the initial bytes of each KV region, the outputs to read.
struct TestGraph {
  graph::Graph g;
  std::vector<std::pair<graph::NodeId, std::vector<uint8_t>>> inputs;
  std::vector<const graph::WeightTensor*> weights;
  struct Region {
    int32_t layer = 0, which = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<Region> regions;
  std::vector<graph::NodeId> outputs;
};

struct RunResult {
  std::vector<std::vector<uint8_t>> outputs;  ///< per output node, per run: runs x outputs
  std::vector<std::vector<uint8_t>> regions;  ///< region bytes after the last run
};

/// Prepares make() on `device` (BackendKind::Cpu runs on `cpu` alone), sets the inputs, executes
/// `runs` times (the inputs are set before every run) and reads every output after every run:
/// result.outputs[run * n_outputs + k]. `fuse` runs the FusionPass.
inline RunResult run_graph(const std::function<TestGraph()>& make, graph::BackendKind device,
                           cpu::CpuBackend& cpu, cuda::CudaBackend* cuda_b, int runs = 1, bool fuse = false) {
  TestGraph tg = make();
  graph::Backend* target = device == graph::BackendKind::Cpu ? static_cast<graph::Backend*>(&cpu) : cuda_b;
  for (const graph::WeightTensor* w : tg.weights) target->register_weight(*w);
  // KV regions: persistent buffers of the target backend, filled with the given bytes.
  std::vector<graph::TensorRef> refs;
  for (const auto& r : tg.regions) {
    graph::TensorRef ref;
    ref.buffer = target->alloc_buffer(r.bytes.size());
    ref.data = target->buffer_ptr(ref.buffer);
    ref.nbytes = r.bytes.size();
    target->upload(ref.data, r.bytes.data(), r.bytes.size());
    refs.push_back(ref);
  }
  const auto regions = tg.regions;
  graph::KvResolver kv = [&](graph::BackendKind, int32_t layer, int32_t which) -> graph::TensorRef {
    for (size_t i = 0; i < regions.size(); ++i)
      if (regions[i].layer == layer && regions[i].which == which) return refs[i];
    return {};
  };
  graph::Backend* bks[2] = {&cpu, cuda_b};
  graph::PrepareOptions opt;
  opt.preferred = device;
  opt.fuse = fuse;
  const auto inputs = tg.inputs;
  const auto outputs = tg.outputs;
  RunResult res;
  {
    graph::PreparedGraph pg(std::move(tg.g), bks, kv, opt);
    for (int r = 0; r < runs; ++r) {
      for (const auto& [id, bytes] : inputs) pg.set_input(id, bytes.data(), bytes.size());
      pg.execute();
      for (graph::NodeId id : outputs) {
        std::vector<uint8_t> out(pg.graph().node(id).nbytes());
        pg.read_output(id, out.data(), out.size());
        res.outputs.push_back(std::move(out));
      }
    }
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    std::vector<uint8_t> b(refs[i].nbytes);
    target->download(b.data(), refs[i].data, b.size());
    res.regions.push_back(std::move(b));
    target->release_buffer(refs[i].buffer);
  }
  return res;
}

/// Runs make() on a fresh CPU backend and on a fresh CUDA backend.
struct Pair {
  RunResult cpu, cuda;
};
inline Pair run_both(const std::function<TestGraph()>& make, bool fuse = false) {
  Pair p;
  {
    cpu::CpuBackend cpu(2);
    p.cpu = run_graph(make, graph::BackendKind::Cpu, cpu, nullptr, 1, fuse);
  }
  cpu::CpuBackend cpu(1);
  cuda::CudaBackend dev;
  p.cuda = run_graph(make, graph::BackendKind::Cuda, cpu, &dev, 1, fuse);
  return p;
}

/// Bitwise equality of two byte buffers; the failure names the first differing byte (and the
/// float there when the buffers are f32).
inline ::testing::AssertionResult bytes_equal(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                              bool as_f32 = true) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  size_t diffs = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      if (first == got.size()) first = i;
      ++diffs;
    }
  if (diffs == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << diffs << " of " << got.size() << " bytes differ, first at byte " << first;
  if (as_f32 && got.size() % 4 == 0) {
    const size_t e = first / 4;
    float a, b;
    std::memcpy(&a, got.data() + e * 4, 4);
    std::memcpy(&b, want.data() + e * 4, 4);
    os << " (float element " << e << ": got " << a << ", want " << b << ")";
  } else {
    os << " (got 0x" << std::hex << int(got[first]) << ", want 0x" << int(want[first]) << ")";
  }
  return ::testing::AssertionFailure() << os.str();
}

/// |got - want| <= abs_tol + rel_tol * |want| for every element; the failure names the first
/// offending index with both values and the largest |d| with its index.
inline ::testing::AssertionResult floats_close(const std::vector<float>& got, const std::vector<float>& want,
                                               double abs_tol, double rel_tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  size_t bad = 0, first = got.size(), worst = 0;
  double max_d = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    const bool nan_mismatch = std::isnan(got[i]) != std::isnan(want[i]);
    if (d > max_d || std::isnan(d)) {
      max_d = std::isnan(d) ? INFINITY : d;
      worst = i;
    }
    if (nan_mismatch || d > abs_tol + rel_tol * std::abs(static_cast<double>(want[i]))) {
      if (first == got.size()) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess() << "max |d| " << max_d;
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements outside |d| <= " << abs_tol << " + " << rel_tol
         << " |want|; first at " << first << ": got " << got[first] << ", want " << want[first]
         << "; max |d| " << max_d << " at " << worst << " (got " << got[worst] << ", want " << want[worst] << ")";
}

/// Distance in units in the last place between two finite floats of the same sign class.
inline int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = static_cast<int32_t>(0x80000000u - static_cast<uint32_t>(ia));
  if (ib < 0) ib = static_cast<int32_t>(0x80000000u - static_cast<uint32_t>(ib));
  return std::abs(static_cast<int64_t>(ia) - ib);
}

/// Every element within `max_ulp` ulp; the failure names the first offender and the largest.
inline ::testing::AssertionResult floats_within_ulp(const std::vector<float>& got, const std::vector<float>& want,
                                                    int64_t max_ulp) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  size_t bad = 0, first = got.size(), worst = 0, exact = 0;
  int64_t worst_u = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t u = ulp_distance(got[i], want[i]);
    if (u == 0) ++exact;
    if (u > worst_u) worst_u = u, worst = i;
    if (u > max_ulp) {
      if (first == got.size()) first = i;
      ++bad;
    }
  }
  if (bad == 0)
    return ::testing::AssertionSuccess() << exact << " of " << got.size() << " bit-exact, max " << worst_u << " ulp";
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements beyond " << max_ulp
                                       << " ulp; first at " << first << ": got " << got[first] << ", want "
                                       << want[first] << "; worst " << worst_u << " ulp at " << worst
                                       << " (" << exact << " bit-exact)";
}

}  // namespace minfer::test

#endif  // MINFER_HAS_CUDA
