// `minfer inspect FILE [--json] [--full-arrays]`: what a GGUF file holds. Version, alignment,
// metadata (arrays summarized; long strings truncated in the text view, full in JSON), the
// tensor table (name, type, shape in ggml order, bytes, offset), totals and a per-type summary.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/printable.h"
#include "core/types.h"
#include "gguf/gguf.h"

namespace minfer::cli {
namespace {

using gguf::GgufFile;
using gguf::TensorInfo;
using gguf::Value;
using gguf::ValueType;

constexpr size_t kTextStringMax = 64;  // characters of a string shown in the text view
constexpr uint64_t kHeadElements = 8;  // array elements shown (text view and JSON summary)

/// A string for one line of the text view: control characters and invalid UTF-8 escaped
/// (core/printable.h), cut at `max` bytes of the original, quoted (values, with '"' and '\\'
/// escaped) or not (keys and tensor names).
std::string escaped(std::string_view s, size_t max, bool quote = true) {
  const std::string out = printable(s.substr(0, std::min(s.size(), max)), quote);
  std::string q = quote ? "\"" + out + "\"" : out;
  if (s.size() > max) q += fmt::format("... ({} bytes)", s.size());
  return q;
}

std::string scalar_text(const Value& v) {
  switch (v.type) {
    case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
      return std::to_string(v.u);
    case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
      return std::to_string(v.i);
    case ValueType::F32: return fmt::format("{}", static_cast<float>(v.f));
    case ValueType::F64: return fmt::format("{}", v.f);
    case ValueType::BOOL: return v.u ? "true" : "false";
    case ValueType::STRING: return escaped(v.str, kTextStringMax);
    case ValueType::ARRAY: break;
  }
  return "?";
}

std::string elem_text(const Value& v, uint64_t k) {
  switch (v.elem_type) {
    case ValueType::STRING: return escaped(v.strings[k], 24);
    case ValueType::F32: return fmt::format("{}", static_cast<float>(v.elem_f64(k)));
    case ValueType::F64: return fmt::format("{}", v.elem_f64(k));
    case ValueType::BOOL: return v.elem_i64(k) ? "true" : "false";
    case ValueType::U64: return std::to_string(static_cast<uint64_t>(v.elem_i64(k)));
    default: return std::to_string(v.elem_i64(k));
  }
}

std::string type_text(const Value& v) {
  if (v.type != ValueType::ARRAY) return std::string(gguf::value_type_name(v.type));
  return fmt::format("{}[{}]", gguf::value_type_name(v.elem_type), v.count);
}

std::string shape_text(const TensorInfo& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

nlohmann::ordered_json scalar_json(const Value& v) {
  switch (v.type) {
    case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
      return v.u;
    case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
      return v.i;
    case ValueType::F32: case ValueType::F64: return v.f;
    case ValueType::BOOL: return v.u != 0;
    case ValueType::STRING: return std::string(v.str);
    case ValueType::ARRAY: break;
  }
  return nullptr;
}

nlohmann::ordered_json elem_json(const Value& v, uint64_t k) {
  switch (v.elem_type) {
    case ValueType::STRING: return std::string(v.strings[k]);
    case ValueType::F32: case ValueType::F64: return v.elem_f64(k);
    case ValueType::BOOL: return v.elem_i64(k) != 0;
    case ValueType::U64: return static_cast<uint64_t>(v.elem_i64(k));
    default: return v.elem_i64(k);
  }
}

struct TypeTotals {
  uint64_t tensors = 0, bytes = 0, params = 0;
};

struct Totals {
  uint64_t bytes = 0, params = 0;
  std::map<std::string, TypeTotals> by_type;
};

Totals totals_of(const GgufFile& f) {
  Totals t;
  for (const TensorInfo& ti : f.tensors()) {
    t.bytes += ti.nbytes;
    t.params += static_cast<uint64_t>(ti.n_elements());
    TypeTotals& tt = t.by_type[std::string(type_name(ti.type))];
    tt.tensors += 1;
    tt.bytes += ti.nbytes;
    tt.params += static_cast<uint64_t>(ti.n_elements());
  }
  return t;
}

void print_json(const GgufFile& f, bool full_arrays) {
  nlohmann::ordered_json j;
  j["file"] = f.path();
  j["file_size"] = f.file_size();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  auto& meta = j["metadata"] = nlohmann::ordered_json::array();
  for (const gguf::KeyValue& kv : f.metadata()) {
    nlohmann::ordered_json m;
    m["key"] = kv.key;
    m["type"] = gguf::value_type_name(kv.value.type);
    if (kv.value.type == ValueType::ARRAY) {
      const Value& v = kv.value;
      m["elem_type"] = gguf::value_type_name(v.elem_type);
      m["count"] = v.count;
      const uint64_t n = full_arrays ? v.count : std::min(v.count, kHeadElements);
      auto& vals = m[full_arrays ? "values" : "head"] = nlohmann::ordered_json::array();
      for (uint64_t k = 0; k < n; ++k) vals.push_back(elem_json(v, k));
    } else {
      m["value"] = scalar_json(kv.value);
    }
    meta.push_back(std::move(m));
  }
  auto& tensors = j["tensors"] = nlohmann::ordered_json::array();
  for (const TensorInfo& t : f.tensors()) {
    nlohmann::ordered_json o;
    o["name"] = t.name;
    o["type"] = type_name(t.type);
    o["shape"] = std::vector<int64_t>(t.ne, t.ne + t.n_dims);
    o["elements"] = t.n_elements();
    o["bytes"] = t.nbytes;
    o["offset"] = t.offset;
    tensors.push_back(std::move(o));
  }
  const Totals tot = totals_of(f);
  j["totals"] = {{"tensors", f.tensors().size()}, {"bytes", tot.bytes}, {"parameters", tot.params}};
  auto& types = j["types"] = nlohmann::ordered_json::object();
  for (const auto& [name, tt] : tot.by_type)
    types[name] = {{"tensors", tt.tensors}, {"bytes", tt.bytes}, {"parameters", tt.params}};
  // Strings come from the file: replace invalid UTF-8 instead of throwing.
  const std::string out = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fputc('\n', stdout);
}

void print_text(const GgufFile& f) {
  fmt::print("file:       {} ({} bytes)\n", printable(f.path()), f.file_size());
  fmt::print("version:    {}\n", f.version());
  fmt::print("alignment:  {}\n", f.alignment());
  fmt::print("data:       offset {}\n", f.data_offset());
  fmt::print("metadata:   {} keys\n", f.metadata().size());
  for (const gguf::KeyValue& kv : f.metadata()) {
    const Value& v = kv.value;
    std::string value;
    if (v.type == ValueType::ARRAY) {
      const uint64_t n = std::min(v.count, kHeadElements);
      value = "[";
      for (uint64_t k = 0; k < n; ++k) value += (k ? ", " : "") + elem_text(v, k);
      value += v.count > n ? ", ...]" : "]";
    } else {
      value = scalar_text(v);
    }
    fmt::print("  {:<40} {:<14} {}\n", escaped(kv.key, 80, false), type_text(v), value);
  }
  fmt::print("tensors:    {}\n", f.tensors().size());
  if (!f.tensors().empty())
    fmt::print("  {:>5}  {:<40} {:<7} {:<24} {:>12} {:>12}\n", "#", "name", "type", "shape",
               "bytes", "offset");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    fmt::print("  {:>5}  {:<40} {:<7} {:<24} {:>12} {:>12}\n", i, escaped(t.name, 80, false),
               type_name(t.type), shape_text(t), t.nbytes, t.offset);
  }
  const Totals tot = totals_of(f);
  fmt::print("totals:     {} tensors, {} bytes, {} parameters\n", f.tensors().size(), tot.bytes,
             tot.params);
  for (const auto& [name, tt] : tot.by_type)
    fmt::print("  {:<8} {:>6} tensors {:>14} bytes {:>14} parameters\n", name, tt.tensors,
               tt.bytes, tt.params);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show what a GGUF file holds (metadata and tensors)");
  static std::string path;
  static bool json = false;
  static bool full_arrays = false;
  cmd->add_option("file", path, "GGUF file")->required();
  cmd->add_flag("--json", json, "Print JSON instead of text");
  cmd->add_flag("--full-arrays", full_arrays,
                "JSON: every array element (\"values\") instead of the first 8 (\"head\")");
  cmd->callback([] {
    const auto f = GgufFile::open(path);
    if (json)
      print_json(*f, full_arrays);
    else
      print_text(*f);
  });
}

}  // namespace minfer::cli
