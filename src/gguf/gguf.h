// GGUF reader (v2 and v3). The file is memory-mapped; metadata is parsed into Values (string
// arrays and numeric arrays point into the map, nothing large is copied) and tensor data is
// used in place. Every count, length, dimension, product, offset and size is checked against
// the file with overflow-safe arithmetic before use; any violation throws minfer::Error with
// "<file>: ..." naming the key or tensor and the bad value. Format: GGUF spec
// (ggml/docs/gguf.md): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, KVs, tensor
// infos, padding to general.alignment (default 32), data section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/types.h"

namespace minfer::gguf {

/// Metadata value types (GGUF spec, gguf_metadata_value_type).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

/// "u8", "string", "array", ...
std::string_view value_type_name(ValueType t);

/// One metadata value. Scalars are widened into u/i/f/b; a string is a view into the file;
/// an array keeps its element type, count, and either a pointer to its packed little-endian
/// elements in the file (numeric/bool arrays) or views of its strings. Arrays of arrays are
/// rejected by the reader (no known model uses them).
struct Value {
  ValueType type = ValueType::U8;
  uint64_t u = 0;        ///< unsigned scalars and bool (0/1)
  int64_t i = 0;         ///< signed scalars
  double f = 0.0;        ///< F32/F64 scalars
  std::string_view str;  ///< STRING
  ValueType elem_type = ValueType::U8;      ///< ARRAY: element type
  uint64_t count = 0;                       ///< ARRAY: number of elements
  const uint8_t* elems = nullptr;           ///< ARRAY of numbers/bool: packed elements in the map
  std::vector<std::string_view> strings;    ///< ARRAY of STRING

  /// Array element `k` as a double / int64 (numeric arrays only; k < count is the caller's job).
  double elem_f64(uint64_t k) const;
  int64_t elem_i64(uint64_t k) const;
};

struct KeyValue {
  std::string key;
  Value value;
};

/// One row of the tensor-info table. ne[] in ggml order: ne[0] is the contiguous (row) length.
struct TensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  uint32_t n_dims = 0;            ///< 1..4
  int64_t ne[4] = {1, 1, 1, 1};  ///< elements per dimension, unused dims are 1
  uint64_t offset = 0;           ///< bytes from the start of the data section
  uint64_t nbytes = 0;           ///< bytes of data (from the type's block layout)
  const uint8_t* data = nullptr; ///< points into the map

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  /// Rows of length ne[0]: ne[1]*ne[2]*ne[3].
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
 public:
  /// Opens, maps and validates `path`. Throws minfer::Error on any malformed content.
  static std::unique_ptr<GgufFile> open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  ///< file offset of the data section
  uint64_t file_size() const { return map_.size(); }

  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const Value* find(std::string_view key) const;

  // Typed getters. nullopt when the key is absent; minfer::Error naming the file, the key, its
  // type and the expected type when present with an incompatible type. Integer getters accept
  // any integer type whose value fits the target (writers differ on u32 vs i32).
  std::optional<uint32_t> get_u32(std::string_view key) const;
  std::optional<int64_t> get_i64(std::string_view key) const;
  std::optional<float> get_f32(std::string_view key) const;  ///< F32 or F64
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  /// Array getters: the element type must match (string / any integer / f32).
  std::optional<std::span<const std::string_view>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int32_t>> get_i32_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;

  /// Required variants: absent key -> minfer::Error "<file>: missing metadata key <key>".
  uint32_t require_u32(std::string_view key) const;
  float require_f32(std::string_view key) const;
  std::string_view require_string(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  explicit GgufFile(MappedFile map) : map_(std::move(map)) {}
  void parse();

  MappedFile map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace minfer::gguf
