// RoPE layouts and scaling on the CPU backend (graph/rope_math.h): the normal (adjacent-pair)
// layout of the llama architecture, Llama-3.1 frequency factors, linear scaling, and YaRN
// against a reference computed here in double precision from the paper's definitions (Peng et
// al., arXiv:2309.00071: section 3.2 NTK-by-parts, 3.4 the attention temperature), written
// without the kernel's running products or precomputed ramp ends; and the GGUF keys that set
// them up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "graph/prepared_graph.h"
#include "models/model.h"
#include "synth_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

using graph::NodeId;

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct RopeRun {
  int64_t hd = 64, n_rot = 64, n_head = 2;
  float theta = 10000.0f;
  graph::RopeConfig cfg;
  std::vector<float> freq_factors;  ///< empty: none
};

/// Runs one Rope node on the CPU backend over x [hd * n_head, pos.size()].
std::vector<float> run_rope(const RopeRun& r, const std::vector<float>& x, const std::vector<int32_t>& pos) {
  cpu::CpuBackend cpu(1);
  graph::Backend* bks[2] = {&cpu, nullptr};
  graph::Graph g;
  const auto nt = static_cast<int64_t>(pos.size());
  const NodeId xi = g.input(graph::InputKind::Other, TensorType::F32, {r.hd * r.n_head, nt, 1, 1}, "x");
  const NodeId pi = g.input(graph::InputKind::Positions, TensorType::I32, {nt, 1, 1, 1}, "pos");
  graph::WeightTensor ff;
  NodeId ffn = graph::kNoNode;
  if (!r.freq_factors.empty()) {
    ff.name = "rope_freqs.weight";
    ff.ne = {static_cast<int64_t>(r.freq_factors.size()), 1, 1, 1};
    ff.data = reinterpret_cast<const uint8_t*>(r.freq_factors.data());
    ff.nbytes = r.freq_factors.size() * sizeof(float);
    ffn = g.weight(ff);
  }
  const NodeId y = g.rope(xi, pi, static_cast<int32_t>(r.hd), static_cast<int32_t>(r.n_rot), r.theta, "rope", r.cfg, ffn);
  g.mark_output(y);
  graph::PreparedGraph pg(std::move(g), bks, [](graph::BackendKind, int32_t, int32_t) { return graph::TensorRef{}; },
                          graph::PrepareOptions{});
  pg.set_input(xi, x.data(), x.size() * sizeof(float));
  pg.set_input(pi, pos.data(), pos.size() * sizeof(int32_t));
  pg.execute();
  std::vector<float> out(x.size());
  pg.read_output(y, out.data(), out.size() * sizeof(float));
  return out;
}

TEST(RopeLayout, NormalLayoutRotatesAdjacentPairsByTheUnscaledAngles) {
  RopeRun r;
  r.cfg.layout = graph::RopeLayout::Normal;
  const std::vector<int32_t> pos = {0, 1, 7, 300};
  const auto x = random_vec(static_cast<size_t>(r.hd * r.n_head * 4), 1);
  const auto got = run_rope(r, x, pos);
  // Reference in double: pair (2i, 2i+1) turned by pos * 10000^(-2i/64).
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t h = 0; h < r.n_head; ++h)
      for (int64_t i = 0; i < r.n_rot / 2; ++i) {
        const size_t a = static_cast<size_t>((static_cast<int64_t>(t) * r.n_head + h) * r.hd + 2 * i);
        const double ang = pos[t] * std::pow(10000.0, -2.0 * static_cast<double>(i) / 64.0);
        const double x0 = x[a], x1 = x[a + 1];
        // float angle (running product, <= 32 roundings) and float cos/sin: |d| <= 1e-4 at pos 300
        EXPECT_NEAR(got[a], x0 * std::cos(ang) - x1 * std::sin(ang), 1e-4) << t << " " << i;
        EXPECT_NEAR(got[a + 1], x0 * std::sin(ang) + x1 * std::cos(ang), 1e-4) << t << " " << i;
      }
  // And it is not the NEOX layout.
  RopeRun neox = r;
  neox.cfg.layout = graph::RopeLayout::Neox;
  EXPECT_NE(run_rope(neox, x, pos), got);
}

