// Opening and reading input files and streams with errors that name the source and the problem.
// Every read is bounded: an endless source (/dev/zero, `yes`, a pipe that never closes) ends with
// an error naming the source and the limit, never with an out-of-memory abort.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace minfer {

inline constexpr size_t kMiB = size_t{1} << 20;

/// The input limits of the command-line tools, in bytes (docs/architecture.md, "Input limits").
/// A prompt (run -f, run -p -): far above the text of any context (1M tokens are ~4 MiB).
inline constexpr size_t kPromptLimitBytes = 64 * kMiB;
/// Text to tokenize or score (tokenize, perplexity -f): big corpora, still bounded.
inline constexpr size_t kTextLimitBytes = 256 * kMiB;
/// One chat line: below the chat template's 8 MiB output limit, so an over-long message is named
/// as such and not blamed on the template.
inline constexpr size_t kChatLineLimitBytes = 1 * kMiB;
/// A chat template file or a tokenizer.json (the largest published tokenizer.json files are
/// ~35 MB).
inline constexpr size_t kSmallFileLimitBytes = 256 * kMiB;

/// "64 MiB" / "1 KiB" / "100 bytes": a limit for messages.
std::string format_limit(size_t bytes);

/// Opens `path` read-only (O_CLOEXEC) and returns the file descriptor, for a file that must be a
/// regular file (a model, a template, a vocabulary). The open does not block on a FIFO without a
/// writer or a device (O_NONBLOCK, cleared again before returning); the type is checked with
/// fstat on the open descriptor, so a path swapped between a check and the open cannot slip
/// through. Throws minfer::Error "<what><path>: <problem>" (`what` is a prefix such as
/// "prompt file " or empty) when the path cannot be opened (the OS reason), is a directory, or
/// is another non-regular file (FIFO, socket, device).
int open_regular_file(const std::string& path, std::string_view what);

/// Which kinds of file read_file_bytes accepts.
enum class FileKinds {
  kRegular,  ///< regular files only (open_regular_file)
  /// also pipes and character devices (`-f <(cmd)`, `-f /dev/stdin`); a named FIFO waits for its
  /// writer, like any reader of it. Directories are still refused.
  kStreams,
};

/// The bytes of the file `path` (any content; no newline conversion), at most `limit` bytes.
/// `what` names the file's role for messages ("prompt file", "--chat-template"). Throws
/// minfer::Error "<what> <path>: <problem>" when the path cannot be opened (the OS reason), is a
/// directory or a kind `kinds` does not accept, a read fails, or the file holds more than
/// `limit` bytes ("input is longer than the 64 MiB limit").
std::string read_file_bytes(const std::string& path, std::string_view what, size_t limit,
                            FileKinds kinds = FileKinds::kStreams);

/// Everything the descriptor `fd` delivers until end of file, at most `limit` bytes. `source`
/// names it in messages ("stdin (-p -)"). Throws minfer::Error "<source>: <problem>" on a read
/// error or when more than `limit` bytes come. Retries reads interrupted by a signal.
std::string read_fd_bytes(int fd, std::string_view source, size_t limit);

/// Reads a stream line by line, each line at most `limit` bytes (without its '\n'), for
/// interactive or piped input such as `minfer chat`'s stdin.
class LineReader {
 public:
  /// `source` names the stream in messages ("stdin"). The stream is not owned.
  LineReader(std::FILE* stream, std::string source, size_t limit)
      : stream_(stream), source_(std::move(source)), limit_(limit) {}

  /// The next line into `line` (without the '\n'; a last line without one counts). Returns false
  /// at end of input. Throws minfer::Error "<source> line <n>: longer than the 1 MiB limit" when a
  /// line exceeds the limit (the rest of the stream is not read), or "<source> line <n>: read
  /// error (<OS reason>)".
  bool next(std::string& line);
  /// 1-based number of the line next() returned last (0 before the first).
  size_t line_number() const { return line_no_; }

 private:
  std::FILE* stream_;
  std::string source_;
  size_t limit_;
  size_t line_no_ = 0;
};

}  // namespace minfer
