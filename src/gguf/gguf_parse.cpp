// GGUF parser: header, metadata key/values, tensor-info table, data-section layout.
//
// Format facts (GGUF spec, ggml/docs/gguf.md, and llama.cpp 80fb11ac ggml/src/gguf.cpp, whose
// acceptance rules we match or tighten):
//   u8[4] magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment | data section
// A string is { u64 length | bytes } (no NUL). An array is { u32 elem_type | u64 count | elems }.
// All values are little-endian (we reject big-endian v3 files through the version check).
//
// Every read is bounds-checked against the image before it happens, and every count is checked
// against the bytes that remain and against minfer's sanity limits (gguf.h) before anything is
// allocated for it, so a hostile header cannot make the parser allocate more than a small
// multiple of the bytes it actually parsed.
#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace minfer::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader uses the map in place and assumes a little-endian host");
static_assert(sizeof(size_t) == sizeof(uint64_t), "the GGUF reader assumes a 64-bit host");

namespace {

// Smallest possible encodings, used to reject counts the remaining bytes cannot hold before
// reserving memory for them. A KV: key length (8) + a 1-byte key + type (4) + a 1-byte value.
// A tensor info: name length (8) + 1-byte name + n_dims (4) + one dimension (8) + type (4) +
// offset (8).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

/// Capacity to reserve for `count` items read from the file. A count is only checked against
/// the bytes that remain, and a large file could pass that check with a count whose container
/// needs many times the file's size, so reserve at most `cap` up front and let the container
/// grow as items are actually read: memory then follows the bytes parsed, not the header.
size_t reserve_for(uint64_t count, size_t cap) {
  return static_cast<size_t>(std::min<uint64_t>(count, cap));
}

bool is_valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

std::string printable_magic(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t k = 0; k < n; ++k) {
    const char c = static_cast<char>(p[k]);
    if (p[k] >= 0x20 && p[k] < 0x7f)
      out += c;
    else
      out += fmt::format("\\x{:02x}", p[k]);
  }
  return out;
}

/// Bounds-checked reader over the image. `what` callables build the description of the field
/// being read (only on error, so the hot path formats nothing).
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size, const std::string& path)
      : base_(base), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename What>
  const uint8_t* take(uint64_t n, What&& what) {
    if (n > remaining())
      fail("{}: truncated file: {} needs {} bytes at offset {}, but only {} remain (file size {})",
           path_, what(), n, pos_, remaining(), size_);
    const uint8_t* p = base_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }

  template <typename T, typename What>
  T read(What&& what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }

  template <typename What>
  std::string_view read_string(What&& what) {
    const uint64_t len = read<uint64_t>([&] { return what() + " (string length)"; });
    if (len > remaining())
      fail("{}: truncated file: {} has string length {} at offset {}, but only {} bytes remain "
           "(file size {})",
           path_, what(), len, pos_ - 8, remaining(), size_);
    const uint8_t* p = take(len, what);
    return {reinterpret_cast<const char*>(p), static_cast<size_t>(len)};
  }

 private:
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

std::string quoted(std::string_view s) {
  // Keys and names come from the file: keep error lines single-line and bounded.
  std::string out = "'";
  for (size_t k = 0; k < s.size() && k < 80; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    out += (c >= 0x20 && c != 0x7f) ? static_cast<char>(c) : '?';
  }
  if (s.size() > 80) out += "...";
  return out + "'";
}

void read_scalar(Cursor& cur, ValueType type, Value& v, const std::string& path,
                 std::string_view key) {
  auto what = [&] { return fmt::format("value of key {}", quoted(key)); };
  switch (type) {
    case ValueType::U8: v.u = cur.read<uint8_t>(what); break;
    case ValueType::I8: v.i = cur.read<int8_t>(what); break;
    case ValueType::U16: v.u = cur.read<uint16_t>(what); break;
    case ValueType::I16: v.i = cur.read<int16_t>(what); break;
    case ValueType::U32: v.u = cur.read<uint32_t>(what); break;
    case ValueType::I32: v.i = cur.read<int32_t>(what); break;
    case ValueType::U64: v.u = cur.read<uint64_t>(what); break;
    case ValueType::I64: v.i = cur.read<int64_t>(what); break;
    case ValueType::F32: v.f = cur.read<float>(what); break;
    case ValueType::F64: v.f = cur.read<double>(what); break;
    case ValueType::BOOL: {
      const uint8_t b = cur.read<uint8_t>(what);
      MINFER_CHECK(b <= 1, "{}: metadata key {}: bool value is {} (must be 0 or 1)", path, quoted(key),
            b);
      v.u = b;
      break;
    }
    case ValueType::STRING: v.str = cur.read_string(what); break;
    case ValueType::ARRAY: MINFER_ASSERT(false); break;
  }
}

