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

/// "u8", "string", "array", ... ("type#N" for a value the spec does not define).
std::string_view value_type_name(ValueType t);

/// Bytes of one packed scalar of type `t` (U8: 1 ... F64: 8, BOOL: 1); 0 for STRING and ARRAY,
/// whose size depends on their content, and for an undefined type.
size_t value_type_size(ValueType t);

/// Tensor names must be shorter than this many bytes (ggml.h GGML_MAX_NAME = 64, including the
/// terminating NUL; llama.cpp's gguf.cpp rejects longer names).
inline constexpr size_t kMaxTensorNameBytes = 63;

/// Default and largest accepted general.alignment, in bytes. The default is the GGUF spec's
/// (GGUF_DEFAULT_ALIGNMENT = 32); the upper bound is minfer's sanity limit (16 MiB, above any
/// page or huge-page size a writer would align to).
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint64_t kMaxAlignment = uint64_t{1} << 24;

/// minfer's sanity limits on counts (beyond any real model, far below what would exhaust
/// memory): the reader rejects a file exceeding one with a minfer::Error naming the count.
/// Counts are also checked against the bytes left in the file; these limits matter for large
/// (or sparse) files whose zeros would parse as millions of empty strings, each of which costs
/// a 16-byte view. Real files: ~50 keys, ~1000 tensors, ~300k-800k strings (vocab + merges).
inline constexpr uint64_t kMaxKeyValues = uint64_t{1} << 20;
inline constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxStringArrayElements = uint64_t{1} << 24;  ///< all arrays together

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

  /// Array element `k` as a double / int64 (numeric and bool arrays only, k < count; a violation
  /// is an internal error). elem_i64 truncates floats toward zero, saturating (NaN gives 0), and
  /// wraps u64 values above INT64_MAX; the typed getters check ranges instead.
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

  /// Parses a GGUF image held in memory (the bytes are copied; `name` stands for the path in
  /// error messages). Same parser and checks as open(); used by the fuzzer and tests.
  static std::unique_ptr<GgufFile> open_memory(std::span<const uint8_t> bytes,
                                               const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  /// File offset of the data section: the end of the tensor-info table rounded up to the
  /// alignment. With no tensors there is no data section and this is the end of the table
  /// (llama.cpp's gguf.cpp does not pad in that case either).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

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

  /// Tensor infos in file order (which is also data-section order: the reader requires the
  /// offsets to be packed in order, as llama.cpp does).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// True for open() (the bytes are a read-only shared mapping of the file), false for
  /// open_memory() (a heap copy).
  bool is_mapped() const { return map_.has_value(); }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  void parse();  // gguf_parse.cpp

  std::optional<MappedFile> map_;  ///< open(): the mapped file
  std::vector<uint8_t> owned_;     ///< open_memory(): the copied bytes
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace minfer::gguf
