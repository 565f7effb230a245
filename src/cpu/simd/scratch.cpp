#include "cpu/simd/scratch.h"

#include <array>
#include <cstdint>
#include <vector>

namespace minfer::cpu::simd {

void* scratch(ScratchSlot slot, size_t bytes) {
  thread_local std::array<std::vector<uint8_t>, static_cast<size_t>(ScratchSlot::kCount)> bufs;
  std::vector<uint8_t>& v = bufs[static_cast<size_t>(slot)];
  if (v.size() < bytes + 64) v.resize(bytes + 64);
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
}

}  // namespace minfer::cpu::simd
