// In a build without the CUDA backend, asking for the device is a one-line error (and the
// device suites in this folder compile to nothing).
#ifndef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include "../gguf_test_util.h"
#include "engine/engine.h"

namespace minfer {
namespace {

TEST(CudaBuild, DeviceCudaInACpuOnlyBuildIsAOneLineError) {
  const std::string msg = test::error_of([] { create_backend(graph::BackendKind::Cuda, 1); });
  EXPECT_CONTAINS(msg, "built without CUDA");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