TEST(RopeScaling, LinearFactorFourAtPosition4kIsBitwiseUnscaledAtPositionK) {
  // freq_scale = 1/4 is a power of two: (4k * s^i) / 4 rounds like k * s^i, step by step.
  for (auto layout : {graph::RopeLayout::Neox, graph::RopeLayout::Normal}) {
    RopeRun plain;
    plain.cfg.layout = layout;
    RopeRun scaled = plain;
    scaled.cfg.freq_scale = 0.25f;
    const auto x = random_vec(static_cast<size_t>(plain.hd * plain.n_head * 3), 2);
    EXPECT_EQ(run_rope(scaled, x, {4, 400, 4000}), run_rope(plain, x, {1, 100, 1000}));
    EXPECT_NE(run_rope(scaled, x, {4, 400, 4000}), run_rope(plain, x, {4, 400, 4000}));
  }
}

TEST(RopeScaling, FrequencyFactorsDivideEachPairsFrequency) {
  // Factors of 2 on every pair at position 2k are bitwise no factors at position k; a factor on
  // pair 5 alone changes pair 5 (dims 10, 11 in the normal layout) and nothing else.
  RopeRun plain;
  plain.cfg.layout = graph::RopeLayout::Normal;
  RopeRun twos = plain;
  twos.freq_factors.assign(32, 2.0f);
  const auto x = random_vec(static_cast<size_t>(plain.hd * plain.n_head * 2), 3);
  EXPECT_EQ(run_rope(twos, x, {2, 2000}), run_rope(plain, x, {1, 1000}));
  RopeRun one = plain;
  one.freq_factors.assign(32, 1.0f);
  one.freq_factors[5] = 8.0f;
  const std::vector<float> x1(x.begin(), x.begin() + plain.hd * plain.n_head);
  const auto a = run_rope(one, x1, {1000}), b = run_rope(plain, x1, {1000});
  for (size_t i = 0; i < a.size(); ++i) {
    const bool pair5 = i % 64 == 10 || i % 64 == 11;
    EXPECT_EQ(a[i] != b[i], pair5) << "dim " << i % 64;
  }
}

// ---- YaRN ---------------------------------------------------------------------------------------

