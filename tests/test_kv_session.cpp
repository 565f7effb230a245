// KV session files on the CPU (src/kv/session_file.h, Engine::save_sequence / restore_sequence):
// bitwise round trips for f32/f16/q8_0 KV, prompt-cache reuse, KV type conversion on load, and
// every refusal (each flipped bit, each truncation, another model, foreign sizes), each leaving
// the cache exactly as it was; a save that cannot be written keeps the previous file.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "kv/session_file.h"
#include "models/model.h"
#include "quant/quant.h"
#include "sampling/sampler.h"
#include "synth_model.h"
#include "test_util.h"
#include "tokenized_model.h"

namespace minfer {
namespace {

std::shared_ptr<Model> tiny(const test::SynthSpec& spec, const std::filesystem::path& dir) {
  return Model::load(test::write_synth_model(spec, dir).string());
}

EngineConfig cpu_config(TensorType kv = TensorType::F32, int64_t n_ctx = 256) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = n_ctx;
  c.kv_type = kv;
  return c;
}

std::vector<int32_t> greedy(Engine& e, std::vector<float> logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits));
    const int32_t one[1] = {out.back()};
    logits = e.decode(one);
  }
  return out;
}

const std::vector<int32_t> kPrompt = {11, 200, 37, 5, 480, 99, 123, 7, 310, 42, 1, 77, 256, 8, 9, 300, 17};

/// Snapshot of everything a restore may touch: the cell table and every region's bytes.
struct CacheSnapshot {
  std::vector<KvCache::Cell> cells;
  std::vector<std::vector<uint8_t>> regions;
  explicit CacheSnapshot(Engine& e) : cells(e.kv().cells()) {
    for (int64_t l = 0; l < e.kv().n_layer(); ++l)
      for (int32_t w = 0; w < 2; ++w) {
        const graph::TensorRef r = e.kv().region(l, w);
        const auto* p = static_cast<const uint8_t*>(r.data);
        regions.emplace_back(p, p + r.nbytes);
      }
  }
  bool operator==(const CacheSnapshot& o) const {
    if (cells.size() != o.cells.size() || regions != o.regions) return false;
    for (size_t i = 0; i < cells.size(); ++i)
      if (cells[i].pos != o.cells[i].pos || cells[i].seqs != o.cells[i].seqs) return false;
    return true;
  }
};

std::span<const int32_t> all_but_last(const std::vector<int32_t>& v) { return {v.data(), v.size() - 1}; }

class SessionRoundTrip : public ::testing::TestWithParam<TensorType> {};

TEST_P(SessionRoundTrip, Greedy64AfterRestoreEqualsUninterruptedRunBitwise) {
  const auto dir = test::temp_dir();
  auto model = tiny(test::SynthSpec{}, dir);
  Engine a(model, cpu_config(GetParam()));
  a.decode(all_but_last(kPrompt));
  const std::vector<uint8_t> bytes = a.save_sequence(0, all_but_last(kPrompt));
  const int32_t last[1] = {kPrompt.back()};
  const std::vector<float> la = a.decode(last);
  const auto ga = greedy(a, la, 64);

  Engine b(model, cpu_config(GetParam()));
  const Engine::Restored r = b.restore_sequence(bytes, "mem", 0);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(kPrompt.begin(), kPrompt.end() - 1));
  ASSERT_EQ(r.positions.size(), kPrompt.size() - 1);
  for (size_t i = 0; i < r.positions.size(); ++i) EXPECT_EQ(r.positions[i], static_cast<int32_t>(i));
  // Saving the restored cache gives the same bytes (the rows came back bit for bit).
  EXPECT_EQ(b.save_sequence(0, r.tokens), bytes);
  const std::vector<float> lb = b.decode(last);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
  EXPECT_EQ(greedy(b, lb, 64), ga);
}

INSTANTIATE_TEST_SUITE_P(KvTypes, SessionRoundTrip, ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0));

