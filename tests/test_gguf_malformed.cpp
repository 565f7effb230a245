// Malformed GGUF files: one test per class of damage. Each writes a valid file with the writer,
// corrupts specific bytes or truncates it, and checks that the reader's one-line error names the
// file, the key or tensor, and the bad value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gguf_test_util.h"

namespace minfer::gguf {
namespace {

using test::find_bytes;
using test::open_error;
using test::peek;
using test::poke;
using test::tensor_info_pos;

constexpr size_t kVersionPos = 4;
constexpr size_t kTensorCountPos = 8;
constexpr size_t kKvCountPos = 16;

/// The valid base file: a few KVs (string, u32, string array, i32 array, bool) and three
/// tensors (f32 [8], q8_0 [32, 2], f32 [4]).
GgufWriter base_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "test");
  w.set_u32("kv.count_me", 5);
  w.set_string_array("kv.strings", std::vector<std::string>{"alpha", "beta"});
  w.set_i32_array("kv.ints", std::vector<int32_t>{1, 2, 3});
  w.set_bool("kv.flag", true);
  w.add_tensor_bytes("tensor.one", TensorType::F32, std::vector<int64_t>{8},
                     std::vector<uint8_t>(32, 1));
  w.add_tensor_bytes("tensor.two", TensorType::Q8_0, std::vector<int64_t>{32, 2},
                     std::vector<uint8_t>(68, 2));
  w.add_tensor_bytes("tensor.six", TensorType::F32, std::vector<int64_t>{4},
                     std::vector<uint8_t>(16, 3));
  return w;
}

std::vector<uint8_t> bytes_of(const GgufWriter& w) {
  return test::read_bytes(test::write_gguf(w, test::temp_dir()));
}

std::vector<uint8_t> base_bytes() { return bytes_of(base_writer()); }

/// Position of the value of a scalar key: after the key bytes and the u32 type tag.
size_t value_pos(const std::vector<uint8_t>& b, std::string_view key) {
  return find_bytes(b, key) + key.size() + 4;
}

TEST(GgufMalformed, BaseFileIsValid) {
  const auto b = base_bytes();
  const auto f = GgufFile::open_memory(b, "base.gguf");
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().size(), 5u);
  EXPECT_EQ(f->get_u32("kv.count_me"), 5u);
}

TEST(GgufMalformed, BadMagicIsAnErrorShowingTheBytesFound) {
  auto b = base_bytes();
  std::memcpy(b.data(), "GGML", 4);
  const std::string e = open_error(b);
  EXPECT_CONTAINS(e, "bad.gguf: ");
  EXPECT_CONTAINS(e, "bad magic 'GGML'");
  b[0] = 0x01;
  EXPECT_CONTAINS(open_error(b), "bad magic '\\x01GML'");
}

TEST(GgufMalformed, Version1And4AndBigEndianAreErrorsNamingTheVersion) {
  auto b = base_bytes();
  poke<uint32_t>(b, kVersionPos, 1);
  EXPECT_CONTAINS(open_error(b), "GGUF version 1 is not supported");
  poke<uint32_t>(b, kVersionPos, 4);
  EXPECT_CONTAINS(open_error(b), "unsupported GGUF version 4");
  poke<uint32_t>(b, kVersionPos, 0x03000000u);
  EXPECT_CONTAINS(open_error(b), "big-endian");
  poke<uint32_t>(b, kVersionPos, 2);  // v2 has the v3 layout: accepted
  EXPECT_EQ(GgufFile::open_memory(b, "v2.gguf")->version(), 2u);
}

TEST(GgufMalformed, TruncatedHeaderIsAnError) {
  auto b = base_bytes();
  b.resize(12);
  EXPECT_CONTAINS(open_error(b), "truncated file: header (tensor_count) needs 8 bytes at offset 8");
  b.resize(3);
  EXPECT_CONTAINS(open_error(b), "3 bytes, too short for the magic");
  b.clear();
  EXPECT_CONTAINS(open_error(b), "0 bytes");
}

TEST(GgufMalformed, StringValueRunningPastTheEndNamesTheKeyAndLength) {
  auto b = base_bytes();
  poke<uint64_t>(b, value_pos(b, "general.architecture"), 1000000);
  EXPECT_CONTAINS(open_error(b),
                  "value of key 'general.architecture' has string length 1000000");
}

TEST(GgufMalformed, KeyLengthRunningPastTheEndNamesTheKeyIndex) {
  auto b = base_bytes();
  poke<uint64_t>(b, find_bytes(b, "kv.count_me") - 8, uint64_t{1} << 62);
  EXPECT_CONTAINS(open_error(b), "key #1 has string length 4611686018427387904");
}

