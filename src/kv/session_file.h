// KV session files: a sequence's KV state kept as a versioned, checksummed file (never a memory
// dump). This header is the format alone: encode() writes the bytes, decode() checks every byte
// of them into host memory. The engine (Engine::save_sequence / restore_sequence) supplies and
// commits the rows. Byte-level layout: docs/session-format.md; the decision: docs/adr/0006-kv-session-files.md.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace minfer::kv {

/// "MINFERKV": the first 8 bytes of a session file.
inline constexpr char kSessionMagic[8] = {'M', 'I', 'N', 'F', 'E', 'R', 'K', 'V'};
/// The format version this build writes and reads.
inline constexpr uint32_t kSessionVersion = 1;

/// What identifies a model to a session file: a session restores only into a model whose
/// fingerprint is equal. `hash` is XXH64 of the architecture, hyper-parameters, every tensor's
/// name, type and shape, and the tokenizer (model_fingerprint in engine.cpp); the other fields
/// are there to name the difference in an error.
struct ModelFingerprint {
  uint64_t hash = 0;
  std::string arch;   ///< "qwen2", "qwen3"
  std::string name;   ///< general.name ("" when absent)
  uint32_t n_layer = 0, kv_dim = 0, n_vocab = 0;
};

/// One sequence of a session: its cells' positions (strictly increasing) and the token each holds.
struct SessionSequence {
  int32_t seq = 0;
  std::vector<int32_t> positions;
  std::vector<int32_t> tokens;
};

/// A decoded (or to-be-encoded) session: `rows[layer]` holds the K rows of every sequence's
/// cells (sequences in order, cells in position order), then their V rows, each
/// row_bytes(kv_type, kv_dim) bytes.
struct SessionData {
  ModelFingerprint model;
  TensorType kv_type = TensorType::F32;
  std::vector<SessionSequence> seqs;
  std::vector<std::vector<uint8_t>> rows;

  /// Cells in all sequences.
  uint64_t n_cells() const;
};

/// Cells in all of `seqs`.
uint64_t count_cells(std::span<const SessionSequence> seqs);

/// Encodes a session. Throws minfer::Error when the parts disagree (rows of the wrong size,
/// positions and tokens of different lengths).
std::vector<uint8_t> encode_session(const SessionData& s);

// ---- piece by piece, for writers that stream the rows (Engine::save_sequence_file) ----
/// The bytes of a session before its first rows section: the file header, the model section and
/// the sequences section. Throws minfer::Error when a sequence's positions and tokens differ in
/// length. encode_session() is this, then one rows section per layer.
std::vector<uint8_t> encode_session_head(const ModelFingerprint& model, TensorType kv_type,
                                         std::span<const SessionSequence> seqs);
/// The framing of one rows section (KVRW) around its rows: `before` (tag, reserved, length,
/// layer index, reserved: 24 bytes) and `after` (the section's XXH64: 8 bytes). The section is
/// before + rows + after; `rows` are the K rows then the V rows of the layer's cells.
struct RowsFrame {
  std::array<uint8_t, 24> before{};
  std::array<uint8_t, 8> after{};
};
/// Computes the frame (and so the checksum, one pass over `rows`) of layer `layer`'s section.
RowsFrame rows_section_frame(uint32_t layer, std::span<const uint8_t> rows);

/// A decoded session whose rows are spans into the decoded bytes (no copy of the rows): valid
/// while those bytes are. `rows[layer]` as in SessionData.
struct SessionView {
  ModelFingerprint model;
  TensorType kv_type = TensorType::F32;
  std::vector<SessionSequence> seqs;
  std::vector<std::span<const uint8_t>> rows;
};

/// Limits decode_session_view() checks beside the format itself.
struct SessionLimits {
  int64_t n_ctx = 0;     ///< most cells the sessions's sequences may hold together
  int64_t n_vocab = 0;   ///< token ids must be in [0, n_vocab)
  int32_t max_seq = 64;  ///< sequence ids must be in [0, max_seq)
};

/// Decodes and checks `bytes` (a session file's contents; `name` is the file for messages)
/// against `expect` (the loading model) and `limits`, without copying the rows (the view's rows
/// point into `bytes`). Throws minfer::Error with ONE line "<name>: <reason>" on: bad magic,
/// another version, a nonzero reserved field, a checksum mismatch (any flipped byte), truncation
/// or trailing bytes, another model, a KV type other than f32/f16/q8_0, a geometry other than the
/// model's, more cells than limits.n_ctx, a token id outside the vocabulary, positions not
/// strictly increasing, a sequence id out of range or repeated. Every checksum is verified before
/// it returns; the rows sections' are computed on up to 8 threads when the rows are large (16 MiB
/// or more), and the error reported is still that of the first damaged section in file order.
/// Nothing is allocated beyond what the bytes themselves hold.
SessionView decode_session_view(std::span<const uint8_t> bytes, std::string_view name, const ModelFingerprint& expect,
                                const SessionLimits& limits);

/// Converts rows of `kv_dim` elements from `from` to `to` (f32, f16, q8_0; through f32, with the
/// reference quantizer). Same type: a copy.
std::vector<uint8_t> convert_kv_rows(std::span<const uint8_t> rows, TensorType from, TensorType to, int64_t kv_dim);

/// Largest valid session file for a model of `n_layer` layers and rows of `row_bytes` bytes
/// holding at most `n_cells` cells in `n_seq` sequences (a file above it is refused unread).
uint64_t max_session_bytes(int64_t n_layer, uint64_t row_bytes, int64_t n_cells, int64_t n_seq);

}  // namespace minfer::kv