TEST(SessionFile, FileRoundTripRestoresIntoAnotherSlotAndKeepsOtherSequences) {
  const auto dir = test::temp_dir();
  auto model = tiny(test::SynthSpec{}, dir);
  Engine a(model, cpu_config());
  a.decode(kPrompt);
  const std::string path = (dir / "s.session").string();
  a.save_sequence_file(path, 0, kPrompt);
  EXPECT_TRUE(test::write_temporaries(dir).empty());
  // The streamed file holds exactly the bytes of the in-memory encoding.
  EXPECT_EQ(test::read_bytes(path), a.save_sequence(0, kPrompt));
  Engine b(model, cpu_config());
  b.forward(Batch::sequence(std::vector<int32_t>{5, 6, 7}, 0, 0, false));  // sequence 0: other tokens
  const auto r = b.restore_sequence_file(path, 3);
  EXPECT_EQ(r.tokens, kPrompt);
  EXPECT_EQ(b.kv().n_used(), static_cast<int64_t>(kPrompt.size() + 3));
  EXPECT_EQ(b.n_past(0), 3);
  EXPECT_EQ(b.n_past(3), static_cast<int32_t>(kPrompt.size()));
  // The restored slot continues as the saved one does.
  const std::vector<int32_t> one = {42};
  const auto want = a.decode(one);
  const auto got = b.forward(Batch::sequence(one, static_cast<int32_t>(kPrompt.size()), 3, false));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
}

TEST(SessionFile, PromptCacheOfAUsedWithAPlusBPrefillsOnlyB) {
  const auto dir = test::temp_dir();
  auto model = Model::load(test::write_tokenized_model(test::SynthSpec{}, dir, 512).string());
  const tok::Tokenizer& tk = *model->tokenizer();
  const std::vector<int32_t> a_tokens(kPrompt.begin(), kPrompt.begin() + 10);
  const std::string path = (dir / "a.session").string();
  {
    Engine e(model, cpu_config());
    Session s(e, tk);
    GenerateStats st;
    s.prefill(a_tokens, &st);
    EXPECT_EQ(st.prompt_tokens, 10);
    s.save(path);
  }
  Engine e(model, cpu_config());
  Session s(e, tk);
  s.load(path);
  EXPECT_EQ(s.tokens(), a_tokens);
  GenerateStats st;
  const std::vector<float> got = s.prefill(kPrompt, &st);
  EXPECT_EQ(st.reused_tokens, 10);
  EXPECT_EQ(st.prompt_tokens, static_cast<int32_t>(kPrompt.size()) - 10);
  Engine fresh(model, cpu_config());
  const std::vector<float> want = fresh.decode(kPrompt);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
}

class SessionConversion : public ::testing::TestWithParam<std::pair<TensorType, TensorType>> {};

TEST_P(SessionConversion, RowsAreConvertedWithTheReferenceQuantizer) {
  const auto [from, to] = GetParam();
  const auto dir = test::temp_dir();
  auto model = tiny(test::SynthSpec{}, dir);
  Engine a(model, cpu_config(from));
  a.decode(kPrompt);
  const std::vector<uint8_t> bytes = a.save_sequence(0, kPrompt);
  Engine b(model, cpu_config(to));
  b.restore_sequence(bytes, "mem", 0);
  // Independent reference: dequantize the saved rows and quantize them to `to` row by row.
  const int64_t kv_dim = a.kv().kv_dim();
  const size_t rb_from = row_bytes(from, kv_dim), rb_to = row_bytes(to, kv_dim);
  const auto cells = b.kv().seq_cells(0);
  std::vector<uint8_t> a_row(rb_from), b_row(rb_to), want(rb_to);
  std::vector<float> tmp(static_cast<size_t>(kv_dim));
  for (int64_t l = 0; l < a.kv().n_layer(); ++l)
    for (int32_t w = 0; w < 2; ++w)
      for (size_t i = 0; i < cells.size(); ++i) {
        const int32_t ca[1] = {a.kv().seq_cells(0)[i]}, cb[1] = {cells[i]};
        a.kv().read_rows(l, w, ca, a_row.data());
        b.kv().read_rows(l, w, cb, b_row.data());
        type_traits(from).dequantize_row(a_row.data(), tmp.data(), kv_dim);
        type_traits(to).quantize_row(tmp.data(), want.data(), kv_dim);
        ASSERT_EQ(b_row, want) << "layer " << l << (w ? " V" : " K") << " cell " << i;
      }
  // And the restored cache works: the next token's logits are finite.
  const int32_t one[1] = {3};
  for (float v : b.decode(one)) ASSERT_TRUE(std::isfinite(v));
}