TEST(GgufMalformed, TruncationInsideAStringArrayNamesTheKeyAndElement) {
  auto b = base_bytes();
  b.resize(find_bytes(b, "beta") + 2);
  EXPECT_CONTAINS(open_error(b), "element 1 of string array key 'kv.strings'");
}

TEST(GgufMalformed, ImpossibleCountsFailFastNamingTheCount) {
  // Counts far beyond what the file could hold are rejected before anything is allocated.
  auto b = base_bytes();
  poke<uint64_t>(b, kKvCountPos, uint64_t{1} << 62);
  EXPECT_CONTAINS(open_error(b), "kv_count 4611686018427387904 is impossible");
  b = base_bytes();
  poke<uint64_t>(b, kTensorCountPos, uint64_t{1} << 40);
  EXPECT_CONTAINS(open_error(b), "tensor_count 1099511627776 is impossible");
  b = base_bytes();
  poke<uint64_t>(b, value_pos(b, "kv.ints") + 4, uint64_t{1} << 40);
  EXPECT_CONTAINS(open_error(b), "'kv.ints': array of 1099511627776 i32 elements");
  b = base_bytes();
  poke<uint64_t>(b, value_pos(b, "kv.strings") + 4, uint64_t{1} << 61);
  EXPECT_CONTAINS(open_error(b), "'kv.strings': array of 2305843009213693952 strings cannot fit");
  // The most elements a 400-byte file could hold is also too many once the rest is counted.
  b = base_bytes();
  poke<uint64_t>(b, value_pos(b, "kv.ints") + 4, b.size());
  EXPECT_CONTAINS(open_error(b), "'kv.ints'");
}

/// A sparse file of `size` bytes (zeros after `head`): large files without the disk use.
std::filesystem::path sparse_file(const std::vector<uint8_t>& head, uint64_t size) {
  const auto path = test::temp_dir() / "sparse.gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
  }
  std::filesystem::resize_file(path, size);
  return path;
}

std::string file_error(const std::filesystem::path& path) {
  return test::error_of([&] { GgufFile::open(path.string()); });
}

TEST(GgufMalformed, CountsAboveTheSanityLimitsAreErrorsEvenWhenTheFileIsLargeEnough) {
  // Zeros would parse as empty strings; the limits stop a large (here sparse) file from turning
  // into gigabytes of views.
  std::vector<uint8_t> head{'G', 'G', 'U', 'F', 3, 0, 0, 0};
  head.resize(24);
  poke<uint64_t>(head, kKvCountPos, kMaxKeyValues + 1);
  EXPECT_CONTAINS(file_error(sparse_file(head, 64u << 20)),
                  "kv_count 1048577 exceeds the limit of 1048576");
  poke<uint64_t>(head, kKvCountPos, 0);
  poke<uint64_t>(head, kTensorCountPos, kMaxTensors + 1);
  EXPECT_CONTAINS(file_error(sparse_file(head, 64u << 20)),
                  "tensor_count 1048577 exceeds the limit of 1048576");
  // One key "s" holding an array of 2^24 + 1 strings (the file could hold 2^24 + 1 empty ones).
  poke<uint64_t>(head, kTensorCountPos, 0);
  poke<uint64_t>(head, kKvCountPos, 1);
  const uint8_t kv[] = {1, 0, 0, 0, 0, 0, 0, 0, 's', 9, 0, 0, 0, 8, 0, 0, 0};
  head.insert(head.end(), std::begin(kv), std::end(kv));
  head.resize(head.size() + 8);
  poke<uint64_t>(head, head.size() - 8, kMaxStringArrayElements + 1);
  EXPECT_CONTAINS(file_error(sparse_file(head, 256u << 20)),
                  "key 's': array of 16777217 strings exceeds the limit of 16777216 strings");
}

TEST(GgufMalformed, TruncatedTensorInfoNamesTheTensor) {
  auto b = base_bytes();
  b.resize(tensor_info_pos(b, "tensor.two").ne + 4);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.two' (dimensions)");
  b = base_bytes();
  b.resize(tensor_info_pos(b, "tensor.six").name + 3);
  EXPECT_CONTAINS(open_error(b), "name of tensor #2");
}

