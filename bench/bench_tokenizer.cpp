// Tokenizer throughput: encode MB/s on one core with the Qwen2 vocabulary
// (../shared/fixtures/tokenizer/ggml-vocab-qwen2.gguf, or $MINFER_SHARED_DIR/...).
// Text: a generated English-like text (common English words with a Zipf-like frequency,
// capitalization, punctuation, numbers, and 3% invented words so the BPE also runs on cache
// misses), or the file given with --text=FILE. The target of issue 3 is >= 10 MB/s for encode.
#include <benchmark/benchmark.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "core/env.h"
#include "gguf/gguf.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using minfer::tok::Tokenizer;

std::string g_text_file;

std::string shared_dir() {
  const std::string& env = minfer::env_string("MINFER_SHARED_DIR");
  return env.empty() ? std::string(MINFER_SHARED_DIR) : env;
}

const Tokenizer& qwen2() {
  static const Tokenizer t = [] {
    const std::string path = shared_dir() + "/fixtures/tokenizer/ggml-vocab-qwen2.gguf";
    auto f = minfer::gguf::GgufFile::open(path);
    return Tokenizer(minfer::tok::vocab_from_gguf(*f));
  }();
  return t;
}

constexpr const char* kWords[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are",
    "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by",
    "hot", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when",
    "up", "use", "your", "how", "said", "an", "each", "she", "which", "do", "their", "time", "if",
    "will", "way", "about", "many", "then", "them", "write", "would", "like", "so", "these", "her",
    "long", "make", "thing", "see", "him", "two", "has", "look", "more", "day", "could", "go", "come",
    "did", "number", "sound", "no", "most", "people", "my", "over", "know", "water", "than", "call",
    "first", "who", "may", "down", "side", "been", "now", "find", "any", "new", "work", "part", "take",
    "get", "place", "made", "live", "where", "after", "back", "little", "only", "round", "man", "year",
    "came", "show", "every", "good", "me", "give", "our", "under", "name", "very", "through", "just",
    "form", "sentence", "great", "think", "say", "help", "low", "line", "differ", "turn", "cause",
    "much", "mean", "before", "move", "right", "boy", "old", "too", "same", "tell", "does", "set",
    "three", "want", "air", "well", "also", "play", "small", "end", "put", "home", "read", "hand",
    "port", "large", "spell", "add", "even", "land", "here", "must", "big", "high", "such", "follow",
    "act", "why", "ask", "men", "change", "went", "light", "kind", "off", "need", "house", "picture",
    "try", "us", "again", "animal", "point", "mother", "world", "near", "build", "self", "earth",
    "father", "head", "stand", "own", "page", "should", "country", "found", "answer", "school", "grow",
    "study", "still", "learn", "plant", "cover", "food", "sun", "four", "between", "state", "keep",
    "eye", "never", "last", "let", "thought", "city", "tree", "cross", "farm", "hard", "start", "might",
    "story", "saw", "far", "sea", "draw", "left", "late", "run", "don't", "while", "press", "close",
    "night", "real", "life", "few", "north", "information", "government", "development", "understanding",
    "international", "responsibility", "environmental", "particularly", "performance", "tokenizer"};

std::string english_like_text(size_t bytes) {
  std::mt19937 rng(42);
  const size_t n = std::size(kWords);
  // Zipf-like: word k has weight 1 / (k + 1).
  std::vector<double> w(n);
  for (size_t k = 0; k < n; ++k) w[k] = 1.0 / static_cast<double>(k + 1);
  std::discrete_distribution<size_t> pick(w.begin(), w.end());
  std::uniform_int_distribution<int> pct(0, 99);
  const char* syll[] = {"ka", "lo", "mi", "tran", "ber", "qui", "zo", "ex", "ple", "strat", "on", "ive"};
  std::string s;
  s.reserve(bytes + 64);
  bool sentence_start = true;
  size_t words_in_sentence = 0;
  while (s.size() < bytes) {
    std::string word;
    const int r = pct(rng);
    if (r < 3) {  // invented word
      const int k = 2 + pct(rng) % 3;
      for (int j = 0; j < k; ++j) word += syll[static_cast<size_t>(pct(rng)) % std::size(syll)];
    } else if (r < 5) {
      word = std::to_string(pct(rng) * 37 + pct(rng));
    } else {
      word = kWords[pick(rng)];
    }
    if (sentence_start && !word.empty()) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
    s += word;
    sentence_start = false;
    ++words_in_sentence;
    const int p = pct(rng);
    if (words_in_sentence > 6 && p < 12) {
      s += p < 9 ? "." : p < 11 ? "?" : "!";
      sentence_start = true;
      words_in_sentence = 0;
      s += pct(rng) < 15 ? "\n\n" : " ";
    } else if (p < 20) {
      s += ", ";
    } else {
      s += ' ';
    }
  }
  return s;
}

const std::string& bench_text() {
  static const std::string text = [] {
    if (g_text_file.empty()) return english_like_text(8u << 20);
    std::ifstream in(g_text_file, std::ios::binary);
    if (!in) {
      std::cerr << "cannot read " << g_text_file << "\n";
      std::exit(2);
    }
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  return text;
}

void BM_Encode(benchmark::State& state) {
  const Tokenizer& t = qwen2();
  const std::string& text = bench_text();
  t.encode(text, false, true);  // warm the word cache, as a long-running engine has it
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = t.encode(text, false, true);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(n_tokens);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_EncodeNoCache(benchmark::State& state) {
  const Tokenizer& t = qwen2();
  const std::string& text = bench_text();
  for (auto _ : state) {
    auto ids = t.encode_uncached(text, false, true);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_EncodeNoCache)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_DecodeStreaming(benchmark::State& state) {
  const Tokenizer& t = qwen2();
  const std::string& text = bench_text();
  const auto ids = t.encode(text, false, true);
  for (auto _ : state) {
    minfer::tok::Detokenizer d(t);
    size_t n = 0;
    for (int32_t id : ids) n += d.push(id).size();
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_DecodeStreaming)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first: --text=FILE (removed before Google Benchmark sees the arguments).
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--text=", 7) == 0) g_text_file = argv[i] + 7;
    else argv[out++] = argv[i];
  }
  argc = out;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
