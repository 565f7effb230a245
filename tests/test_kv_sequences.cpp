// KV sequence operations on the CPU (KvCache / Engine: seq_rm, seq_cp, seq_keep, seq_add) against
// fresh prefills, and the Session's context shift built on them.
//
// seq_add's tolerance. Rotations compose exactly only in real arithmetic: a K row shifted from
// position p by d holds R(d) fl(R(p) k) where a fresh prefill holds R(p + d) k, each R computed as
// the kernels do (angles as a running float product, ggml's order) and each row rounded to the KV
// type when stored. Per rotated pair (k_i, k_{i+half}) of norm r, with u = 2^-24:
//   angle error of position x at pair i: theta_i(x) = x * s^i is a product of i + 1 rounded
//     factors plus s's own rounding, so |d theta| <= (2i + 3) u |x| s^i; cos/sin add u each;
//   each rotation's products and sum: <= 4u r (two roundings per component, sqrt(2) for both);
//   so |delta| <= r (dtheta(p) + dtheta(d) + dtheta(p + d) + 3 * (4u + 2u)) from the rotations;
//   each KV store rounds once: f16 by at most 2^-11 r (relative, plus 2^-24 below the normal
//   range), q8_0 by d/2 + 127 d 2^-11 with d = amax/127 of the block (amax bounded by the head's
//   largest |value| times sqrt(2), as rotation moves magnitude between the halves). The shifted
//   row is stored twice (before and after the shift), the fresh one once: 3 store roundings.
// Only layer 0's K can be compared this way: deeper layers' pre-RoPE keys differ by the rounding
// of the attention that produced them. Layer 0's V rows do not depend on position: bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "models/model.h"
#include "quant/quant.h"
#include "sampling/sampler.h"
#include "synth_model.h"
#include "test_util.h"
#include "tokenized_model.h"
#include "kv_shift_bound.h"

