// Read-only memory map of a whole file (RAII). Model weights are used from the map, not copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace minfer {

class MappedFile {
 public:
  /// Maps `path` read-only. Throws minfer::Error naming the path and the OS error when the file
  /// cannot be opened, is not a regular file, or cannot be mapped. An empty file maps to
  /// data() == nullptr, size() == 0.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace minfer