void read_array(Cursor& cur, Value& v, const std::string& path, std::string_view key,
                uint64_t* strings_left) {
  const uint32_t et = cur.read<uint32_t>(
      [&] { return fmt::format("element type of array key {}", quoted(key)); });
  MINFER_CHECK(is_valid_value_type(et), "{}: metadata key {}: unknown array element type {}", path,
        quoted(key), et);
  v.elem_type = static_cast<ValueType>(et);
  MINFER_CHECK(v.elem_type != ValueType::ARRAY,
        "{}: metadata key {}: arrays of arrays are not supported", path, quoted(key));
  v.count = cur.read<uint64_t>(
      [&] { return fmt::format("element count of array key {}", quoted(key)); });

  if (v.elem_type == ValueType::STRING) {
    // Each string takes at least its 8-byte length: reject impossible counts before reserving.
    MINFER_CHECK(v.count <= cur.remaining() / 8,
          "{}: metadata key {}: array of {} strings cannot fit in the {} bytes left in the file",
          path, quoted(key), v.count, cur.remaining());
    MINFER_CHECK(v.count <= *strings_left,
          "{}: metadata key {}: array of {} strings exceeds the limit of {} strings in all "
          "string arrays of a file",
          path, quoted(key), v.count, kMaxStringArrayElements);
    *strings_left -= v.count;
    v.strings.reserve(reserve_for(v.count, size_t{1} << 20));
    for (uint64_t k = 0; k < v.count; ++k)
      v.strings.push_back(cur.read_string(
          [&] { return fmt::format("element {} of string array key {}", k, quoted(key)); }));
    return;
  }
  const uint64_t esize = value_type_size(v.elem_type);
  MINFER_CHECK(v.count <= cur.remaining() / esize,
        "{}: metadata key {}: array of {} {} elements ({} bytes each) cannot fit in the {} bytes "
        "left in the file",
        path, quoted(key), v.count, value_type_name(v.elem_type), esize, cur.remaining());
  v.elems = cur.take(v.count * esize, [&] { return fmt::format("array key {}", quoted(key)); });
  if (v.elem_type == ValueType::BOOL) {
    for (uint64_t k = 0; k < v.count; ++k)
      if (v.elems[k] > 1)
        fail("{}: metadata key {}: bool element {} is {} (must be 0 or 1)", path, quoted(key), k,
             v.elems[k]);
  }
}

uint64_t align_up(uint64_t x, uint64_t alignment, bool* overflow) {
  const uint64_t rem = x % alignment;
  if (rem == 0) return x;
  uint64_t out = 0;
  *overflow = __builtin_add_overflow(x, alignment - rem, &out);
  return out;
}

}  // namespace