TEST(GgufMalformed, UnknownValueTypesNameTheKeyAndTheType) {
  auto b = base_bytes();
  poke<uint32_t>(b, find_bytes(b, "kv.count_me") + 11, 13);
  EXPECT_CONTAINS(open_error(b), "'kv.count_me' has unknown value type 13");
  b = base_bytes();
  poke<uint32_t>(b, value_pos(b, "kv.ints"), 99);
  EXPECT_CONTAINS(open_error(b), "'kv.ints': unknown array element type 99");
  b = base_bytes();
  poke<uint32_t>(b, value_pos(b, "kv.ints"), static_cast<uint32_t>(ValueType::ARRAY));
  EXPECT_CONTAINS(open_error(b), "'kv.ints': arrays of arrays are not supported");
}

TEST(GgufMalformed, UnknownTensorTypeNamesTheTensorAndTheId) {
  auto b = base_bytes();
  const auto p = tensor_info_pos(b, "tensor.one");
  poke<uint32_t>(b, p.type, 4);  // Q4_2, removed from ggml
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.one' has unknown tensor type id 4");
  poke<uint32_t>(b, p.type, 1000);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.one' has unknown tensor type id 1000");
}

TEST(GgufMalformed, TensorRunningPastTheEndOfTheFileNamesTheTensor) {
  auto b = base_bytes();
  // The last tensor's 16 bytes are followed by 16 bytes of padding: cut one data byte.
  b.resize(b.size() - 17);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.six' (offset 128, 16 bytes) runs past the end");
  // Same through a file on disk: the message starts with the path.
  const auto path = test::write_gguf(base_writer(), test::temp_dir(), "cut.gguf");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 17);
  const std::string e = file_error(path);
  EXPECT_EQ(e.rfind(path.string() + ": ", 0), 0u) << e;
  EXPECT_CONTAINS(e, "'tensor.six'");
}

TEST(GgufMalformed, MisalignedOffsetIsAnError) {
  auto b = base_bytes();
  const auto p = tensor_info_pos(b, "tensor.two");
  poke<uint64_t>(b, p.offset, peek<uint64_t>(b, p.offset) + 1);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.two' offset 33 is misaligned");
}

TEST(GgufMalformed, OverlappingTensorsAreAnErrorNamingBoth) {
  auto b = base_bytes();
  poke<uint64_t>(b, tensor_info_pos(b, "tensor.two").offset, 0);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.two' at offset 0 overlaps tensor 'tensor.one'");
}

TEST(GgufMalformed, TensorsNotPackedInOrderAreAnError) {
  // llama.cpp requires offsets packed in table order; a gap is as wrong as an overlap.
  auto b = base_bytes();
  const auto p = tensor_info_pos(b, "tensor.six");
  poke<uint64_t>(b, p.offset, peek<uint64_t>(b, p.offset) + 32);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.six' has offset 160, expected 128");
}

TEST(GgufMalformed, DuplicateKeysAreAnErrorNamingTheKey) {
  GgufWriter w;
  w.set_u32("dup.a", 1);
  w.set_u32("dup.b", 2);
  auto b = bytes_of(w);
  b[find_bytes(b, "dup.b") + 4] = 'a';
  EXPECT_CONTAINS(open_error(b), "duplicate metadata key 'dup.a'");
}

TEST(GgufMalformed, DuplicateTensorNamesAreAnErrorNamingTheTensor) {
  auto b = base_bytes();
  std::memcpy(b.data() + find_bytes(b, "tensor.six") + 7, "one", 3);
  EXPECT_CONTAINS(open_error(b), "duplicate tensor name 'tensor.one'");
}

TEST(GgufMalformed, ZeroNegativeAndAbsurdDimensionsAreErrors) {
  auto b = base_bytes();
  const auto p = tensor_info_pos(b, "tensor.two");
  poke<int64_t>(b, p.ne + 8, 0);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.two' dimension 1 is 0");
  poke<int64_t>(b, p.ne + 8, -5);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.two' dimension 1 is -5");
  poke<int64_t>(b, p.ne + 8, int64_t{1} << 40);
  EXPECT_CONTAINS(open_error(b), "'tensor.two' shape [32, 1099511627776, 1, 1] of type q8_0 "
                                 "needs more bytes than the whole file");
  poke<int64_t>(b, p.ne + 8, int64_t{1} << 62);
  EXPECT_CONTAINS(open_error(b), "has more elements than fit in int64");
}

TEST(GgufMalformed, NDimsZeroOrAboveFourIsAnError) {
  auto b = base_bytes();
  const auto p = tensor_info_pos(b, "tensor.one");
  poke<uint32_t>(b, p.n_dims, 0);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.one' has n_dims = 0");
  poke<uint32_t>(b, p.n_dims, 5);
  EXPECT_CONTAINS(open_error(b), "tensor 'tensor.one' has n_dims = 5");
}

