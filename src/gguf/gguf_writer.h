// GGUF v3 writer. Metadata and tensor infos are collected in memory; tensor data is produced by
// a callback at write time, one tensor at a time, so multi-gigabyte models are written with
// bounded memory. The output is written to a new temporary file beside it (mkstemp,
// ".minfer-write-XXXXXX") and renamed on success, so a failed write never leaves a truncated file
// under the final name and never touches any other existing file; a signal that ends the process
// during the write removes the temporary file too (core/signal_cleanup.h). The layout follows the GGUF spec
// and llama.cpp's conventions (general.alignment 32 unless set, data offsets aligned).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "gguf/gguf.h"

namespace minfer::gguf {

class GgufWriter {
 public:
  /// Fills `dst` (exactly the tensor's byte size) with the tensor's data.
  using Producer = std::function<void(uint8_t* dst, size_t nbytes)>;

  // Metadata setters. Setting a key twice replaces the value in place (keys stay unique and
  // keep their first position). An empty key is a minfer::Error. general.alignment must be set
  // with set_u32 to a power of two in [1, kMaxAlignment] (minfer::Error otherwise); it sets the
  // alignment of the data section and of every tensor (default kDefaultAlignment, not written).
  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_string_array(std::string_view key, std::span<const std::string_view> v);
  void set_string_array(std::string_view key, const std::vector<std::string>& v);
  void set_i32_array(std::string_view key, std::span<const int32_t> v);
  void set_f32_array(std::string_view key, std::span<const float> v);
  /// Copies a value (any type, arrays of any element type included), e.g. one read from another
  /// file. The value's views (str, strings, elems) are copied now, so they need not outlive
  /// this call. Arrays of arrays and undefined types are a minfer::Error.
  void set_value(std::string_view key, const Value& v);
  void remove(std::string_view key);
  size_t kv_count() const { return kvs_.size(); }

  /// Adds a tensor. `ne` in ggml order (ne[0] contiguous), 1..4 dims, each > 0; n_dims is
  /// written as ne.size(). The byte size is computed from the type's block layout; ne[0] must be
  /// a multiple of the block size. The name must be 1..kMaxTensorNameBytes bytes and unique.
  /// Any violation is a minfer::Error naming the tensor and the bad value.
  void add_tensor(std::string_view name, TensorType type, std::span<const int64_t> ne,
                  Producer producer);
  /// Convenience for small tensors: copies `bytes` now and writes them as the tensor's data
  /// (bytes.size() must equal the tensor's byte size, minfer::Error otherwise).
  void add_tensor_bytes(std::string_view name, TensorType type, std::span<const int64_t> ne,
                        std::span<const uint8_t> bytes);
  size_t tensor_count() const { return tensors_.size(); }

  /// Writes the file. `on_tensor(index, name, nbytes)` is called after each tensor's data is
  /// written (for progress). Tensor data is laid out in add order, each tensor at a multiple of
  /// the alignment and padded with zeros to the next one (llama.cpp's layout, which its reader
  /// requires). A file without tensors ends right after the metadata (no padding, as gguf-py
  /// writes vocab-only files). Memory: the metadata plus one buffer of the largest tensor's
  /// size. Throws minfer::Error naming the path on I/O failure; an exception from a producer
  /// propagates. In both cases the temporary file is removed and `path` is left untouched; the
  /// same holds when SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGXFSZ ends the process during the write
  /// (RemoveOnSignal). An existing `path` that is not a regular file (folder, device, pipe) or
  /// that is not writable is refused up front; a replaced file keeps its permission bits.
  void write(const std::string& path,
             const std::function<void(size_t, std::string_view, uint64_t)>& on_tensor = {}) const;

  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    Producer producer;
  };
  struct PendingKV {
    std::string key;
    ValueType type;
    std::vector<uint8_t> payload;  ///< serialized value (without the key and type tag)
  };

 private:
  void put(std::string_view key, ValueType type, std::vector<uint8_t> payload);
  std::vector<PendingKV> kvs_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace minfer::gguf