void GgufFile::parse() {
  const std::string& path = path_;
  Cursor cur(base_, size_, path);

  // ---- header ------------------------------------------------------------------------------
  MINFER_CHECK(size_ >= 4, "{}: not a GGUF file: {} bytes, too short for the magic", path, size_);
  MINFER_CHECK(std::memcmp(base_, "GGUF", 4) == 0, "{}: not a GGUF file: bad magic '{}' (expected 'GGUF')",
        path, printable_magic(base_, 4));
  cur.take(4, [] { return std::string("magic"); });
  version_ = cur.read<uint32_t>([] { return std::string("header (version)"); });
  if (version_ == 1)
    fail("{}: GGUF version 1 is not supported (only versions 2 and 3 are; re-convert the model)",
         path);
  if (version_ != 2 && version_ != 3) {
    // A big-endian v3 file reads as 0x03000000 (the check llama.cpp's gguf.cpp makes).
    if ((version_ & 0xFFFFu) == 0)
      fail("{}: unsupported GGUF version {} (0x{:08x}): a big-endian file? only little-endian "
           "versions 2 and 3 are supported",
           path, version_, version_);
    fail("{}: unsupported GGUF version {} (only versions 2 and 3 are supported)", path, version_);
  }
  const uint64_t n_tensors = cur.read<uint64_t>([] { return std::string("header (tensor_count)"); });
  const uint64_t n_kv = cur.read<uint64_t>([] { return std::string("header (kv_count)"); });
  MINFER_CHECK(n_kv <= cur.remaining() / kMinKvBytes,
        "{}: header kv_count {} is impossible: the {} bytes after the header hold at most {} "
        "key/values (truncated file or corrupt header)",
        path, n_kv, cur.remaining(), cur.remaining() / kMinKvBytes);
  MINFER_CHECK(n_tensors <= cur.remaining() / kMinTensorInfoBytes,
        "{}: header tensor_count {} is impossible: the {} bytes after the header hold at most {} "
        "tensor infos (truncated file or corrupt header)",
        path, n_tensors, cur.remaining(), cur.remaining() / kMinTensorInfoBytes);
  MINFER_CHECK(n_kv <= kMaxKeyValues, "{}: header kv_count {} exceeds the limit of {} key/values", path,
        n_kv, kMaxKeyValues);
  MINFER_CHECK(n_tensors <= kMaxTensors, "{}: header tensor_count {} exceeds the limit of {} tensors",
        path, n_tensors, kMaxTensors);

  // ---- metadata ----------------------------------------------------------------------------
  kvs_.reserve(reserve_for(n_kv, 4096));
  uint64_t strings_left = kMaxStringArrayElements;
  std::unordered_set<std::string_view> keys;
  keys.reserve(reserve_for(n_kv, 4096));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string_view key = cur.read_string([&] { return fmt::format("key #{}", i); });
    MINFER_CHECK(!key.empty(), "{}: metadata key #{} is empty", path, i);
    if (!keys.insert(key).second) fail("{}: duplicate metadata key {}", path, quoted(key));
    const uint32_t t = cur.read<uint32_t>(
        [&] { return fmt::format("value type of key {}", quoted(key)); });
    MINFER_CHECK(is_valid_value_type(t), "{}: metadata key {} has unknown value type {}", path,
          quoted(key), t);
    KeyValue kv;
    kv.key = std::string(key);
    kv.value.type = static_cast<ValueType>(t);
    if (kv.value.type == ValueType::ARRAY)
      read_array(cur, kv.value, path, key, &strings_left);
    else
      read_scalar(cur, kv.value.type, kv.value, path, key);
    kvs_.push_back(std::move(kv));
  }

  // general.alignment: u32 (llama.cpp's gguf.cpp rejects any other type), a nonzero power of
  // two, at most kMaxAlignment.
  if (const Value* a = find("general.alignment")) {
    MINFER_CHECK(a->type == ValueType::U32, "{}: metadata key 'general.alignment' has type {}, must be u32",
          path, value_type_name(a->type));
    MINFER_CHECK(a->u != 0 && (a->u & (a->u - 1)) == 0 && a->u <= kMaxAlignment,
          "{}: metadata key 'general.alignment' = {} is not a power of two in [1, {}]", path, a->u,
          kMaxAlignment);
    alignment_ = a->u;
  }

  // ---- tensor infos ------------------------------------------------------------------------
  tensors_.reserve(reserve_for(n_tensors, 4096));
  std::unordered_set<std::string_view> names;
  names.reserve(reserve_for(n_tensors, 4096));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string_view name =
        cur.read_string([&] { return fmt::format("name of tensor #{}", i); });
    MINFER_CHECK(!name.empty(), "{}: tensor #{} has an empty name", path, i);
    MINFER_CHECK(name.size() <= kMaxTensorNameBytes,
          "{}: tensor #{} name {} is {} bytes long (at most {}, ggml's GGML_MAX_NAME)", path, i,
          quoted(name), name.size(), kMaxTensorNameBytes);
    MINFER_CHECK(names.insert(name).second, "{}: duplicate tensor name {}", path, quoted(name));
    const std::string qname = quoted(name);
    auto field = [&](const char* f) { return [&, f] { return fmt::format("tensor {} ({})", qname, f); }; };

    TensorInfo ti;
    ti.name = std::string(name);
    ti.n_dims = cur.read<uint32_t>(field("n_dims"));
    MINFER_CHECK(ti.n_dims >= 1 && ti.n_dims <= 4, "{}: tensor {} has n_dims = {} (must be 1..4)", path,
          qname, ti.n_dims);
    for (uint32_t d = 0; d < ti.n_dims; ++d) {
      ti.ne[d] = cur.read<int64_t>(field("dimensions"));
      MINFER_CHECK(ti.ne[d] > 0, "{}: tensor {} dimension {} is {} (must be positive)", path, qname, d,
            ti.ne[d]);
    }
    const uint32_t type_id = cur.read<uint32_t>(field("type"));
    int64_t block_size = 0;
    size_t block_bytes = 0;
    MINFER_CHECK(is_known_type_id(type_id) &&
              type_block_layout(static_cast<TensorType>(type_id), &block_size, &block_bytes),
          "{}: tensor {} has unknown tensor type id {}", path, qname, type_id);
    ti.type = static_cast<TensorType>(type_id);
    MINFER_CHECK(ti.ne[0] % block_size == 0,
          "{}: tensor {} of type {} has ne[0] = {}, not a multiple of the block size {}", path,
          qname, type_name(ti.type), ti.ne[0], block_size);
    int64_t n_elem = 1;
    for (int d = 0; d < 4; ++d)
      MINFER_CHECK(!__builtin_mul_overflow(n_elem, ti.ne[d], &n_elem),
            "{}: tensor {} shape [{}, {}, {}, {}] has more elements than fit in int64", path, qname,
            ti.ne[0], ti.ne[1], ti.ne[2], ti.ne[3]);
    uint64_t nbytes = 0;
    const bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(n_elem / block_size),
                                                 static_cast<uint64_t>(block_bytes), &nbytes);
    MINFER_CHECK(!overflow && nbytes <= size_,
          "{}: tensor {} shape [{}, {}, {}, {}] of type {} needs more bytes than the whole file "
          "({} bytes): absurd dimensions",
          path, qname, ti.ne[0], ti.ne[1], ti.ne[2], ti.ne[3], type_name(ti.type), size_);
    ti.nbytes = nbytes;
    ti.offset = cur.read<uint64_t>(field("offset"));
    tensors_.push_back(std::move(ti));
  }

  // ---- data section ------------------------------------------------------------------------
  // Like llama.cpp's gguf.cpp: with tensors, the data section starts at the next multiple of
  // the alignment; with none, nothing follows the table.
  data_offset_ = cur.pos();
  if (n_tensors > 0) {
    bool overflow = false;
    data_offset_ = align_up(cur.pos(), alignment_, &overflow);
    MINFER_CHECK(!overflow && data_offset_ <= size_,
          "{}: truncated file: the data section would start at offset {} (alignment {}), past the "
          "end of the file (size {})",
          path, data_offset_, alignment_, size_);
  }
  // llama.cpp's gguf.cpp (gguf_init_from_reader) requires each tensor's offset to equal the sum
  // of the previous tensors' sizes, each padded to the alignment: tensors are packed in table
  // order, so no two can overlap and there are no gaps. We enforce the same rule.
  uint64_t expected = 0;
  const uint64_t data_size = size_ - data_offset_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorInfo& ti = tensors_[i];
    const std::string qname = quoted(ti.name);
    MINFER_CHECK(ti.offset % alignment_ == 0,
          "{}: tensor {} offset {} is misaligned (not a multiple of the alignment {})", path, qname,
          ti.offset, alignment_);
    if (ti.offset < expected)
      fail("{}: tensor {} at offset {} overlaps tensor {} (which ends at {}; expected offset {})",
           path, qname, ti.offset, quoted(tensors_[i - 1].name),
           tensors_[i - 1].offset + tensors_[i - 1].nbytes, expected);
    MINFER_CHECK(ti.offset == expected,
          "{}: tensor {} has offset {}, expected {} (tensors must be packed in table order, as "
          "llama.cpp requires)",
          path, qname, ti.offset, expected);
    MINFER_CHECK(ti.offset <= data_size && ti.nbytes <= data_size - ti.offset,
          "{}: tensor {} (offset {}, {} bytes) runs past the end of the file: the data section "
          "has {} bytes (file size {})",
          path, qname, ti.offset, ti.nbytes, data_size, size_);
    ti.data = base_ + data_offset_ + ti.offset;
    bool overflow = false;
    expected = align_up(ti.offset + ti.nbytes, alignment_, &overflow);
    MINFER_ASSERT(!overflow);  // offset + nbytes <= file size, far from 2^64
  }
}

}  // namespace minfer::gguf
