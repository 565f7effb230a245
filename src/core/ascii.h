// ASCII case folding for option values and names (device, KV type, output format, ...), which
// the command line accepts in any case.
#pragma once

#include <string>
#include <string_view>

namespace minfer {

/// `s` with 'A'..'Z' turned into 'a'..'z'; every other byte (UTF-8 included) unchanged.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace minfer