TEST(GgufMalformed, RowLengthNotAMultipleOfTheBlockSizeIsAnError) {
  auto b = base_bytes();
  poke<int64_t>(b, tensor_info_pos(b, "tensor.two").ne, 48);
  EXPECT_CONTAINS(open_error(b),
                  "tensor 'tensor.two' of type q8_0 has ne[0] = 48, not a multiple of the block "
                  "size 32");
}

TEST(GgufMalformed, GeneralAlignmentMustBeAU32PowerOfTwo) {
  // The writer refuses these, so write a look-alike key and rename it in the image.
  auto with_alignment = [](const std::function<void(GgufWriter&)>& set) {
    GgufWriter w;
    set(w);
    auto b = bytes_of(w);
    b[find_bytes(b, "general.alignmenX") + 16] = 't';
    return b;
  };
  EXPECT_CONTAINS(open_error(with_alignment([](GgufWriter& w) { w.set_u64("general.alignmenX", 32); })),
                  "'general.alignment' has type u64, must be u32");
  EXPECT_CONTAINS(open_error(with_alignment([](GgufWriter& w) { w.set_i32("general.alignmenX", 32); })),
                  "'general.alignment' has type i32, must be u32");
  EXPECT_CONTAINS(open_error(with_alignment([](GgufWriter& w) { w.set_u32("general.alignmenX", 48); })),
                  "'general.alignment' = 48 is not a power of two");
  EXPECT_CONTAINS(open_error(with_alignment([](GgufWriter& w) { w.set_u32("general.alignmenX", 0); })),
                  "'general.alignment' = 0 is not a power of two");
  EXPECT_CONTAINS(open_error(with_alignment(
                      [](GgufWriter& w) { w.set_u32("general.alignmenX", 1u << 30); })),
                  "'general.alignment' = 1073741824 is not a power of two in [1, 16777216]");
}

TEST(GgufMalformed, BoolOtherThanZeroOrOneIsAnError) {
  auto b = base_bytes();
  b[value_pos(b, "kv.flag")] = 2;
  EXPECT_CONTAINS(open_error(b), "'kv.flag': bool value is 2");
}

TEST(GgufMalformed, EmptyKeysAndBadTensorNamesAreErrors) {
  auto b = base_bytes();
  poke<uint64_t>(b, find_bytes(b, "general.architecture") - 8, 0);
  EXPECT_CONTAINS(open_error(b), "metadata key #0 is empty");
  b = base_bytes();
  poke<uint64_t>(b, find_bytes(b, "tensor.one") - 8, 0);
  EXPECT_CONTAINS(open_error(b), "tensor #0 has an empty name");
  // A 63-byte name is the longest ggml accepts; stretch one to 64 bytes.
  GgufWriter w;
  const std::string name63(63, 'n');
  w.add_tensor_bytes(name63, TensorType::I8, std::vector<int64_t>{1}, std::vector<uint8_t>{7});
  b = bytes_of(w);
  EXPECT_EQ(GgufFile::open_memory(b, "ok.gguf")->tensors()[0].name, name63);
  poke<uint64_t>(b, find_bytes(b, name63) - 8, 64);
  EXPECT_CONTAINS(open_error(b), "is 64 bytes long (at most 63");
}

TEST(GgufMalformed, EveryTruncationIsAnErrorUntilTheLastTensorIsComplete) {
  const auto b = base_bytes();
  const auto f = GgufFile::open_memory(b, "base.gguf");
  const TensorInfo& last = f->tensors().back();
  const size_t end_of_data = static_cast<size_t>(f->data_offset() + last.offset + last.nbytes);
  for (size_t n = 0; n < b.size(); ++n) {
    const std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    if (n < end_of_data) {
      EXPECT_FALSE(open_error(cut).empty()) << "prefix of " << n << " bytes";
    } else {
      EXPECT_NO_THROW(GgufFile::open_memory(cut, "padding-cut.gguf")) << n;
    }
  }
}

TEST(GgufMalformed, EverySingleByteCorruptionOpensOrThrowsMinferError) {
  // No corruption may crash or throw anything but minfer::Error (the fuzzer checks more).
  const auto b = base_bytes();
  for (size_t pos = 0; pos < b.size(); ++pos) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0x7f}, uint8_t{0xff}}) {
      auto c = b;
      c[pos] = value;
      try {
        GgufFile::open_memory(c, "flip.gguf");
      } catch (const Error&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << pos << " = " << int{value} << ": " << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace minfer::gguf
