#include "core/read_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

#include "core/error.h"

namespace minfer {

std::string read_file_bytes(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("{} {}: cannot open ({})", what, path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{} {}: is a directory, not a file", what, path);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail("{} {}: cannot open ({})", what, path, std::strerror(errno));
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool bad = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (bad) fail("{} {}: read error ({})", what, path, std::strerror(err));
  return out;
}

}  // namespace minfer
