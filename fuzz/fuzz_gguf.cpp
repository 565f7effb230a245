// libFuzzer entry point for the GGUF reader. Any input must either open or throw minfer::Error;
// a crash, a sanitizer report, or any other exception (bad_alloc, length_error, ...) escaping
// is a finding. After a successful open, every value, getter and tensor byte range is touched
// so that a bad view into the image shows up under AddressSanitizer.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "gguf/gguf.h"

namespace {

using minfer::gguf::GgufFile;
using minfer::gguf::Value;
using minfer::gguf::ValueType;

volatile uint64_t g_sink;

void touch_value(const GgufFile& f, const std::string& key, const Value& v) {
  uint64_t acc = v.u + static_cast<uint64_t>(v.i) + v.str.size();
  if (!v.str.empty()) acc += static_cast<uint8_t>(v.str.front()) + static_cast<uint8_t>(v.str.back());
  if (v.type == ValueType::ARRAY) {
    if (v.elem_type == ValueType::STRING) {
      for (std::string_view s : v.strings)
        if (!s.empty()) acc += static_cast<uint8_t>(s.front()) + static_cast<uint8_t>(s.back());
    } else {
      for (uint64_t k = 0; k < v.count; ++k)
        acc += static_cast<uint64_t>(v.elem_i64(k)) + static_cast<uint64_t>(v.elem_f64(k) != 0.0);
    }
  }
  // Each getter either returns a value or throws minfer::Error (type mismatch / out of range).
  auto guarded = [&](auto&& fn) {
    try {
      fn();
    } catch (const minfer::Error&) {
    }
  };
  guarded([&] { acc += f.get_u32(key).value_or(0); });
  guarded([&] { acc += static_cast<uint64_t>(f.get_i64(key).value_or(0)); });
  guarded([&] { acc += static_cast<uint64_t>(f.get_f32(key).value_or(0.0f) != 0.0f); });
  guarded([&] { acc += f.get_bool(key).value_or(false); });
  guarded([&] { acc += f.get_string(key).value_or("").size(); });
  guarded([&] { acc += f.get_string_array(key).value_or(std::span<const std::string_view>{}).size(); });
  guarded([&] { acc += f.get_i32_array(key).value_or(std::vector<int32_t>{}).size(); });
  guarded([&] { acc += f.get_f32_array(key).value_or(std::vector<float>{}).size(); });
  g_sink = g_sink + acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::open_memory(std::span<const uint8_t>(data, size), "fuzz.gguf");
  } catch (const minfer::Error&) {
    return 0;
  }
  for (const auto& kv : f->metadata()) touch_value(*f, kv.key, kv.value);
  uint64_t acc = f->alignment() + f->data_offset();
  for (const auto& t : f->tensors()) {
    // The first and last byte of every tensor must lie inside the image.
    acc += t.data[0] + t.data[t.nbytes - 1] + static_cast<uint64_t>(t.n_elements());
    if (f->find_tensor(t.name) != &t) __builtin_trap();  // names are unique
  }
  g_sink = g_sink + acc;
  return 0;
}
