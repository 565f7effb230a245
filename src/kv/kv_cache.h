// The KV cache of one engine: per layer a K region and a V region of n_ctx cells (rows of
// kv_dim elements in f32, f16 or q8_0), persistent buffers on the engine's backend, and the
// cell table saying which position each cell holds and which sequences see it (a cell may be
// shared by several sequences after seq_cp: one row, several readers). New tokens get cells
// from free runs; removing tokens leaves holes that compact() closes by moving rows.
//
// Sequence operations (llama.cpp's names): seq_rm = remove(), seq_cp, seq_keep, seq_add
// (positions only: Engine::seq_add also re-rotates the K rows). Sequence ids are 0..kMaxSeq-1.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "graph/backend.h"

namespace minfer {

/// Parses a KV format name: "f32", "f16", "q8_0", in any case. Throws minfer::Error naming the value.
TensorType parse_kv_type(std::string_view name);

class KvCache {
 public:
  /// Most sequences a cache tells apart (a cell's sequences are a 64-bit set).
  static constexpr int32_t kMaxSeq = 64;
  struct Cell {
    int32_t pos = -1;   ///< -1: empty
    uint64_t seqs = 0;  ///< bit s set: sequence s sees this cell (0 exactly when empty)
    bool has(int32_t seq) const { return seq >= 0 && seq < kMaxSeq && ((seqs >> seq) & 1u) != 0; }
  };
  /// A move of `count` consecutive cells' rows from `src` to `dst` (all layers, K and V).
  struct Move {
    int64_t src = 0, dst = 0, count = 0;
  };

  /// Allocates the regions on `backend`. Throws OutOfMemoryError when they do not fit, and
  /// minfer::Error for an unsupported type or kv_dim not a multiple of the type's block size.
  KvCache(graph::Backend& backend, int64_t n_layer, int64_t kv_dim, int64_t n_ctx, TensorType type);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_layer() const { return n_layer_; }
  int64_t kv_dim() const { return kv_dim_; }
  TensorType type() const { return type_; }
  /// Bytes of all regions (2 x n_layer x n_ctx rows).
  uint64_t bytes() const;

  /// Where region (layer, which = 0 K / 1 V) lives.
  graph::TensorRef region(int64_t layer, int32_t which) const;

  const std::vector<Cell>& cells() const { return cells_; }
  int64_t n_used() const;
  /// 1 + the highest occupied cell (0 when empty): the attention window must cover this.
  int64_t used_extent() const;

  /// Bytes of one K or V row (kv_dim elements of type()).
  uint64_t row_bytes() const { return row_bytes_; }

  /// Finds cells for tokens of `seq` at `positions` (contiguous run first, else the first free
  /// cells; only within the sequence's range when set_seq_cells gave it one), marks them used
  /// and returns their indices. Throws minfer::Error when fewer than positions.size() cells are
  /// free (in the range).
  std::vector<int32_t> allocate(int32_t seq, std::span<const int32_t> positions);

  /// Confines the cells allocate() gives `seq` (>= 0) to [begin, end) from now on (the server
  /// gives each slot its own range, so a token's cell, and with it the attention sums' order,
  /// does not depend on other sequences). Throws minfer::Error for a range outside [0, n_ctx)
  /// or empty. Cells the sequence already holds stay where they are.
  void set_seq_cells(int32_t seq, int64_t begin, int64_t end);

  /// [seq_rm] Takes the cells of `seq` (-1: every sequence) whose position is in [p0, p1) (p1 < 0:
  /// to the end) away from it; a cell no sequence sees any more is empty. Throws minfer::Error
  /// for a sequence id outside [-1, kMaxSeq).
  void remove(int32_t seq, int32_t p0, int32_t p1);
  /// [seq_cp] Makes the cells of `src` with positions in [p0, p1) (p1 < 0: to the end) visible
  /// to `dst` too: the rows are shared, nothing is copied. Cells `dst` held in that range are
  /// taken from it first. Throws minfer::Error for an id outside [0, kMaxSeq).
  void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  /// [seq_keep] Takes every cell away from every sequence but `seq`.
  void seq_keep(int32_t seq);
  /// [seq_add] Adds `delta` to the positions of the cells of `seq` in [p0, p1) (p1 < 0: to the
  /// end) and returns the indices of the cells whose position changed. Only the table changes:
  /// the K rows still carry the old rotation (Engine::seq_add re-rotates them). A cell whose new
  /// position would be negative is emptied (llama.cpp does the same). Throws minfer::Error when
  /// a changed cell is shared with another sequence (its position is one for all readers) or
  /// for an id outside [0, kMaxSeq).
  std::vector<int32_t> seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
  /// Cells of `seq` in position order.
  std::vector<int32_t> seq_cells(int32_t seq) const;
  void clear();
  /// Empties the given cells (undoes an allocate()).
  void release_cells(std::span<const int32_t> cells);

  /// Highest position held for `seq`, -1 when none. O(1) while the table is unchanged: the
  /// first call after a change recomputes every sequence's in one pass over the cells (a decode
  /// step of 64 sequences asks for each of them; one pass each cost milliseconds at 30k cells).
  int32_t seq_pos_max(int32_t seq) const;

  /// Plans the moves that pack the occupied cells to the front, keeping their order. Moves are
  /// runs; each goes to a lower index, and executing them in the returned order is safe even
  /// when a run overlaps its own destination (rows are copied in ascending order).
  std::vector<Move> plan_compaction() const;
  /// Executes plan_compaction() on the regions and the cell table. Returns the moves done.
  std::vector<Move> compact();

  /// Copies the rows of `cells` of region (layer, which) to `dst` (cells.size() x row_bytes()
  /// bytes, in the order given), by one download per run of consecutive cells.
  void read_rows(int64_t layer, int32_t which, std::span<const int32_t> cells, uint8_t* dst) const;
  /// Writes rows from `src` (same layout) into the cells of region (layer, which).
  void write_rows(int64_t layer, int32_t which, std::span<const int32_t> cells, const uint8_t* src);
  /// Sets the table entry of `cell` (sessions restore a table; nothing else should need it).
  void set_cell(int32_t cell, Cell c);

 private:
  graph::Backend& backend_;
  int64_t n_layer_, kv_dim_, n_ctx_;
  TensorType type_;
  uint64_t row_bytes_;
  std::vector<int32_t> buffers_;  ///< [layer * 2 + which]
  std::vector<Cell> cells_;
  /// seq_pos_max's answers for every sequence, valid while pos_max_valid_ (every change of
  /// cells_ clears it: touched()).
  mutable std::array<int32_t, kMaxSeq> pos_max_{};
  mutable bool pos_max_valid_ = false;
  void touched() { pos_max_valid_ = false; }
  struct SeqRange {
    int32_t seq;
    int64_t begin, end;
  };
  std::vector<SeqRange> ranges_;  ///< set_seq_cells
};

}  // namespace minfer
