// The CPU backend packs matrix weights into its own copy at registration and, for a model mapped
// from its file, drops the original pages as it goes (madvise MADV_DONTNEED: clean file pages come
// back from the file on the next read). Weights in heap memory (GgufFile::open_memory) must never
// be dropped: there MADV_DONTNEED zeroes the pages, and the next reader (a second engine, GetRows
// on a tied embedding, the CUDA backend's upload) saw zero weights. These tests fail on that bug.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/env.h"
#include "cpu/simd/kernels.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "models/model.h"
#include "synth_model.h"
#include "test_util.h"

namespace minfer {
namespace {

const std::vector<int32_t> kPrompt = {11, 200, 37, 5, 480, 99, 123, 7, 310, 42};

EngineConfig config() {
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = 64;
  return c;
}

std::map<std::string, std::vector<uint8_t>> weight_bytes(const Model& m) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& w : m.weights()) out[w.name].assign(w.data, w.data + w.nbytes);
  return out;
}

// Weights of at least a few pages each (ffn_up: 512 rows of 1024 Q4_0 weights, 294,912 bytes, many
// whole 4 KiB or 64 KiB pages), so packing them would drop whole pages if it were allowed to. Q4_0:
// it has a packed form at the avx2 and avx512 levels (Q8_0 only at avx512).
constexpr TensorType kType = TensorType::Q4_0;
test::SynthSpec spec() {
  test::SynthSpec s;
  s.type = kType;
  s.n_embd = 1024;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 128;
  s.n_ff = 512;
  return s;
}

// Without a packed form (the scalar level, a CPU without avx2, MINFER_NO_CPU_PACK=1) nothing is
// packed and no page is released: the tests would pass vacuously, so they skip instead.
#define SKIP_WITHOUT_PACKING()                                                                      \
  do {                                                                                              \
    if (env_flag("MINFER_NO_CPU_PACK") || cpu::simd::cpu_kernels().get(kType).pack == nullptr)       \
      GTEST_SKIP() << "no packed form of " << type_name(kType) << " at this SIMD level: nothing to release"; \
  } while (0)

/// Resident bytes (kB, /proc/self/smaps "Rss:") of the mapping that holds `p`; -1 if not found.
int64_t resident_kb(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stoll(line.substr(4));
    }
  }
  return -1;
}

TEST(CpuWeightPages, HeapWeightsAreLeftIntactByPackingAndTwoEnginesAgree) {
  SKIP_WITHOUT_PACKING();
  const auto path = test::write_synth_model(spec(), test::temp_dir());
  const std::vector<uint8_t> bytes = test::read_bytes(path);
  const auto model = Model::from_file(gguf::GgufFile::open_memory(bytes, "in-memory.gguf"));
  for (const auto& w : model->weights()) ASSERT_FALSE(w.file_mapped) << w.name;
  const auto before = weight_bytes(*model);

  Engine first(model, config());
  const auto a = first.decode(kPrompt);
  const auto after = weight_bytes(*model);
  for (const auto& [name, b] : before) EXPECT_TRUE(after.at(name) == b) << name << " changed by packing";

  Engine second(model, config());
  const auto b = second.decode(kPrompt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "a second engine on the same model differs";
}

TEST(CpuWeightPages, FileMappedWeightsReadBackTheFileAfterTheirPagesAreDropped) {
  SKIP_WITHOUT_PACKING();
  const auto path = test::write_synth_model(spec(), test::temp_dir());
  const auto in_memory = Model::from_file(gguf::GgufFile::open_memory(test::read_bytes(path), "copy.gguf"));
  const auto model = Model::load(path.string());
  for (const auto& w : model->weights()) ASSERT_TRUE(w.file_mapped) << w.name;

  // The memory saving still happens for a mapped file: with every page read in, building an
  // engine (which packs the matrices) leaves less than half of the mapping resident.
  (void)weight_bytes(*model);
  const int64_t before = resident_kb(model->weights()[0].data);
  Engine first(model, config());
  const int64_t after = resident_kb(model->weights()[0].data);
  ASSERT_GT(before, 0) << "the model's mapping is not in /proc/self/smaps";
  EXPECT_LT(after, before / 2) << "resident kB of the mapping before and after packing: " << before << ", " << after;
  const auto a = first.decode(kPrompt);
  // Every weight still reads as the file holds it (dropped pages come back from the file).
  const auto want = weight_bytes(*in_memory);
  for (const auto& [name, b] : weight_bytes(*model)) EXPECT_TRUE(want.at(name) == b) << name;

  Engine second(model, config());
  Engine from_heap(in_memory, config());
  const auto b = second.decode(kPrompt);
  const auto c = from_heap.decode(kPrompt);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "a second engine on the mapped model";
  EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float))) << "the same file parsed from memory";
}

}  // namespace
}  // namespace minfer
