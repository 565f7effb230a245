// Reading a whole (text) file into memory with errors that name the file and the problem.
#pragma once

#include <string>
#include <string_view>

namespace minfer {

/// The bytes of the regular file `path` (any content; no newline conversion). `what` names the
/// file's role for messages ("prompt file", "--chat-template"). Throws minfer::Error
/// "<what> <path>: <problem>" when the path does not exist, is a directory or another
/// non-regular file, cannot be opened (the OS reason) or a read fails.
std::string read_file_bytes(const std::string& path, std::string_view what);

}  // namespace minfer
