// Thread-local scratch memory for the SIMD kernels. It lives in a file compiled without SIMD
// flags on purpose: a *_avx2.cpp / *_avx512.cpp file that instantiated a std:: template (say
// std::vector<float>::resize) would emit a weak copy of it compiled for AVX2 / AVX-512, and the
// linker may keep that copy for the whole program, which would then fault on a CPU without those
// instructions. So the SIMD files take their buffers from here and instantiate no out-of-line
// std:: code (checked with `nm -C` on their objects: only names in namespaces avx2 / avx512).
#pragma once

#include <cstddef>

namespace minfer::cpu::simd {

/// The buffers, one per use; a kernel owns its slot while it runs.
enum class ScratchSlot { kActRow, kActRows, kActPack, kPanel, kPackedActData, kPackedActs, kLanes, kRows, kCount };

/// A 64-byte aligned buffer of at least `bytes` bytes, private to the calling thread and slot.
/// Valid until the next call for the same slot on the same thread (which may move it); contents
/// are not preserved across calls.
void* scratch(ScratchSlot slot, size_t bytes);

}  // namespace minfer::cpu::simd
