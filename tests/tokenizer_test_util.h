// Helpers for the tokenizer tests: a small byte-level vocabulary built in code, writing any
// VocabData as a Hugging Face tokenizer.json, and reading the llama.cpp test-tokenizer-0 files.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/vocab.h"

namespace minfer::test {

/// The Qwen2 Split regex exactly as the official tokenizer.json writes it.
inline const char* qwen2_hf_regex() {
  return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

/// Byte-level vocabulary: ids 0..255 are the bytes 0..255; then one token per merge (in merge
/// order), each merge given as raw bytes (left, right); then `added` as (text, special).
inline tok::VocabData tiny_vocab(const std::vector<std::pair<std::string, std::string>>& merges,
                                 const std::vector<std::pair<std::string, bool>>& added = {}) {
  tok::VocabData d;
  d.source = "tiny-vocab";
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(tok::bytes_to_token_text(std::string(1, static_cast<char>(b))));
    d.types.push_back(tok::TokenType::Normal);
  }
  for (const auto& [l, r] : merges) {
    d.merges.emplace_back(tok::bytes_to_token_text(l), tok::bytes_to_token_text(r));
    d.tokens.push_back(tok::bytes_to_token_text(l + r));
    d.types.push_back(tok::TokenType::Normal);
  }
  for (const auto& [text, special] : added) {
    d.tokens.push_back(text);
    d.types.push_back(special ? tok::TokenType::Control : tok::TokenType::UserDefined);
  }
  return d;
}

/// Writes `d` as a tokenizer.json: Normal tokens in model.vocab, the others in added_tokens
/// (Control -> special true), merges as "a b" strings or as ["a", "b"] pairs.
inline void write_tokenizer_json(const tok::VocabData& d, const std::filesystem::path& path,
                                 bool pair_merges, const char* regex = qwen2_hf_regex()) {
  // nlohmann::json (a std::map) for the vocab: inserting 150k keys into an ordered_json
  // object is quadratic. Key order does not matter in model.vocab.
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    if (d.types[i] == tok::TokenType::Normal) {
      vocab[std::string(d.tokens[i])] = i;
    } else {
      const uint8_t s = d.strip.empty() ? 0 : d.strip[i];
      added.push_back({{"id", i}, {"content", std::string(d.tokens[i])}, {"single_word", false},
                       {"lstrip", (s & tok::kStripLeft) != 0}, {"rstrip", (s & tok::kStripRight) != 0},
                       {"normalized", false}, {"special", d.types[i] == tok::TokenType::Control}});
    }
  }
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [l, r] : d.merges) {
    if (pair_merges) merges.push_back({std::string(l), std::string(r)});
    else merges.push_back(std::string(l) + " " + std::string(r));
  }
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  std::ofstream(path, std::ios::binary) << j.dump();
}

/// The strings of a llama.cpp test-tokenizer-0 .inp file (see the fixture README).
inline std::vector<std::string> read_vocab_test_inputs(const std::string& bytes) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t p = 0;
  for (size_t q; (q = bytes.find(sep, p)) != std::string::npos; p = q + sep.size())
    out.push_back(bytes.substr(p, q - p));
  return out;
}

/// The id lists of a .out file: one line per string, ids separated by spaces.
inline std::vector<std::vector<int32_t>> read_vocab_test_outputs(const std::string& bytes) {
  std::vector<std::vector<int32_t>> out;
  size_t p = 0;
  for (size_t q; (q = bytes.find('\n', p)) != std::string::npos; p = q + 1) {
    std::vector<int32_t> ids;
    size_t i = p;
    while (i < q) {
      while (i < q && bytes[i] == ' ') ++i;
      size_t j = i;
      while (j < q && bytes[j] != ' ') ++j;
      if (j > i) ids.push_back(std::stoi(bytes.substr(i, j - i)));
      i = j;
    }
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace minfer::test