/// YaRN for one rotation pair, in double, from the paper's quantities: base frequency
/// theta_d = b^(-2d/|D|), wavelength lambda_d = 2 pi / theta_d, and r(d) = L / lambda_d the
/// number of turns the pair makes over the original context L. Section 3.2: pairs that turn more
/// than beta times keep theta_d, those turning fewer than alpha times get theta_d / s, a linear
/// ramp gamma between (in the reference code the ramp runs over the pair index d, from the index
/// where r = beta, rounded down, to the index where r = alpha, rounded up; those indices solve
/// L / (2 pi b^(2d/|D|)) = r for d). Section 3.4: q and k are both scaled by sqrt(1/t) =
/// 0.1 ln(s) + 1.
struct YarnReference {
  double base, s, L, alpha = 1.0, beta = 32.0;
  int64_t dims;  ///< |D| = n_rot
  double d_of_turns(double r) const {
    return static_cast<double>(dims) * std::log(L / (2.0 * M_PI * r)) / (2.0 * std::log(base));
  }
  double angle(int64_t pos, int64_t d) const {
    const double theta = std::pow(base, -2.0 * static_cast<double>(d) / static_cast<double>(dims));
    const double lo = std::max(0.0, std::floor(d_of_turns(beta)));
    const double hi = std::min(static_cast<double>(dims - 1), std::ceil(d_of_turns(alpha)));
    const double ramp = std::clamp((static_cast<double>(d) - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
    const double gamma = 1.0 - ramp;  // 1: keep the frequency (extrapolate), 0: interpolate by 1/s
    return static_cast<double>(pos) * ((1.0 - gamma) * theta / s + gamma * theta);
  }
  double mscale() const { return 0.1 * std::log(s) + 1.0; }
};

TEST(RopeScaling, YarnRampEndsForQwen25LongContextAreTheHandDerivedOnes) {
  // Qwen2.5 (base 1e6, 128 rotated dims) extended from 32768 positions: d(r) = 128 ln(32768 /
  // (2 pi r)) / (2 ln 1e6): d(32) = 23.60 -> 23, d(1) = 39.65 -> 40.
  float lo = 0, hi = 0;
  graph::rope_yarn_corr_dims(128, 32768, 1e6f, 32.0f, 1.0f, &lo, &hi);
  EXPECT_EQ(lo, 23.0f);
  EXPECT_EQ(hi, 40.0f);
}

TEST(RopeScaling, YarnMatchesTheDoublePrecisionReferenceOfThePaper) {
  for (auto layout : {graph::RopeLayout::Neox, graph::RopeLayout::Normal}) {
    for (const double s : {4.0, 8.0}) {
      RopeRun r;
      r.hd = 128;
      r.n_rot = 128;
      r.n_head = 2;
      r.theta = 1e6f;
      r.cfg.layout = layout;
      r.cfg.freq_scale = static_cast<float>(1.0 / s);
      r.cfg.ext_factor = 1.0f;
      r.cfg.mscale = 1.0f + 0.1f * std::log(static_cast<float>(s));
      graph::rope_yarn_corr_dims(r.n_rot, 32768, r.theta, 32.0f, 1.0f, &r.cfg.corr_low, &r.cfg.corr_high);
      const YarnReference ref{1e6, s, 32768.0, 1.0, 32.0, r.n_rot};
      const std::vector<int32_t> pos = {0, 1, 100, 4000, 40000, 120000};
      const auto x = random_vec(static_cast<size_t>(r.hd * r.n_head) * pos.size(), 4);
      const auto got = run_rope(r, x, pos);
      const bool neox = layout == graph::RopeLayout::Neox;
      double worst = 0.0;
      for (size_t t = 0; t < pos.size(); ++t)
        for (int64_t h = 0; h < r.n_head; ++h)
          for (int64_t d = 0; d < r.n_rot / 2; ++d) {
            const size_t row = static_cast<size_t>((static_cast<int64_t>(t) * r.n_head + h) * r.hd);
            const size_t a = row + static_cast<size_t>(neox ? d : 2 * d), b = row + static_cast<size_t>(neox ? d + 64 : 2 * d + 1);
            const double ang = ref.angle(pos[t], d), m = ref.mscale();
            const double want0 = m * (x[a] * std::cos(ang) - x[b] * std::sin(ang));
            const double want1 = m * (x[a] * std::sin(ang) + x[b] * std::cos(ang));
            // Tolerance from the float arithmetic: the angle's running product and the YaRN
            // blend round at most d + 8 times, each by 2^-24 of at most pos * theta_d; cos, sin,
            // mscale and the rotation add a few ulp of the values.
            const double theta_d = std::pow(1e6, -2.0 * static_cast<double>(d) / 128.0);
            const double angle_err = pos[t] * theta_d * static_cast<double>(d + 8) * std::ldexp(1.0, -24);
            const double bound = m * (std::abs(x[a]) + std::abs(x[b])) * (angle_err + 8 * std::ldexp(1.0, -24));
            worst = std::max({worst, std::abs(got[a] - want0) / bound, std::abs(got[b] - want1) / bound});
            ASSERT_NEAR(got[a], want0, bound) << "s " << s << " pos " << pos[t] << " pair " << d;
            ASSERT_NEAR(got[b], want1, bound) << "s " << s << " pos " << pos[t] << " pair " << d;
          }
      std::printf("[ yarn ] s %.0f %s: worst |d| / bound %.3f\n", s, neox ? "neox" : "normal", worst);
    }
  }
}

// ---- the GGUF keys --------------------------------------------------------------------------------

std::shared_ptr<Model> synth_llama(const std::function<void(gguf::GgufWriter&)>& keys, bool rope_freqs = false) {
  test::SynthSpec spec;
  spec.arch = "llama";
  spec.type = TensorType::F32;
  spec.n_embd = 128;
  spec.n_head = 2;
  spec.n_head_kv = 1;
  spec.n_ff = 128;
  spec.n_vocab = 64;
  spec.llama_rope_freqs = rope_freqs;
  spec.extra_metadata = keys;
  return Model::load(test::write_synth_model(spec, test::temp_dir()).string());
}

TEST(RopeScaling, YarnKeysSetTheRampTheTemperatureAndTheScale) {
  const auto m = synth_llama([](gguf::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 4.0f);
    w.set_u32("llama.rope.scaling.original_context_length", 32768);
  });
  const HParams& h = m->hparams();
  EXPECT_EQ(h.rope_scaling, "yarn");
  EXPECT_EQ(h.rope.layout, graph::RopeLayout::Normal);
  EXPECT_EQ(h.rope.freq_scale, 0.25f);
  EXPECT_EQ(h.rope.ext_factor, 1.0f);
  EXPECT_NEAR(h.rope.mscale, 0.1 * std::log(4.0) + 1.0, 1e-6);
  // 64 rotated dims, base 1e6 (the synth default): d(32) = 64 ln(32768/(64 pi)) / (2 ln 1e6) =
  // 11.80 -> 11, d(1) = 19.83 -> 20.
  EXPECT_EQ(h.rope.corr_low, 11.0f);
  EXPECT_EQ(h.rope.corr_high, 20.0f);
}

TEST(RopeScaling, YarnLoadsForQwen2AsForLlamaKeepingTheNeoxLayout) {
  // Qwen2.5 long-context files: qwen2.rope.scaling.* (refused before YaRN was implemented).
  test::SynthSpec spec;
  spec.type = TensorType::F32;
  spec.extra_metadata = [](gguf::GgufWriter& w) {
    w.set_string("qwen2.rope.scaling.type", "yarn");
    w.set_f32("qwen2.rope.scaling.factor", 4.0f);
    w.set_u32("qwen2.rope.scaling.original_context_length", 32768);
  };
  const auto m = Model::load(test::write_synth_model(spec, test::temp_dir()).string());
  EXPECT_EQ(m->hparams().rope.layout, graph::RopeLayout::Neox);
  EXPECT_EQ(m->hparams().rope.ext_factor, 1.0f);
  EXPECT_EQ(m->hparams().rope.freq_scale, 0.25f);
  EXPECT_EQ(m->hparams().rope.corr_low, 11.0f);  // 64 rotated dims, base 1e6: as for llama above
  EXPECT_EQ(m->hparams().rope.corr_high, 20.0f);
}

TEST(RopeScaling, LinearScalingFromEitherKey) {
  auto m = synth_llama([](gguf::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", 2.0f);
  });
  EXPECT_EQ(m->hparams().rope.freq_scale, 0.5f);
  EXPECT_EQ(m->hparams().rope.ext_factor, 0.0f);
  m = synth_llama([](gguf::GgufWriter& w) { w.set_f32("llama.rope.scale_linear", 8.0f); });
  EXPECT_EQ(m->hparams().rope_scaling, "linear");
  EXPECT_EQ(m->hparams().rope.freq_scale, 0.125f);
}

TEST(RopeScaling, UnknownTypeAndBadNumbersAreOneLineErrors) {
  const auto message = [](const std::function<void(gguf::GgufWriter&)>& keys) {
    try {
      synth_llama(keys);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string m = message([](gguf::GgufWriter& w) { w.set_string("llama.rope.scaling.type", "longrope"); });
  EXPECT_NE(m.find("llama.rope.scaling.type = 'longrope' is unsupported"), std::string::npos) << m;
  m = message([](gguf::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 0.5f);
  });
  EXPECT_NE(m.find("llama.rope.scaling.factor = 0.5"), std::string::npos) << m;
  m = message([](gguf::GgufWriter& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 4.0f);
    w.set_f32("llama.rope.scaling.yarn_beta_fast", 0.5f);
  });
  EXPECT_NE(m.find("yarn_beta_fast = 0.5 must exceed"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(LlamaArch, FixtureModelsLoadWithTheirLayoutTyingAndFrequencyFactors) {
  MINFER_REQUIRE_SHARED("fixtures/models/llama3-tiny-Q8_0.gguf");
  const auto l3 = Model::load(test::shared_path("fixtures/models/llama3-tiny-Q8_0.gguf").string());
  EXPECT_EQ(l3->hparams().arch, Arch::Llama);
  EXPECT_EQ(l3->hparams().rope.layout, graph::RopeLayout::Normal);
  EXPECT_TRUE(l3->hparams().has_rope_freqs);
  EXPECT_TRUE(l3->hparams().tied_output);
  EXPECT_FALSE(l3->hparams().has_qkv_bias);
  EXPECT_EQ(l3->hparams().n_head_kv, 1);
  MINFER_REQUIRE_SHARED("fixtures/models/mistral-tiny-Q8_0.gguf");
  const auto mi = Model::load(test::shared_path("fixtures/models/mistral-tiny-Q8_0.gguf").string());
  EXPECT_FALSE(mi->hparams().has_rope_freqs);
  EXPECT_FALSE(mi->hparams().tied_output);
  ASSERT_NE(mi->tokenizer(), nullptr);
  EXPECT_EQ(mi->tokenizer()->n_vocab(), 32000);
}

TEST(LlamaArch, ARopeFreqsTensorOfTheWrongLengthIsAnError) {
  test::SynthSpec spec;
  spec.arch = "llama";
  spec.type = TensorType::F32;
  spec.llama_rope_freqs = true;
  spec.head_dim = 64;
  spec.extra_metadata = [](gguf::GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 32); };
  try {
    Model::load(test::write_synth_model(spec, test::temp_dir()).string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor rope_freqs.weight has shape [32], expected [16]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace minfer