INSTANTIATE_TEST_SUITE_P(KvTypes, SessionConversion,
                         ::testing::Values(std::pair{TensorType::F32, TensorType::F16}, std::pair{TensorType::F32, TensorType::Q8_0},
                                           std::pair{TensorType::F16, TensorType::F32}, std::pair{TensorType::Q8_0, TensorType::F32},
                                           std::pair{TensorType::Q8_0, TensorType::F16}, std::pair{TensorType::F16, TensorType::Q8_0}));

/// A tiny model (1 layer, kv_dim 64) so that a session file is a few hundred bytes.
test::SynthSpec micro_spec() {
  test::SynthSpec s;
  s.n_layer = 1;
  s.n_embd = 64;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.head_dim = 32;
  s.n_ff = 64;
  s.n_vocab = 64;
  return s;
}

/// Expects restore to throw a one-line error naming `name` and to leave the cache unchanged.
void expect_refused(Engine& e, std::span<const uint8_t> bytes, const std::string& what, const std::string& needle = "") {
  const CacheSnapshot before(e);
  try {
    e.restore_sequence(bytes, "victim.session", 0);
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& err) {
    const std::string msg = err.what();
    EXPECT_EQ(msg.rfind("victim.session: ", 0), 0u) << what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": " << msg;
    if (!needle.empty()) {
      EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
    }
  }
  EXPECT_TRUE(CacheSnapshot(e) == before) << what << ": the cache changed";
}

TEST(SessionFile, EveryFlippedBitIsRefusedAndLeavesTheCacheAsItWas) {
  const auto dir = test::temp_dir();
  auto model = tiny(micro_spec(), dir);
  Engine a(model, cpu_config(TensorType::Q8_0, 16));
  const std::vector<int32_t> p = {1, 2, 3};
  a.decode(p);
  const std::vector<uint8_t> good = a.save_sequence(0, p);
  ASSERT_LT(good.size(), 1024u);
  Engine b(model, cpu_config(TensorType::Q8_0, 16));
  b.decode(std::vector<int32_t>{9, 8, 7, 6});  // something to keep
  b.restore_sequence(good, "good", 1);          // the good file is accepted (into slot 1)
  for (size_t i = 0; i < good.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= static_cast<uint8_t>(1u << bit);
      expect_refused(b, bad, "byte " + std::to_string(i) + " bit " + std::to_string(bit));
      if (::testing::Test::HasFailure()) return;
    }
}

