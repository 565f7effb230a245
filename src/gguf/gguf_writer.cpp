// GGUF v3 writer. Layout (GGUF spec; llama.cpp 80fb11ac ggml/src/gguf.cpp gguf_write_out):
// magic, version 3, tensor_count, kv_count, the KVs, the tensor infos, zero padding to the
// alignment, then each tensor's data followed by zero padding to the alignment.
#include "gguf/gguf_writer.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/env.h"
#include "core/error.h"
#include "core/atomic_file.h"
#include "quant/quant.h"

namespace minfer::gguf {
namespace {

template <typename T>
void append(std::vector<uint8_t>& out, T v) {
  // resize + memcpy: g++ 12 misreports vector::insert of a small array (-Wstringop-overflow).
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void append_string(std::vector<uint8_t>& out, std::string_view s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <typename T>
std::vector<uint8_t> scalar_payload(T v) {
  std::vector<uint8_t> p;
  append(p, v);
  return p;
}

std::vector<uint8_t> array_header(ValueType elem, uint64_t count) {
  std::vector<uint8_t> p;
  append<uint32_t>(p, static_cast<uint32_t>(elem));
  append<uint64_t>(p, count);
  return p;
}

using TmpFile = AtomicFile;

// MINFER_TEST_WRITE_SIGNAL: a signal in the middle of a write, at a known point, for the test
// that a killed write leaves no temporary file (tests/test_gguf_write_signal.cpp).
void raise_test_signal() {
  const int64_t sig = env_int("MINFER_TEST_WRITE_SIGNAL", 0);
  if (sig > 0 && sig < NSIG) ::raise(static_cast<int>(sig));
}

uint64_t padded(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

void GgufWriter::put(std::string_view key, ValueType type, std::vector<uint8_t> payload) {
  MINFER_CHECK(!key.empty(), "GGUF writer: empty metadata key");
  if (key == "general.alignment") {
    MINFER_CHECK(type == ValueType::U32, "GGUF writer: metadata key 'general.alignment' must be u32, got {}",
          value_type_name(type));
    uint32_t a = 0;
    std::memcpy(&a, payload.data(), 4);
    MINFER_CHECK(a != 0 && (a & (a - 1)) == 0 && a <= kMaxAlignment,
          "GGUF writer: general.alignment = {} is not a power of two in [1, {}]", a, kMaxAlignment);
  }
  for (PendingKV& kv : kvs_) {
    if (kv.key == key) {
      kv.type = type;
      kv.payload = std::move(payload);
      return;
    }
  }
  kvs_.push_back(PendingKV{std::string(key), type, std::move(payload)});
}

void GgufWriter::set_u8(std::string_view key, uint8_t v) { put(key, ValueType::U8, scalar_payload(v)); }
void GgufWriter::set_i8(std::string_view key, int8_t v) { put(key, ValueType::I8, scalar_payload(v)); }
void GgufWriter::set_u16(std::string_view key, uint16_t v) { put(key, ValueType::U16, scalar_payload(v)); }
void GgufWriter::set_i16(std::string_view key, int16_t v) { put(key, ValueType::I16, scalar_payload(v)); }
void GgufWriter::set_u32(std::string_view key, uint32_t v) { put(key, ValueType::U32, scalar_payload(v)); }
void GgufWriter::set_i32(std::string_view key, int32_t v) { put(key, ValueType::I32, scalar_payload(v)); }
void GgufWriter::set_u64(std::string_view key, uint64_t v) { put(key, ValueType::U64, scalar_payload(v)); }
void GgufWriter::set_i64(std::string_view key, int64_t v) { put(key, ValueType::I64, scalar_payload(v)); }
void GgufWriter::set_f32(std::string_view key, float v) { put(key, ValueType::F32, scalar_payload(v)); }
void GgufWriter::set_f64(std::string_view key, double v) { put(key, ValueType::F64, scalar_payload(v)); }
void GgufWriter::set_bool(std::string_view key, bool v) {
  put(key, ValueType::BOOL, scalar_payload<uint8_t>(v ? 1 : 0));
}

void GgufWriter::set_string(std::string_view key, std::string_view v) {
  std::vector<uint8_t> p;
  append_string(p, v);
  put(key, ValueType::STRING, std::move(p));
}

void GgufWriter::set_string_array(std::string_view key, std::span<const std::string_view> v) {
  std::vector<uint8_t> p = array_header(ValueType::STRING, v.size());
  for (std::string_view s : v) append_string(p, s);
  put(key, ValueType::ARRAY, std::move(p));
}

void GgufWriter::set_string_array(std::string_view key, const std::vector<std::string>& v) {
  std::vector<uint8_t> p = array_header(ValueType::STRING, v.size());
  for (const std::string& s : v) append_string(p, s);
  put(key, ValueType::ARRAY, std::move(p));
}

void GgufWriter::set_i32_array(std::string_view key, std::span<const int32_t> v) {
  std::vector<uint8_t> p = array_header(ValueType::I32, v.size());
  for (int32_t x : v) append(p, x);
  put(key, ValueType::ARRAY, std::move(p));
}

void GgufWriter::set_f32_array(std::string_view key, std::span<const float> v) {
  std::vector<uint8_t> p = array_header(ValueType::F32, v.size());
  for (float x : v) append(p, x);
  put(key, ValueType::ARRAY, std::move(p));
}

void GgufWriter::set_value(std::string_view key, const Value& v) {
  std::vector<uint8_t> p;
  switch (v.type) {
    case ValueType::U8: append<uint8_t>(p, static_cast<uint8_t>(v.u)); break;
    case ValueType::I8: append<int8_t>(p, static_cast<int8_t>(v.i)); break;
    case ValueType::U16: append<uint16_t>(p, static_cast<uint16_t>(v.u)); break;
    case ValueType::I16: append<int16_t>(p, static_cast<int16_t>(v.i)); break;
    case ValueType::U32: append<uint32_t>(p, static_cast<uint32_t>(v.u)); break;
    case ValueType::I32: append<int32_t>(p, static_cast<int32_t>(v.i)); break;
    case ValueType::U64: append<uint64_t>(p, v.u); break;
    case ValueType::I64: append<int64_t>(p, v.i); break;
    case ValueType::F32: append<float>(p, static_cast<float>(v.f)); break;
    case ValueType::F64: append<double>(p, v.f); break;
    case ValueType::BOOL: append<uint8_t>(p, v.u ? 1 : 0); break;
    case ValueType::STRING: append_string(p, v.str); break;
    case ValueType::ARRAY: {
      if (v.elem_type == ValueType::STRING) {
        MINFER_CHECK(v.strings.size() == v.count,
              "GGUF writer: key '{}': string array count {} but {} strings", key, v.count,
              v.strings.size());
        p = array_header(ValueType::STRING, v.count);
        for (std::string_view s : v.strings) append_string(p, s);
        break;
      }
      const size_t esize = value_type_size(v.elem_type);
      MINFER_CHECK(esize != 0, "GGUF writer: key '{}': unsupported array element type {}", key,
            value_type_name(v.elem_type));
      MINFER_CHECK(v.count == 0 || v.elems != nullptr, "GGUF writer: key '{}': array has no elements",
            key);
      p = array_header(v.elem_type, v.count);
      if (v.count) p.insert(p.end(), v.elems, v.elems + v.count * esize);
      break;
    }
    default:
      fail("GGUF writer: key '{}': undefined value type {}", key, static_cast<uint32_t>(v.type));
  }
  put(key, v.type, std::move(p));
}

void GgufWriter::remove(std::string_view key) {
  std::erase_if(kvs_, [&](const PendingKV& kv) { return kv.key == key; });
}

void GgufWriter::add_tensor(std::string_view name, TensorType type, std::span<const int64_t> ne,
                            Producer producer) {
  MINFER_CHECK(!name.empty() && name.size() <= kMaxTensorNameBytes,
        "GGUF writer: tensor name '{}' is {} bytes (must be 1..{}, ggml's GGML_MAX_NAME)", name,
        name.size(), kMaxTensorNameBytes);
  for (const PendingTensor& t : tensors_)
    MINFER_CHECK(t.name != name, "GGUF writer: duplicate tensor name '{}'", name);
  MINFER_CHECK(!ne.empty() && ne.size() <= 4, "GGUF writer: tensor '{}' has {} dimensions (must be 1..4)",
        name, ne.size());
  int64_t block_size = 0;
  size_t block_bytes = 0;
  MINFER_CHECK(type_block_layout(type, &block_size, &block_bytes),
        "GGUF writer: tensor '{}' has unknown type {}", name, type_name(type));
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    MINFER_CHECK(ne[d] > 0, "GGUF writer: tensor '{}' dimension {} is {} (must be positive)", name, d,
          ne[d]);
    MINFER_CHECK(!__builtin_mul_overflow(n, ne[d], &n),
          "GGUF writer: tensor '{}' has more elements than fit in int64", name);
  }
  MINFER_CHECK(ne[0] % block_size == 0,
        "GGUF writer: tensor '{}' of type {} has ne[0] = {}, not a multiple of the block size {}",
        name, type_name(type), ne[0], block_size);
  uint64_t nbytes = 0;
  MINFER_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(n / block_size), block_bytes, &nbytes),
        "GGUF writer: tensor '{}' byte size overflows", name);
  MINFER_CHECK(static_cast<bool>(producer), "GGUF writer: tensor '{}' has no data producer", name);
  tensors_.push_back(PendingTensor{std::string(name), type, std::vector<int64_t>(ne.begin(), ne.end()),
                                   nbytes, std::move(producer)});
}

void GgufWriter::add_tensor_bytes(std::string_view name, TensorType type,
                                  std::span<const int64_t> ne, std::span<const uint8_t> bytes) {
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  const std::string tname(name);
  add_tensor(name, type, ne, [copy, tname](uint8_t* dst, size_t nbytes) {
    MINFER_CHECK(copy->size() == nbytes, "GGUF writer: tensor '{}' needs {} bytes, {} were given", tname,
          nbytes, copy->size());
    std::memcpy(dst, copy->data(), nbytes);
  });
  const PendingTensor& t = tensors_.back();
  if (t.nbytes != bytes.size()) {
    const uint64_t need = t.nbytes;
    tensors_.pop_back();
    fail("GGUF writer: tensor '{}' needs {} bytes, {} were given", name, need, bytes.size());
  }
}

void GgufWriter::write(const std::string& path,
                       const std::function<void(size_t, std::string_view, uint64_t)>& on_tensor) const {
  uint64_t alignment = kDefaultAlignment;
  for (const PendingKV& kv : kvs_) {
    if (kv.key == "general.alignment") {
      uint32_t a = 0;
      std::memcpy(&a, kv.payload.data(), 4);  // validated by put()
      alignment = a;
    }
  }

  std::vector<uint8_t> meta;
  meta.insert(meta.end(), {'G', 'G', 'U', 'F'});
  append<uint32_t>(meta, 3);
  append<uint64_t>(meta, tensors_.size());
  append<uint64_t>(meta, kvs_.size());
  for (const PendingKV& kv : kvs_) {
    append_string(meta, kv.key);
    append<uint32_t>(meta, static_cast<uint32_t>(kv.type));
    meta.insert(meta.end(), kv.payload.begin(), kv.payload.end());
  }
  uint64_t offset = 0;
  uint64_t max_bytes = 0;
  for (const PendingTensor& t : tensors_) {
    append_string(meta, t.name);
    append<uint32_t>(meta, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) append<int64_t>(meta, d);
    append<uint32_t>(meta, static_cast<uint32_t>(t.type));
    append<uint64_t>(meta, offset);
    MINFER_CHECK(!__builtin_add_overflow(offset, padded(t.nbytes, alignment), &offset),
          "GGUF writer: {}: the tensor data would exceed 2^64 bytes at tensor '{}'", path, t.name);
    max_bytes = std::max(max_bytes, t.nbytes);
  }

  TmpFile out(path);
  out.write(meta.data(), meta.size());
  // No tensors, no data section: nothing to align (gguf-py writes vocab-only files this way;
  // llama.cpp's reader does not look for padding when tensor_count is 0).
  if (!tensors_.empty()) out.pad_to(alignment);
  const uint64_t data_start = out.written();
  std::vector<uint8_t> buf(static_cast<size_t>(max_bytes));
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    MINFER_ASSERT(out.written() - data_start == expected_offset);  // matches the info table
    expected_offset += padded(t.nbytes, alignment);
    t.producer(buf.data(), static_cast<size_t>(t.nbytes));
    out.write(buf.data(), static_cast<size_t>(t.nbytes));
    out.pad_to(alignment);
    if (on_tensor) on_tensor(i, t.name, t.nbytes);
    if (i == 0) raise_test_signal();
  }
  out.commit();
}

}  // namespace minfer::gguf
