// GgufFile: opening (mmap or an in-memory copy), value helpers and the typed metadata getters.
// The parser itself is gguf_parse.cpp.
#include "gguf/gguf.h"

#include <cstring>
#include <limits>

#include "core/error.h"

namespace minfer::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  static thread_local std::string unknown;
  unknown = "type#" + std::to_string(static_cast<uint32_t>(t));
  return unknown;
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

namespace {

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// An integer as (negative?, magnitude-or-value) so any pair of integer types compares exactly.
struct AnyInt {
  bool negative = false;
  uint64_t u = 0;  // value when !negative
  int64_t i = 0;   // value when negative
};

AnyInt scalar_int(const Value& v) {
  AnyInt a;
  if (is_signed(v.type)) {
    a.negative = v.i < 0;
    a.i = v.i;
    a.u = a.negative ? 0 : static_cast<uint64_t>(v.i);
  } else {
    a.u = v.u;
  }
  return a;
}

AnyInt elem_int(const Value& v, uint64_t k) {
  AnyInt a;
  const uint8_t* p = v.elems + k * value_type_size(v.elem_type);
  int64_t s = 0;
  switch (v.elem_type) {
    case ValueType::U8: a.u = load<uint8_t>(p); return a;
    case ValueType::U16: a.u = load<uint16_t>(p); return a;
    case ValueType::U32: a.u = load<uint32_t>(p); return a;
    case ValueType::U64: a.u = load<uint64_t>(p); return a;
    case ValueType::I8: s = load<int8_t>(p); break;
    case ValueType::I16: s = load<int16_t>(p); break;
    case ValueType::I32: s = load<int32_t>(p); break;
    case ValueType::I64: s = load<int64_t>(p); break;
    default: MINFER_ASSERT(false);
  }
  a.negative = s < 0;
  a.i = s;
  a.u = a.negative ? 0 : static_cast<uint64_t>(s);
  return a;
}

template <typename T>
bool fits(const AnyInt& a, T* out) {
  if (a.negative) {
    if constexpr (std::is_signed_v<T>) {
      if (a.i < static_cast<int64_t>(std::numeric_limits<T>::min())) return false;
      *out = static_cast<T>(a.i);
      return true;
    }
    return false;
  }
  if (a.u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  *out = static_cast<T>(a.u);
  return true;
}

std::string int_text(const AnyInt& a) {
  return a.negative ? std::to_string(a.i) : std::to_string(a.u);
}

std::string type_text(const Value& v) {
  if (v.type != ValueType::ARRAY) return std::string(value_type_name(v.type));
  return fmt::format("array of {}", value_type_name(v.elem_type));
}

}  // namespace

double Value::elem_f64(uint64_t k) const {
  MINFER_ASSERT(type == ValueType::ARRAY && elems != nullptr && k < count);
  const uint8_t* p = elems + k * value_type_size(elem_type);
  switch (elem_type) {
    case ValueType::F32: return load<float>(p);
    case ValueType::F64: return load<double>(p);
    case ValueType::BOOL: return p[0];
    default: break;
  }
  const AnyInt a = elem_int(*this, k);
  return a.negative ? static_cast<double>(a.i) : static_cast<double>(a.u);
}

int64_t Value::elem_i64(uint64_t k) const {
  MINFER_ASSERT(type == ValueType::ARRAY && elems != nullptr && k < count);
  const uint8_t* p = elems + k * value_type_size(elem_type);
  switch (elem_type) {
    case ValueType::F32: case ValueType::F64: {
      // Truncate toward zero, saturating; NaN gives 0 (a plain cast would be undefined).
      const double d = elem_type == ValueType::F32 ? load<float>(p) : load<double>(p);
      if (!(d == d)) return 0;
      if (d >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
      if (d <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(d);
    }
    case ValueType::BOOL: return p[0];
    default: break;
  }
  const AnyInt a = elem_int(*this, k);
  // u64 values above INT64_MAX wrap; callers that care use the typed getters, which check.
  return a.negative ? a.i : static_cast<int64_t>(a.u);
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->map_.emplace(path);
  f->path_ = path;
  f->base_ = f->map_->data();
  f->size_ = f->map_->size();
  f->parse();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::open_memory(std::span<const uint8_t> bytes,
                                                const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->owned_.assign(bytes.begin(), bytes.end());
  f->path_ = name;
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  f->parse();
  return f;
}

const Value* GgufFile::find(std::string_view key) const {
  for (const KeyValue& kv : kvs_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

template <typename T>
std::optional<T> get_int(const GgufFile& f, std::string_view key, std::string_view target) {
  const Value* v = f.find(key);
  if (!v) return std::nullopt;
  MINFER_CHECK(is_integer(v->type), "{}: metadata key '{}' has type {}, expected an integer ({})",
        f.path(), key, type_text(*v), target);
  const AnyInt a = scalar_int(*v);
  T out{};
  MINFER_CHECK(fits(a, &out), "{}: metadata key '{}' = {} ({}) does not fit in {}", f.path(), key,
        int_text(a), value_type_name(v->type), target);
  return out;
}

const Value* find_typed(const GgufFile& f, std::string_view key, ValueType type,
                        std::string_view expected) {
  const Value* v = f.find(key);
  if (v)
    MINFER_CHECK(v->type == type, "{}: metadata key '{}' has type {}, expected {}", f.path(), key,
          type_text(*v), expected);
  return v;
}

const Value* find_array(const GgufFile& f, std::string_view key, bool (*elem_ok)(ValueType),
                        std::string_view expected) {
  const Value* v = f.find(key);
  if (v)
    MINFER_CHECK(v->type == ValueType::ARRAY && elem_ok(v->elem_type),
          "{}: metadata key '{}' has type {}, expected {}", f.path(), key, type_text(*v),
          expected);
  return v;
}

}  // namespace

std::optional<uint32_t> GgufFile::get_u32(std::string_view key) const {
  return get_int<uint32_t>(*this, key, "u32");
}

std::optional<int64_t> GgufFile::get_i64(std::string_view key) const {
  return get_int<int64_t>(*this, key, "i64");
}

std::optional<float> GgufFile::get_f32(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  MINFER_CHECK(v->type == ValueType::F32 || v->type == ValueType::F64,
        "{}: metadata key '{}' has type {}, expected f32 (or f64)", path(), key, type_text(*v));
  return static_cast<float>(v->f);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find_typed(*this, key, ValueType::BOOL, "bool");
  if (!v) return std::nullopt;
  return v->u != 0;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const Value* v = find_typed(*this, key, ValueType::STRING, "string");
  if (!v) return std::nullopt;
  return v->str;
}

std::optional<std::span<const std::string_view>> GgufFile::get_string_array(
    std::string_view key) const {
  const Value* v = find_array(
      *this, key, [](ValueType t) { return t == ValueType::STRING; }, "array of string");
  if (!v) return std::nullopt;
  return std::span<const std::string_view>(v->strings);
}

std::optional<std::vector<int32_t>> GgufFile::get_i32_array(std::string_view key) const {
  const Value* v = find_array(*this, key, is_integer, "array of integers");
  if (!v) return std::nullopt;
  std::vector<int32_t> out(static_cast<size_t>(v->count));
  for (uint64_t k = 0; k < v->count; ++k) {
    const AnyInt a = elem_int(*v, k);
    if (!fits(a, &out[k]))
      fail("{}: metadata key '{}' element {} = {} ({}) does not fit in i32", path(), key, k,
           int_text(a), value_type_name(v->elem_type));
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  const Value* v = find_array(
      *this, key, [](ValueType t) { return t == ValueType::F32 || t == ValueType::F64; },
      "array of f32 (or f64)");
  if (!v) return std::nullopt;
  std::vector<float> out(static_cast<size_t>(v->count));
  for (uint64_t k = 0; k < v->count; ++k) out[k] = static_cast<float>(v->elem_f64(k));
  return out;
}

uint32_t GgufFile::require_u32(std::string_view key) const {
  auto v = get_u32(key);
  MINFER_CHECK(v.has_value(), "{}: missing metadata key {}", path(), key);
  return *v;
}

float GgufFile::require_f32(std::string_view key) const {
  auto v = get_f32(key);
  MINFER_CHECK(v.has_value(), "{}: missing metadata key {}", path(), key);
  return *v;
}

std::string_view GgufFile::require_string(std::string_view key) const {
  auto v = get_string(key);
  MINFER_CHECK(v.has_value(), "{}: missing metadata key {}", path(), key);
  return *v;
}

}  // namespace minfer::gguf