TEST(SessionFile, EveryTruncationIsRefusedAndTrailingBytesToo) {
  const auto dir = test::temp_dir();
  auto model = tiny(micro_spec(), dir);
  Engine a(model, cpu_config(TensorType::F16, 16));
  const std::vector<int32_t> p = {1, 2, 3};
  a.decode(p);
  const std::vector<uint8_t> good = a.save_sequence(0, p);
  Engine b(model, cpu_config(TensorType::F16, 16));
  b.decode(std::vector<int32_t>{9, 8});
  for (size_t n = 0; n < good.size(); ++n) {
    expect_refused(b, std::span<const uint8_t>(good.data(), n), "length " + std::to_string(n));
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  expect_refused(b, longer, "one trailing byte", "unexpected bytes");
}

TEST(SessionFile, AnotherModelsFileIsRefused) {
  const auto dir = test::temp_dir();
  auto model = tiny(micro_spec(), dir);
  test::SynthSpec other_seed = micro_spec();
  other_seed.seed = 2;  // same shapes, other weights
  const auto dir2 = dir / "other";
  std::filesystem::create_directories(dir2);
  auto other = tiny(other_seed, dir2);
  Engine a(other, cpu_config(TensorType::F32, 16));
  a.decode(std::vector<int32_t>{1, 2});
  const auto bytes = a.save_sequence(0, std::vector<int32_t>{1, 2});
  Engine b(model, cpu_config(TensorType::F32, 16));
  expect_refused(b, bytes, "other weights", "another model");
  test::SynthSpec qwen3 = micro_spec();
  qwen3.arch = "qwen3";
  const auto dir3 = dir / "q3";
  std::filesystem::create_directories(dir3);
  Engine c(tiny(qwen3, dir3), cpu_config(TensorType::F32, 16));
  c.decode(std::vector<int32_t>{1, 2});
  expect_refused(b, c.save_sequence(0, std::vector<int32_t>{1, 2}), "qwen3", "another model");
}

TEST(SessionFile, ForeignContentIsRefusedWithItsReason) {
  const auto dir = test::temp_dir();
  auto model = tiny(micro_spec(), dir);
  Engine a(model, cpu_config(TensorType::F32, 64));
  std::vector<int32_t> p(20);
  for (int i = 0; i < 20; ++i) p[static_cast<size_t>(i)] = i;
  a.decode(p);
  Engine small(model, cpu_config(TensorType::F32, 16));
  small.decode(std::vector<int32_t>{4});
  expect_refused(small, a.save_sequence(0, p), "20 cells, context 16", "more than the context");
  // Fits the context alone but not beside sequence 1's 10 cells.
  Engine busy(model, cpu_config(TensorType::F32, 24));
  busy.forward(Batch::sequence(std::vector<int32_t>(10, 3), 0, 1, false));
  expect_refused(busy, a.save_sequence(0, p), "no room beside sequence 1", "do not fit");
  // Token ids outside the vocabulary (the checksums are right: the writer does not check).
  std::vector<int32_t> bad = p;
  bad[5] = 64;
  expect_refused(a, a.save_sequence(0, bad), "token 64 of 64", "outside the vocabulary");
  // Bad magic, other version.
  std::vector<uint8_t> b2 = a.save_sequence(0, p);
  b2[0] = 'X';
  expect_refused(small, b2, "magic", "bad magic");
  b2 = a.save_sequence(0, p);
  b2[8] = 2;
  expect_refused(small, b2, "version", "version 2");
  expect_refused(small, std::vector<uint8_t>(), "empty", "bad magic");
}

/// A session of 8 layers x 300 cells of f32 rows of 1,024 elements (19.7 MB of rows): above the
/// 16 MiB from which the rows' checksums are computed on several threads.
kv::SessionData large_session() {
  kv::SessionData s;
  s.model.hash = 0x1234;
  s.model.arch = "qwen2";
  s.model.n_layer = 8;
  s.model.kv_dim = 1024;
  s.model.n_vocab = 1000;
  s.kv_type = TensorType::F32;
  kv::SessionSequence sq;
  for (int32_t i = 0; i < 300; ++i) {
    sq.positions.push_back(i);
    sq.tokens.push_back(i % 1000);
  }
  s.seqs.push_back(sq);
  uint32_t x = 1;
  for (uint32_t l = 0; l < s.model.n_layer; ++l) {
    std::vector<uint8_t> r(2 * 300 * 4096);
    for (auto& b : r) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
    s.rows.push_back(std::move(r));
  }
  return s;
}

TEST(SessionFormat, LargeRowsAreCheckedInParallelAndTheFirstDamageInFileOrderIsReported) {
  const kv::SessionData s = large_session();
  const std::vector<uint8_t> good = kv::encode_session(s);
  kv::SessionLimits lim;
  lim.n_ctx = 4096;
  lim.n_vocab = 1000;
  const kv::SessionView v = kv::decode_session_view(good, "big", s.model, lim);
  ASSERT_EQ(v.rows.size(), s.rows.size());
  for (size_t l = 0; l < s.rows.size(); ++l) EXPECT_TRUE(std::equal(v.rows[l].begin(), v.rows[l].end(), s.rows[l].begin())) << l;
  // Where layer l's rows begin in the file (after the head and l whole rows sections).
  const size_t head = kv::encode_session_head(s.model, s.kv_type, s.seqs).size();
  const size_t section = 24 + s.rows[0].size() + 8;
  const auto row_at = [&](size_t l) { return head + l * section + 24 + 1000; };
  const auto error_of = [&](const std::vector<uint8_t>& bytes) -> std::string {
    try {
      (void)kv::decode_session_view(bytes, "big", s.model, lim);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  std::vector<uint8_t> bad = good;
  bad[row_at(6)] ^= 1;
  EXPECT_NE(error_of(bad).find("checksum mismatch in section rows of layer 6"), std::string::npos) << error_of(bad);
  bad[row_at(2)] ^= 4;
  EXPECT_NE(error_of(bad).find("checksum mismatch in section rows of layer 2"), std::string::npos) << error_of(bad);
  // A damaged frame of a later section (layer 7's length) after damaged rows of layer 4: layer 4 is named.
  bad = good;
  bad[row_at(4)] ^= 0x80;
  bad[head + 7 * section + 8] ^= 1;
  EXPECT_NE(error_of(bad).find("checksum mismatch in section rows of layer 4"), std::string::npos) << error_of(bad);
  // The frame alone: its own error.
  bad = good;
  bad[head + 7 * section + 8] ^= 1;
  EXPECT_NE(error_of(bad).find("layer 7"), std::string::npos) << error_of(bad);
}

TEST(SessionFile, ARestoreRefusesAFolderAFifoAndAnEmptyFileInOneLineWithoutWaiting) {
  const auto dir = test::temp_dir();
  auto model = tiny(micro_spec(), dir);
  Engine e(model, cpu_config(TensorType::F16, 16));
  const std::string fifo = (dir / "pipe.session").string(), empty = (dir / "empty.session").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  { std::ofstream(empty).flush(); }
  for (const std::string& path : {dir.string(), fifo, empty, (dir / "missing.session").string()}) {
    try {
      e.restore_sequence_file(path, 0);
      ADD_FAILURE() << path << ": accepted";
    } catch (const Error& err) {
      const std::string msg = err.what();
      EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(e.kv().n_used(), 0);
}

// A session path that is a symbolic link: the file it names is replaced and the link stays a
// link (core/atomic_file.h), also through a chain of two links and for a link whose target does
// not exist yet.
TEST(SessionFile, ASaveThroughASymbolicLinkKeepsTheLink) {
  const auto dir = test::temp_dir();
  auto model = tiny(micro_spec(), dir);
  Engine e(model, cpu_config(TensorType::F16, 16));
  e.decode(std::vector<int32_t>{1, 2, 3});
  std::filesystem::create_directory(dir / "elsewhere");
  std::filesystem::create_symlink("elsewhere/real.session", dir / "mid.session");  // dangling at first
  std::filesystem::create_symlink(dir / "mid.session", dir / "link.session");
  const std::string link = (dir / "link.session").string();
  e.save_sequence_file(link, 0, std::vector<int32_t>{1, 2, 3});
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.session"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "mid.session"));
  EXPECT_EQ(test::read_bytes((dir / "elsewhere" / "real.session").string()), e.save_sequence(0, std::vector<int32_t>{1, 2, 3}));
  e.decode(std::vector<int32_t>{4});
  e.save_sequence_file(link, 0, std::vector<int32_t>{1, 2, 3, 4});  // replaces the target again
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.session"));
  Engine b(model, cpu_config(TensorType::F16, 16));
  EXPECT_EQ(b.restore_sequence_file(link, 0).tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_TRUE(test::write_temporaries(dir).empty());
  EXPECT_TRUE(test::write_temporaries(dir / "elsewhere").empty());
}

TEST(SessionFile, AFailedWriteKeepsThePreviousFile) {
  const auto dir = test::temp_dir();
  auto model = tiny(test::SynthSpec{}, dir);
  Engine e(model, cpu_config());
  e.decode(std::vector<int32_t>{1, 2});
  const std::string path = (dir / "keep.session").string();
  e.save_sequence_file(path, 0, std::vector<int32_t>{1, 2});
  const auto old_bytes = test::read_bytes(path);
  e.decode(kPrompt);  // a larger state
  std::vector<int32_t> toks = {1, 2};
  toks.insert(toks.end(), kPrompt.begin(), kPrompt.end());
  // The child process gets a file-size limit below the new file's size (with SIGXFSZ ignored a
  // write past it fails with EFBIG): the injected "disk full".
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{static_cast<rlim_t>(old_bytes.size() + 64), static_cast<rlim_t>(old_bytes.size() + 64)};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      e.save_sequence_file(path, 0, toks);
    } catch (const Error& err) {
      const std::string msg = err.what();
      ::_exit(msg.find(path) != std::string::npos ? 0 : 2);
    }
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the save did not fail; 2: its error did not name the file";
  EXPECT_EQ(test::read_bytes(path), old_bytes);
  EXPECT_TRUE(test::write_temporaries(dir).empty());
  // And the old file still restores.
  Engine b(model, cpu_config());
  EXPECT_EQ(b.restore_sequence_file(path, 0).tokens, (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace minfer
