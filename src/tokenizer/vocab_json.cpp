// VocabData from a Hugging Face tokenizer.json (+ tokenizer_config.json beside it, if present).
// Field names: the HF tokenizers serialization format (model.vocab, model.merges, added_tokens,
// pre_tokenizer), transformers' tokenizer_config.json (bos_token, eos_token, chat_template).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/read_file.h"
#include "tokenizer/vocab.h"

namespace minfer::tok {
namespace {

using json = nlohmann::json;

// The Split regexes of the official tokenizer.json files, and the GGUF pre name each one means
// (the same association llama.cpp's convert_hf_to_gguf.py makes by hashing the tokenizer).
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json read_json(const std::string& path) {
  // A regular file only (a FIFO is refused, not waited on), bounded like every input.
  const std::string text = read_file_bytes(path, "", kSmallFileLimitBytes, FileKinds::kRegular);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() quotes the offending input bytes raw; the byte offset is enough to find them.
    fail("{}: not valid JSON (syntax error at byte {}); expected a tokenizer.json", path, e.byte);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON (nlohmann error id {})", path, e.id);
  }
}

// Collects the Split regex patterns of a pre_tokenizer (plain or inside a Sequence).
void collect_regexes(const json& pt, std::vector<std::string>& out) {
  if (!pt.is_object()) return;
  const std::string type = pt.value("type", "");
  if (type == "Sequence" && pt.contains("pretokenizers") && pt["pretokenizers"].is_array()) {
    for (const auto& p : pt["pretokenizers"]) collect_regexes(p, out);
  } else if (type == "Split" && pt.contains("pattern") && pt["pattern"].is_object() &&
             pt["pattern"].contains("Regex") && pt["pattern"]["Regex"].is_string()) {
    out.push_back(pt["pattern"]["Regex"].get<std::string>());
  }
}

std::string detect_pre(const json& root, const std::string& path) {
  MINFER_CHECK(root.contains("pre_tokenizer") && root["pre_tokenizer"].is_object(),
        "{}: pre_tokenizer is missing or null; minfer needs the Qwen2 Split regex", path);
  std::vector<std::string> regexes;
  collect_regexes(root["pre_tokenizer"], regexes);
  MINFER_CHECK(regexes.size() == 1, "{}: pre_tokenizer has {} Split regexes; expected exactly one", path,
        regexes.size());
  if (regexes[0] == kQwen2Regex) return "qwen2";
  if (regexes[0] == kQwen35Regex) return "qwen35";
  if (regexes[0] == kLlama3Regex) return "llama-bpe";
  fail("{}: unknown pre-tokenizer regex '{}' (known: the Qwen2, Qwen3.5 and Llama-3 patterns)", path,
       regexes[0]);
}

// A tokenizer_config.json token field: a string, {"content": ...} or null.
std::optional<std::string> config_token(const json& cfg, const char* key, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  fail("{}: {} is neither a string nor an object with \"content\"", path, key);
}

void read_config(VocabData& d, const std::string& path,
                 const std::unordered_map<std::string, int32_t>& ids) {
  const json cfg = read_json(path);
  MINFER_CHECK(cfg.is_object(), "{}: top level is not an object", path);
  auto id_of = [&](const char* key) -> int32_t {
    auto text = config_token(cfg, key, path);
    if (!text) return -1;
    auto it = ids.find(*text);
    MINFER_CHECK(it != ids.end(), "{}: {} '{}' is not a token of the vocabulary", path, key, *text);
    return it->second;
  };
  d.bos_id = id_of("bos_token");
  d.eos_id = id_of("eos_token");
  d.pad_id = id_of("pad_token");
  d.unk_id = id_of("unk_token");
  auto flag = [&](const char* key) {
    if (!cfg.contains(key) || cfg[key].is_null()) return false;
    MINFER_CHECK(cfg[key].is_boolean(), "{}: {} is not a boolean", path, key);
    return cfg[key].get<bool>();
  };
  d.add_bos = flag("add_bos_token");
  d.add_eos = flag("add_eos_token");
  if (cfg.contains("chat_template")) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      d.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const auto& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
          d.chat_template = e["template"].get<std::string>();
      MINFER_CHECK(!d.chat_template.empty(), "{}: chat_template list has no \"default\" entry", path);
    } else if (!t.is_null()) {
      fail("{}: chat_template is neither a string nor a list of named templates", path);
    }
  }
}

}  // namespace

