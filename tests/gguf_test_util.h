// Helpers for the GGUF tests: write a file with the writer and read its bytes back, locate a
// field by searching for a unique string, patch bytes, and capture the reader's error message.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace minfer::test {

/// Writes `w` to `<temp_dir>/<name>` (temp_dir() is reset per test: call once per test).
inline std::filesystem::path write_gguf(const gguf::GgufWriter& w,
                                        const std::filesystem::path& dir,
                                        const std::string& name = "t.gguf") {
  const auto path = dir / name;
  w.write(path.string());
  return path;
}

/// Offset of the first occurrence of `s` in `bytes`; fails the test when absent.
inline size_t find_bytes(const std::vector<uint8_t>& bytes, std::string_view s) {
  const auto it = std::search(bytes.begin(), bytes.end(), s.begin(), s.end());
  EXPECT_NE(it, bytes.end()) << "'" << s << "' not found in the image";
  return it == bytes.end() ? 0 : static_cast<size_t>(it - bytes.begin());
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t pos, T v) {
  ASSERT_LE(pos + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + pos, &v, sizeof(T));
}

template <typename T>
T peek(const std::vector<uint8_t>& bytes, size_t pos) {
  T v{};
  if (pos + sizeof(T) <= bytes.size()) std::memcpy(&v, bytes.data() + pos, sizeof(T));
  return v;
}

/// The message of the minfer::Error that `fn()` throws; "" and a test failure when it throws
/// nothing or another exception.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected minfer::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a minfer::Error, but nothing was thrown";
  return "";
}

/// The minfer::Error message open_memory throws for `bytes` (named `name`).
inline std::string open_error(const std::vector<uint8_t>& bytes,
                              const std::string& name = "bad.gguf") {
  return error_of([&] { gguf::GgufFile::open_memory(bytes, name); });
}

/// Where the fields of one tensor-info row start, found from its (unique) name.
struct TensorInfoPos {
  size_t name;    ///< first byte of the name (its u64 length is 8 bytes before)
  size_t n_dims;  ///< u32
  size_t ne;      ///< n_dims x i64
  size_t type;    ///< u32
  size_t offset;  ///< u64
};

/// Locates the info row of tensor `name` in a file image. The name must occur first in the
/// tensor-info table (not in a metadata string).
inline TensorInfoPos tensor_info_pos(const std::vector<uint8_t>& bytes, std::string_view name) {
  TensorInfoPos p{};
  p.name = find_bytes(bytes, name);
  p.n_dims = p.name + name.size();
  const uint32_t n_dims = peek<uint32_t>(bytes, p.n_dims);
  p.ne = p.n_dims + 4;
  p.type = p.ne + 8 * size_t{n_dims};
  p.offset = p.type + 4;
  return p;
}

}  // namespace minfer::test

/// EXPECT that `hay` (a std::string) contains `needle`, printing both otherwise.
#define EXPECT_CONTAINS(hay, needle)                                                   \
  EXPECT_NE(std::string(hay).find(needle), std::string::npos)                          \
      << "expected to find \"" << (needle) << "\" in: " << (hay)
