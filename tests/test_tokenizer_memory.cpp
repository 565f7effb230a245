// The memory claim of the tokenizer on the real Qwen2 vocabulary (151,936 tokens, 151,387
// merges): its tables report their heap bytes (Tokenizer::memory_bytes), that report is below a
// named bound, and it agrees with what the allocator actually handed out while building them.
#include <gtest/gtest.h>

#include <malloc.h>

#include <string_view>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace minfer::tok {
namespace {

constexpr const char* kVocab = "fixtures/tokenizer/ggml-vocab-qwen2.gguf";

// The tables' size for the Qwen2 vocabulary: token texts and pieces (one arena and an 8-byte
// span each), token types, a 2^18-slot text->id index and a 2^18-slot merge table (16 bytes a
// slot) come to ~10.1 MiB. The node-based maps and per-token std::strings before took ~38 MiB.
constexpr size_t kQwen2TablesMaxBytes = 11u << 20;

// Heap bytes in use (small blocks plus mmap'ed big blocks), from glibc's allocator.
size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

TEST(TokenizerMemory, Qwen2TablesStayBelowTheirNamedBound) {
  MINFER_REQUIRE_SHARED(kVocab);
  const auto file = gguf::GgufFile::open(test::shared_path(kVocab).string());
  const Tokenizer t(vocab_from_gguf(*file));
  size_t text_bytes = 0;
  for (int32_t id = 0; id < t.n_vocab(); ++id) text_bytes += t.token_text(id).size();
  const size_t bytes = t.memory_bytes();
  std::printf("qwen2 tokenizer tables: %zu bytes (%.2f MiB), token text %zu bytes\n", bytes,
              static_cast<double>(bytes) / (1 << 20), text_bytes);
  EXPECT_LE(bytes, kQwen2TablesMaxBytes);
  // It cannot hold less than the texts, one id per token in the index and one 16-byte entry
  // per merge pair.
  EXPECT_GE(bytes, text_bytes + 151936u * 4 + 151387u * 16);
}

TEST(TokenizerMemory, MemoryBytesMatchesTheHeapTheTokenizerKeeps) {
  MINFER_REQUIRE_SHARED(kVocab);
  const auto file = gguf::GgufFile::open(test::shared_path(kVocab).string());
  const size_t before = heap_in_use();
  const Tokenizer t(vocab_from_gguf(*file));
  const size_t kept = heap_in_use() - before;
  std::printf("heap kept by the tokenizer: %zu bytes, memory_bytes(): %zu\n", kept, t.memory_bytes());
  // Allocator overhead and the few small objects memory_bytes() leaves out (the Impl, the
  // regex, file names, the chat template) stay within this slack.
  constexpr size_t kSlack = 512u << 10;
  EXPECT_LE(kept, t.memory_bytes() + kSlack);
  EXPECT_GE(kept + kSlack, t.memory_bytes());
}

}  // namespace
}  // namespace minfer::tok