VocabData vocab_from_tokenizer_json(const std::string& path) {
  const json root = read_json(path);
  VocabData d;
  d.source = path;
  MINFER_CHECK(root.is_object(), "{}: top level is not an object", path);
  MINFER_CHECK(root.contains("model") && root["model"].is_object(), "{}: missing \"model\"", path);
  const json& model = root["model"];
  const std::string type = model.value("type", "BPE");
  MINFER_CHECK(type == "BPE", "{}: model.type = '{}' is not supported (only BPE)", path, type);
  d.model = "gpt2";
  d.pre = detect_pre(root, path);

  MINFER_CHECK(model.contains("vocab") && model["vocab"].is_object(), "{}: model.vocab is not an object",
        path);
  std::vector<std::pair<std::string, int64_t>> entries;
  int64_t max_id = -1;
  for (const auto& [text, idv] : model["vocab"].items()) {
    MINFER_CHECK(idv.is_number_integer(), "{}: model.vocab['{}'] is not an integer id", path, text);
    const int64_t id = idv.get<int64_t>();
    MINFER_CHECK(id >= 0 && id < INT32_MAX, "{}: model.vocab['{}'] = {} is not a valid id", path, text, id);
    entries.emplace_back(text, id);
    max_id = std::max(max_id, id);
  }
  struct Added {
    std::string text;
    int64_t id;
    bool special, lstrip, rstrip;
  };
  std::vector<Added> added;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    MINFER_CHECK(root["added_tokens"].is_array(), "{}: added_tokens is not an array", path);
    for (size_t i = 0; i < root["added_tokens"].size(); ++i) {
      const json& a = root["added_tokens"][i];
      MINFER_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                a.contains("content") && a["content"].is_string(),
            "{}: added_tokens[{}] needs an integer \"id\" and a string \"content\"", path, i);
      const int64_t id = a["id"].get<int64_t>();
      MINFER_CHECK(id >= 0 && id < INT32_MAX, "{}: added_tokens[{}].id = {} is not a valid id", path, i, id);
      auto b = [&](const char* k) { return a.contains(k) && a[k].is_boolean() && a[k].get<bool>(); };
      added.push_back({a["content"].get<std::string>(), id, b("special"), b("lstrip"), b("rstrip")});
      max_id = std::max(max_id, id);
    }
  }
  MINFER_CHECK(max_id >= 0, "{}: the vocabulary is empty", path);
  const auto n = static_cast<size_t>(max_id + 1);
  d.tokens.resize(n);
  d.types.assign(n, TokenType::Normal);
  d.strip.assign(n, kStripNone);
  std::vector<bool> filled(n, false);
  for (auto& [text, id] : entries) {
    const auto u = static_cast<size_t>(id);
    MINFER_CHECK(!filled[u], "{}: model.vocab gives id {} to both '{}' and '{}'", path, id, d.tokens[u], text);
    d.tokens.set(u, text);
    filled[u] = true;
  }
  for (auto& a : added) {
    const auto u = static_cast<size_t>(a.id);
    MINFER_CHECK(!filled[u] || d.tokens[u] == a.text,
          "{}: added token '{}' has id {}, which model.vocab gives to '{}'", path, a.text, a.id,
          d.tokens[u]);
    d.tokens.set(u, a.text);
    d.types[u] = a.special ? TokenType::Control : TokenType::UserDefined;
    d.strip[u] = static_cast<uint8_t>((a.lstrip ? kStripLeft : 0) | (a.rstrip ? kStripRight : 0));
    filled[u] = true;
  }
  for (size_t i = 0; i < n; ++i) MINFER_CHECK(filled[i], "{}: token id {} has no text (ids must be 0..{} without gaps)", path, i, n - 1);

  MINFER_CHECK(model.contains("merges") && model["merges"].is_array(), "{}: model.merges is not an array",
        path);
  const json& merges = model["merges"];
  d.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      MINFER_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
            "{}: model.merges[{}] = '{}' is not of the form 'left right'", path, i, s);
      d.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      d.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("{}: model.merges[{}] is neither \"left right\" nor [\"left\", \"right\"]: {}", path, i,
           m.dump());
    }
  }

  const auto config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    std::unordered_map<std::string, int32_t> ids;
    ids.reserve(n);
    for (size_t i = 0; i < n; ++i) ids.emplace(std::string(d.tokens[i]), static_cast<int32_t>(i));
    read_config(d, config.string(), ids);
  }
  validate_vocab(d);
  return d;
}

}  // namespace minfer::tok