namespace minfer {
namespace {

std::shared_ptr<Model> tiny(const test::SynthSpec& spec = {}) {
  return Model::load(test::write_synth_model(spec, test::temp_dir()).string());
}

EngineConfig cpu_config(TensorType kv = TensorType::F32, int64_t n_ctx = 256) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = n_ctx;
  c.kv_type = kv;
  return c;
}

const std::vector<int32_t> kPrompt = {11, 200, 37, 5, 480, 99, 123, 7, 310, 42, 1, 77, 256, 8, 9, 300, 17};

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(KvSequences, SeqCpSharesCellsAndBothSequencesContinueLikeAFreshPrefill) {
  auto model = tiny();
  Engine e(model, cpu_config());
  e.decode(kPrompt);
  e.seq_cp(0, 1, 0, -1);
  EXPECT_EQ(e.kv().n_used(), static_cast<int64_t>(kPrompt.size()));  // shared, not copied
  EXPECT_EQ(e.n_past(1), static_cast<int32_t>(kPrompt.size()));
  // One batch with a token of each sequence: they share every earlier cell.
  Batch b;
  const auto n = static_cast<int32_t>(kPrompt.size());
  b.tokens = {42, 99};
  b.positions = {n, n};
  b.seq_ids = {0, 1};
  b.logits = {1, 1};
  const std::vector<float> both = e.forward(b);
  EXPECT_EQ(e.kv().n_used(), static_cast<int64_t>(kPrompt.size()) + 2);
  const size_t nv = static_cast<size_t>(e.n_vocab());
  for (int i = 0; i < 2; ++i) {
    Engine fresh(model, cpu_config());
    std::vector<int32_t> p = kPrompt;
    p.push_back(b.tokens[static_cast<size_t>(i)]);
    const std::vector<float> want = fresh.decode(p);
    const std::vector<float> got(both.begin() + static_cast<std::ptrdiff_t>(i * nv),
                                 both.begin() + static_cast<std::ptrdiff_t>((i + 1) * nv));
    EXPECT_TRUE(same(got, want)) << "sequence " << i;
  }
  // Removing sequence 0 keeps the cells sequence 1 still sees.
  e.seq_rm(0, 0, -1);
  EXPECT_EQ(e.kv().n_used(), static_cast<int64_t>(kPrompt.size()) + 1);
  EXPECT_EQ(e.n_past(0), 0);
  EXPECT_EQ(e.n_past(1), n + 1);
}

TEST(KvSequences, SeqRmOfATailThenPrefillEqualsAFreshPrefill) {
  auto model = tiny();
  Engine e(model, cpu_config());
  std::vector<int32_t> other = kPrompt;
  other[9] = 500;
  other[12] = 3;
  e.decode(other);
  e.seq_rm(0, 9, -1);
  EXPECT_EQ(e.n_past(0), 9);
  const std::vector<float> got = e.decode(std::span<const int32_t>(kPrompt).subspan(9));
  Engine fresh(model, cpu_config());
  EXPECT_TRUE(same(got, fresh.decode(kPrompt)));
}

TEST(KvSequences, SeqKeepDropsOtherSequences) {
  auto model = tiny();
  Engine e(model, cpu_config());
  e.forward(Batch::sequence(std::vector<int32_t>{1, 2, 3, 4}, 0, 0, false));
  e.forward(Batch::sequence(kPrompt, 0, 2, false));
  e.seq_keep(2);
  EXPECT_EQ(e.kv().n_used(), static_cast<int64_t>(kPrompt.size()));
  EXPECT_EQ(e.n_past(0), 0);
  const std::vector<int32_t> one = {42};
  const auto got = e.forward(Batch::sequence(one, static_cast<int32_t>(kPrompt.size()), 2, false));
  Engine fresh(model, cpu_config());
  fresh.decode(kPrompt);
  EXPECT_TRUE(same(got, fresh.decode(one)));
  EXPECT_THROW(e.seq_keep(64), Error);
}

class SeqAdd : public ::testing::TestWithParam<TensorType> {};

TEST_P(SeqAdd, ShiftedKeysMatchAFreshPrefillAtTheNewPositionsWithinTheRoundingBound) {
  const TensorType type = GetParam();
  auto model = tiny();
  const HParams& h = model->hparams();
  for (const auto& [start, delta] : {std::pair{0, 37}, std::pair{300, -250}, std::pair{40, -40}}) {
    Engine shifted(model, cpu_config(type, 512));
    Engine fresh(model, cpu_config(type, 512));
    shifted.forward(Batch::sequence(kPrompt, start, 0, false));
    shifted.seq_add(0, 0, -1, delta);
    fresh.forward(Batch::sequence(kPrompt, start + delta, 0, false));
    const auto cells = shifted.kv().seq_cells(0);
    ASSERT_EQ(cells, fresh.kv().seq_cells(0));
    for (size_t c = 0; c < cells.size(); ++c)
      ASSERT_EQ(shifted.kv().cells()[static_cast<size_t>(cells[c])].pos, start + delta + static_cast<int32_t>(c));
    const int64_t kv_dim = h.kv_dim();
    const test::ShiftBound sb{type, h.head_dim, h.n_rot, h.rope_theta};
    std::vector<uint8_t> rs(row_bytes(type, kv_dim)), rf(rs.size());
    std::vector<float> fs(static_cast<size_t>(kv_dim)), ff(fs.size());
    double worst = 0;
    for (size_t c = 0; c < cells.size(); ++c) {
      const int32_t cell[1] = {cells[c]};
      // V of layer 0: independent of position.
      shifted.kv().read_rows(0, 1, cell, rs.data());
      fresh.kv().read_rows(0, 1, cell, rf.data());
      ASSERT_EQ(rs, rf) << "V row of cell " << c;
      shifted.kv().read_rows(0, 0, cell, rs.data());
      fresh.kv().read_rows(0, 0, cell, rf.data());
      type_traits(type).dequantize_row(rs.data(), fs.data(), kv_dim);
      type_traits(type).dequantize_row(rf.data(), ff.data(), kv_dim);
      const int32_t p = start + static_cast<int32_t>(c);
      for (int64_t j = 0; j < kv_dim; ++j) {
        const double diff = std::fabs(static_cast<double>(fs[static_cast<size_t>(j)]) - ff[static_cast<size_t>(j)]);
        const double bound = sb.bound(ff, j, p, delta);
        worst = std::max(worst, diff / bound);
        ASSERT_LE(diff, bound) << "cell " << c << " element " << j << " (start " << start << ", delta " << delta << ")";
      }
    }
    RecordProperty("worst_fraction_of_bound_" + std::to_string(start) + "_" + std::to_string(delta), std::to_string(worst));
    // The shifted cache goes on at the new positions: the next token sees all the prompt.
    const std::vector<int32_t> one = {42};
    const auto l = shifted.forward(Batch::sequence(one, start + delta + static_cast<int32_t>(kPrompt.size()), 0, false));
    for (float v : l) ASSERT_TRUE(std::isfinite(v));
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, SeqAdd, ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0));

TEST(KvSequences, SeqAddOfASharedCellIsRefusedAndChangesNothing) {
  auto model = tiny();
  Engine e(model, cpu_config());
  e.decode(kPrompt);
  e.seq_cp(0, 1, 0, 5);
  const auto before = e.kv().cells();
  EXPECT_THROW(e.seq_add(0, 0, -1, 3), Error);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(before[i].pos, e.kv().cells()[i].pos);
  // Only the cells sequence 0 alone sees: fine.
  EXPECT_NO_THROW(e.seq_add(0, 5, -1, 3));
  EXPECT_EQ(e.n_past(0), static_cast<int32_t>(kPrompt.size()) + 3);
}

TEST(KvSequences, SessionContextShiftGeneratesPastTheContextKeepingThePrefix) {
  const auto dir = test::temp_dir();
  auto model = Model::load(test::write_tokenized_model(test::SynthSpec{}, dir, 512).string());
  Engine e(model, cpu_config(TensorType::F16, 48));
  Session s(e, *model->tokenizer());
  s.set_context_shift(4);
  SamplerParams sp;
  sp.temp = 0;
  Sampler sampler(sp);
  GenerateOptions opt;
  opt.max_tokens = 150;  // about 3x the context
  opt.stop_at_eog = false;
  GenerateStats st;
  const std::vector<int32_t> prompt(kPrompt.begin(), kPrompt.begin() + 10);
  s.generate(prompt, sampler, opt, nullptr, &st);
  EXPECT_EQ(st.generated_tokens, 150);
  EXPECT_EQ(st.stop_reason, "length");
  EXPECT_GE(s.shifts(), 3);
  // The first 4 tokens are kept, positions are 0..n-1 and in step with the token list.
  ASSERT_GE(s.tokens().size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(s.tokens().begin(), s.tokens().begin() + 4), std::vector<int32_t>(prompt.begin(), prompt.begin() + 4));
  const auto cells = e.kv().seq_cells(0);
  ASSERT_EQ(cells.size(), s.tokens().size());
  for (size_t i = 0; i < cells.size(); ++i) EXPECT_EQ(e.kv().cells()[static_cast<size_t>(cells[i])].pos, static_cast<int32_t>(i));
  // Without the shift the same run stops at the context.
  Engine e2(model, cpu_config(TensorType::F16, 48));
  Session s2(e2, *model->tokenizer());
  GenerateStats st2;
  s2.generate(prompt, sampler, opt, nullptr, &st2);
  EXPECT_EQ(st2.stop_reason, "context");
}

}  // namespace
}  // namespace minfer
