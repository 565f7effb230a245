#!/usr/bin/env bash
# What the device tool would transfer for a call that carries PATH...: the tracked files, the
# untracked files git does not ignore, and the carried paths, against the tool's 64 MiB limit
# (a call over it is refused before any machine starts, and a warm machine is lost meanwhile).
# Exits 1 when over.
#   scripts/carry_size.sh .device.tar.xz .carry
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((64 * 1024 * 1024))
# The tool counts the transfer as a tar stream: 512-byte headers and blocks, so many small files
# weigh more than their bytes (584 files: 64.18 MiB as tar, 63.76 MiB as bytes, refused).
tarsize() { tar -cf - --null -T - 2>/dev/null | wc -c; }
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | tarsize)
carried=0
for p in "$@"; do
  [[ -e $p ]] || { echo "carry_size: $p does not exist" >&2; exit 2; }
  carried=$((carried + $(printf '%s\0' "$p" | tarsize)))
done
total=$((tree + carried))
awk -v t="$tree" -v c="$carried" 'BEGIN { m = 1048576; printf "carry_size: tree %.1f MiB + carried %.1f MiB = %.2f MiB of 64 MiB\n", t / m, c / m, (t + c) / m }'
if ((total > limit)); then
  echo "carry_size: over the limit by $(( (total - limit) / 1024 )) KiB: carry less (BUNDLE_SMALL=1, the peer source only where a call builds it)" >&2
  exit 1
fi
