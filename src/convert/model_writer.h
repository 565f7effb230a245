// Writing a model file tensor by tensor: each tensor is either copied from bytes that already
// have the right type or encoded from f32 rows in parallel (row_encode.h), straight into the
// GGUF writer's buffer, so memory stays at one tensor. One progress bar (stderr, terminals
// only) counts elements over the whole file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "convert/row_encode.h"
#include "core/types.h"
#include "gguf/gguf_writer.h"

namespace minfer::convert {

/// One output tensor.
struct TensorJob {
  std::string name;
  std::vector<int64_t> ne;        ///< ggml order, ne[0] = row length
  TensorType type;                ///< type written
  RowSource rows;                 ///< f32 rows to encode (used when `raw` is empty)
  std::span<const uint8_t> raw;   ///< bytes already in `type`, copied verbatim when non-empty
  /// 0: every row comes from `rows`. D > 0: only rows 0..D-1 are encoded; each later row r is a
  /// copy of encoded row (SplitMix64(repeat_key, r) mod D) -- a file of real shape and row bytes
  /// written in the time of a copy (`minfer synth --distinct-rows`, for speed benchmarks).
  int64_t distinct_rows = 0;
  uint64_t repeat_key = 0;  ///< seeds the row order of `distinct_rows`
  /// Empty: no effect. Else one flag per row (ne[1] x ne[2] ... rows): flagged rows are written
  /// as zero bytes, after the encoding and the `distinct_rows` copies. Zero bytes decode to 0.0
  /// in every ggml type (the float types, and the block types' scales d = 0).
  std::vector<bool> zero_rows;
};

/// Adds `jobs` to `w` in order and writes `path`. Encoding runs on `n_threads` threads (0:
/// default_thread_count(); negative or above 1024: minfer::Error naming the count). `label`
/// heads the progress bar, drawn when `progress` is true and stderr is a terminal. Throws what
/// GgufWriter::add_tensor / write throw (the output path is then left untouched) and what
/// encode_rows throws, prefixed with the tensor name.
void write_model(gguf::GgufWriter& w, std::vector<TensorJob> jobs, const std::string& path,
                 int n_threads, bool progress, const std::string& label);

/// Throws minfer::Error "<output>: the output would overwrite the input <input>" when `output`
/// names the same file as `input` (same path, another spelling of it, a symlink or a hard link
/// to it). A missing output is fine.
void check_not_overwriting(const std::string& output, const std::string& input);

}  // namespace minfer::convert
