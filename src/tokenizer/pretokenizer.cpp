#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/error.h"

namespace minfer::tok {
namespace {

// Unicode White_Space (PropList.txt): \t \n \v \f \r U+0085 and the Z categories (Zs, Zl, Zp).
#define MINFER_WS "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}"

constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}"
    "| ?[^" MINFER_WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" MINFER_WS "]*[\\r\\n]+"
    "|[" MINFER_WS "]+(?![^" MINFER_WS "])"
    "|[" MINFER_WS "]+";

constexpr const char* kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+"
    "|\\p{N}"
    "| ?[^" MINFER_WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|[" MINFER_WS "]*[\\r\\n]+"
    "|[" MINFER_WS "]+(?![^" MINFER_WS "])"
    "|[" MINFER_WS "]+";

// Llama-3 (tokenizer.json of Meta-Llama-3 / 3.1 / 3.2, llama.cpp's LLAMA_VOCAB_PRE_TYPE_LLAMA3):
// Qwen2's pattern with digits taken in runs of up to three (\p{N}{1,3}).
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}{1,3}"
    "| ?[^" MINFER_WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" MINFER_WS "]*[\\r\\n]+"
    "|[" MINFER_WS "]+(?![^" MINFER_WS "])"
    "|[" MINFER_WS "]+";

#undef MINFER_WS

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// One JIT stack per thread (a JIT stack must not be used by two threads at once). 32 KiB grows
// up to 8 MiB, which long runs of one character class need.
struct JitStack {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* mctx = nullptr;
  JitStack() {
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    if (stack && mctx) pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
  ~JitStack() {
    if (mctx) pcre2_match_context_free(mctx);
    if (stack) pcre2_jit_stack_free(stack);
  }
};

// PCRE2's match limit for one match attempt that starts `remaining` bytes before the end.
// The default (10,000,000) counts about one step per character of a whitespace run, which the
// run alternatives scan to its end and back (measured: a run of n spaces needs n + 6), so a run
// of 10M spaces was refused. Every alternative of these patterns is linear in what it scans
// and a failing scan is followed by a match that consumes the run, so two steps per remaining
// byte (plus the default) lets any text through while still bounding one call.
uint32_t match_limit(size_t remaining) {
  constexpr uint64_t kDefault = 10'000'000;  // PCRE2's MATCH_LIMIT default (pcre2api(3))
  const uint64_t want = kDefault + 2 * static_cast<uint64_t>(remaining);
  return static_cast<uint32_t>(std::min<uint64_t>(want, UINT32_MAX));
}

}  // namespace

const char* pre_tokenizer_pattern(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::Qwen2: return kQwen2;
    case PreTokenizer::Qwen35: return kQwen35;
    case PreTokenizer::Llama3: return kLlama3;
    case PreTokenizer::None: break;
  }
  return kQwen2;
}

PreTokenizerRegex::PreTokenizerRegex(PreTokenizer kind) : kind_(kind) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  if (kind == PreTokenizer::None) fail("pre-tokenizer: a SentencePiece vocabulary has no regex");
  const char* pattern = pre_tokenizer_pattern(kind);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!code)
    fail("pre-tokenizer regex does not compile at offset {}: {}", err_off, pcre2_message(err));
  const int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  if (jit != 0) {
    pcre2_code_free(code);
    fail("pre-tokenizer regex: PCRE2 JIT compilation failed: {}", pcre2_message(jit));
  }
  code_ = code;
}

PreTokenizerRegex::~PreTokenizerRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void PreTokenizerRegex::split(std::string_view text, std::vector<std::string_view>& words) const {
  size_t pos = 0;
  while (pos < text.size()) pos = split_some(text, pos, words, SIZE_MAX);
}

size_t PreTokenizerRegex::split_some(std::string_view text, size_t pos,
                                     std::vector<std::string_view>& words, size_t max_words) const {
  thread_local JitStack jit;
  if (!jit.mctx || !jit.stack) fail("pre-tokenizer: cannot allocate the PCRE2 JIT stack");
  thread_local std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create(1, nullptr), pcre2_match_data_free);
  if (!md) fail("pre-tokenizer: cannot allocate PCRE2 match data");
  auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t n = 0;
  pcre2_set_match_limit(jit.mctx, match_limit(text.size() - pos));
  while (pos < text.size() && n < max_words) {
    const int rc = pcre2_jit_match(code, subject, text.size(), pos, 0, md.get(), jit.mctx);
    if (rc == PCRE2_ERROR_NOMATCH) {
      words.push_back(text.substr(pos));  // text after the last match
      return text.size();
    }
    if (rc < 0) fail("pre-tokenizer: PCRE2 match failed at byte {}: {}", pos, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    if (start > pos) {
      words.push_back(text.substr(pos, start - pos));  // unmatched gap
      ++n;
    }
    if (end == start) {
      // An empty match cannot happen with these patterns; step over one character anyway so
      // the loop always advances.
      size_t next = start + 1;
      while (next < text.size() && (static_cast<uint8_t>(text[next]) & 0xC0) == 0x80) ++next;
      words.push_back(text.substr(start, next - start));
      ++n;
      pos = next;
      continue;
    }
    words.push_back(text.substr(start, end - start));
    ++n;
    pos = end;
  }
  return pos;
}

}  // namespace minfer::tok
