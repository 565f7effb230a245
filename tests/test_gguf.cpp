// GGUF writer -> reader round trips (every value type, arrays, string arrays, tensors, custom
// alignment), writer input checks, atomic writes, and the typed metadata getters.
#include <gtest/gtest.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>

#include "gguf_test_util.h"

namespace minfer::gguf {
namespace {

using test::write_gguf;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

template <typename T>
Value numeric_array(ValueType elem, const std::vector<T>& v) {
  Value a;
  a.type = ValueType::ARRAY;
  a.elem_type = elem;
  a.count = v.size();
  a.elems = reinterpret_cast<const uint8_t*>(v.data());
  return a;
}

TEST(GgufRoundTrip, EveryScalarValueTypeRoundTripsExactly) {
  GgufWriter w;
  w.set_u8("t.u8", 255);
  w.set_i8("t.i8", -128);
  w.set_u16("t.u16", 65535);
  w.set_i16("t.i16", -32768);
  w.set_u32("t.u32", 0xFFFFFFFFu);
  w.set_i32("t.i32", std::numeric_limits<int32_t>::min());
  w.set_u64("t.u64", std::numeric_limits<uint64_t>::max());
  w.set_i64("t.i64", std::numeric_limits<int64_t>::min());
  w.set_f32("t.f32", -1.5e-7f);
  w.set_f64("t.f64", 0.1);
  w.set_bool("t.true", true);
  w.set_bool("t.false", false);
  const std::string with_nul("h\xc3\xa9llo\n\0x", 9);
  w.set_string("t.str", with_nul);
  w.set_string("t.empty", "");
  const auto f = GgufFile::open(write_gguf(w, test::temp_dir()).string());

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  ASSERT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->metadata()[0].key, "t.u8");  // file order is set order
  EXPECT_EQ(f->metadata()[13].key, "t.empty");
  auto expect = [&](const char* key, ValueType type) {
    const Value* v = f->find(key);
    EXPECT_NE(v, nullptr) << key;
    if (v) {
      EXPECT_EQ(v->type, type) << key;
    }
    return v ? *v : Value{};
  };
  EXPECT_EQ(expect("t.u8", ValueType::U8).u, 255u);
  EXPECT_EQ(expect("t.i8", ValueType::I8).i, -128);
  EXPECT_EQ(expect("t.u16", ValueType::U16).u, 65535u);
  EXPECT_EQ(expect("t.i16", ValueType::I16).i, -32768);
  EXPECT_EQ(expect("t.u32", ValueType::U32).u, 0xFFFFFFFFu);
  EXPECT_EQ(expect("t.i32", ValueType::I32).i, std::numeric_limits<int32_t>::min());
  EXPECT_EQ(expect("t.u64", ValueType::U64).u, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(expect("t.i64", ValueType::I64).i, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(static_cast<float>(expect("t.f32", ValueType::F32).f), -1.5e-7f);
  EXPECT_EQ(expect("t.f64", ValueType::F64).f, 0.1);
  EXPECT_EQ(expect("t.true", ValueType::BOOL).u, 1u);
  EXPECT_EQ(expect("t.false", ValueType::BOOL).u, 0u);
  EXPECT_EQ(expect("t.str", ValueType::STRING).str, with_nul);
  EXPECT_EQ(expect("t.empty", ValueType::STRING).str, "");
}

TEST(GgufRoundTrip, ArraysOfEveryElementTypeRoundTripBitExact) {
  const std::vector<uint8_t> u8{0, 1, 255};
  const std::vector<int8_t> i8{-128, 0, 127};
  const std::vector<uint16_t> u16{0, 65535};
  const std::vector<int16_t> i16{-32768, 32767};
  const std::vector<uint32_t> u32{0, 0xFFFFFFFFu, 7};
  const std::vector<int32_t> i32{std::numeric_limits<int32_t>::min(), -1, 0};
  const std::vector<uint64_t> u64{0, std::numeric_limits<uint64_t>::max()};
  const std::vector<int64_t> i64{std::numeric_limits<int64_t>::min(), 42};
  const std::vector<float> f32{-0.0f, std::bit_cast<float>(0x7fc00123u), 3.25f};  // NaN payload
  const std::vector<double> f64{std::numeric_limits<double>::denorm_min(), -2.5};
  const std::vector<uint8_t> bools{1, 0, 1};
  const std::vector<std::string> strs{"a", "", "\xc3\xbc", std::string(1000, 'z')};

  struct Case {
    const char* key;
    Value v;
    size_t elem_bytes;
  };
  const std::vector<Case> cases{
      {"a.u8", numeric_array(ValueType::U8, u8), 1},
      {"a.i8", numeric_array(ValueType::I8, i8), 1},
      {"a.u16", numeric_array(ValueType::U16, u16), 2},
      {"a.i16", numeric_array(ValueType::I16, i16), 2},
      {"a.u32", numeric_array(ValueType::U32, u32), 4},
      {"a.i32", numeric_array(ValueType::I32, i32), 4},
      {"a.u64", numeric_array(ValueType::U64, u64), 8},
      {"a.i64", numeric_array(ValueType::I64, i64), 8},
      {"a.f32", numeric_array(ValueType::F32, f32), 4},
      {"a.f64", numeric_array(ValueType::F64, f64), 8},
      {"a.bool", numeric_array(ValueType::BOOL, bools), 1},
      {"a.empty_i32", numeric_array(ValueType::I32, std::vector<int32_t>{}), 4},
  };
  GgufWriter w;
  for (const Case& c : cases) w.set_value(c.key, c.v);
  w.set_string_array("a.strings", strs);
  const std::vector<std::string_view> views{"x", "yy"};
  w.set_string_array("a.views", std::span<const std::string_view>(views));
  w.set_string_array("a.empty_strings", std::vector<std::string>{});
  const std::vector<int32_t> ids{5, -6, 7};
  w.set_i32_array("a.ids", ids);
  const std::vector<float> scores{0.5f, -1.0f};
  w.set_f32_array("a.scores", scores);
  const auto f = GgufFile::open(write_gguf(w, test::temp_dir()).string());

  for (const Case& c : cases) {
    const Value* v = f->find(c.key);
    ASSERT_NE(v, nullptr) << c.key;
    EXPECT_EQ(v->type, ValueType::ARRAY) << c.key;
    EXPECT_EQ(v->elem_type, c.v.elem_type) << c.key;
    ASSERT_EQ(v->count, c.v.count) << c.key;
    if (c.v.count) {
      EXPECT_EQ(std::memcmp(v->elems, c.v.elems, c.v.count * c.elem_bytes), 0) << c.key;
    }
  }
  const Value* s = f->find("a.strings");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->elem_type, ValueType::STRING);
  ASSERT_EQ(s->count, strs.size());
  ASSERT_EQ(s->strings.size(), strs.size());
  for (size_t k = 0; k < strs.size(); ++k) EXPECT_EQ(s->strings[k], strs[k]);
  const auto v2 = f->get_string_array("a.views");
  ASSERT_TRUE(v2.has_value());
  ASSERT_EQ(v2->size(), 2u);
  EXPECT_EQ((*v2)[1], "yy");
  EXPECT_EQ(f->get_string_array("a.empty_strings")->size(), 0u);
  EXPECT_EQ(f->get_i32_array("a.ids"), ids);
  EXPECT_EQ(f->get_f32_array("a.scores"), scores);
  // Element accessors read the packed little-endian values.
  EXPECT_EQ(f->find("a.i64")->elem_i64(0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->find("a.f64")->elem_f64(1), -2.5);
  EXPECT_EQ(f->find("a.u16")->elem_i64(1), 65535);
}

TEST(GgufRoundTrip, TensorsRoundTripAlignedAtDefaultAndCustomAlignment) {
  struct T {
    const char* name;
    TensorType type;
    std::vector<int64_t> ne;
    size_t nbytes;  // from the block layouts: elements / block size * bytes per block
  };
  const std::vector<T> specs{
      {"a.f32", TensorType::F32, {3}, 12},
      {"b.f16", TensorType::F16, {4, 2}, 16},
      {"c.q8_0", TensorType::Q8_0, {64, 3}, 2 * 34 * 3},
      {"d.q4_K", TensorType::Q4_K, {256, 2}, 144 * 2},
      {"e.bf16", TensorType::BF16, {2, 2, 2, 2}, 32},
      {"f.i8", TensorType::I8, {5}, 5},
      {"g.q6_K", TensorType::Q6_K, {512, 1}, 2 * 210},
  };
  for (uint32_t alignment : {0u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    if (alignment) w.set_u32("general.alignment", alignment);
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < specs.size(); ++i) {
      data.push_back(random_bytes(specs[i].nbytes, static_cast<uint32_t>(i + 1)));
      w.add_tensor_bytes(specs[i].name, specs[i].type, specs[i].ne, data.back());
    }
    const auto f = GgufFile::open(write_gguf(w, test::temp_dir()).string());
    const uint64_t a = alignment ? alignment : 32;
    EXPECT_EQ(f->alignment(), a);
    EXPECT_EQ(f->data_offset() % a, 0u);
    ASSERT_EQ(f->tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorInfo& t = f->tensors()[i];
      EXPECT_EQ(t.name, specs[i].name);
      EXPECT_EQ(t.type, specs[i].type);
      ASSERT_EQ(t.n_dims, specs[i].ne.size());
      for (size_t d = 0; d < 4; ++d)
        EXPECT_EQ(t.ne[d], d < specs[i].ne.size() ? specs[i].ne[d] : 1) << t.name << " dim " << d;
      EXPECT_EQ(t.nbytes, specs[i].nbytes) << t.name;
      EXPECT_EQ(t.offset % a, 0u) << t.name;
      EXPECT_EQ(std::memcmp(t.data, data[i].data(), data[i].size()), 0) << t.name;
      EXPECT_EQ(f->find_tensor(specs[i].name), &t);
    }
    EXPECT_EQ(f->find_tensor("missing"), nullptr);
  }
}

TEST(GgufWriter, SettingAKeyTwiceReplacesItAndRemoveDeletesIt) {
  GgufWriter w;
  w.set_u32("k.a", 1);
  w.set_string("k.b", "x");
  w.set_string("k.a", "replaced");
  w.set_u8("k.c", 3);
  w.remove("k.c");
  EXPECT_EQ(w.kv_count(), 2u);
  const auto f = GgufFile::open(write_gguf(w, test::temp_dir()).string());
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "k.a");
  EXPECT_EQ(f->get_string("k.a"), "replaced");
  EXPECT_EQ(f->find("k.c"), nullptr);
}

std::string writer_error(const std::function<void(GgufWriter&)>& fn) {
  GgufWriter w;
  return test::error_of([&] { fn(w); });
}

TEST(GgufWriter, RejectsInvalidTensorsAndAlignmentNamingTheValue) {
  const auto noop = [](uint8_t*, size_t) {};
  const std::vector<int64_t> ok{32};
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) {
                    w.add_tensor("dup", TensorType::F32, ok, noop);
                    w.add_tensor("dup", TensorType::F32, ok, noop);
                  }),
                  "duplicate tensor name 'dup'");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) {
                    w.add_tensor("q", TensorType::Q8_0, std::vector<int64_t>{33, 2}, noop);
                  }),
                  "ne[0] = 33, not a multiple of the block size 32");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) {
                    w.add_tensor("z", TensorType::F32, std::vector<int64_t>{4, 0}, noop);
                  }),
                  "'z' dimension 1 is 0");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) {
                    w.add_tensor("five", TensorType::F32, std::vector<int64_t>{1, 1, 1, 1, 1}, noop);
                  }),
                  "'five' has 5 dimensions");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) {
                    w.add_tensor(std::string(64, 'n'), TensorType::F32, ok, noop);
                  }),
                  "is 64 bytes");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) {
                    const std::vector<uint8_t> b(10);
                    w.add_tensor_bytes("short", TensorType::F32, ok, b);
                  }),
                  "'short' needs 128 bytes, 10 were given");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) { w.set_u64("general.alignment", 32); }),
                  "must be u32, got u64");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) { w.set_u32("general.alignment", 48); }),
                  "general.alignment = 48");
  EXPECT_CONTAINS(writer_error([&](GgufWriter& w) { w.set_u32("", 1); }), "empty metadata key");
}

TEST(GgufWriter, AFailedWriteLeavesNeitherTheFileNorItsTemporary) {
  const auto dir = test::temp_dir();
  const auto path = (dir / "out.gguf").string();
  GgufWriter w;
  w.set_u32("x", 1);
  w.add_tensor("t", TensorType::F32, std::vector<int64_t>{4},
               [](uint8_t*, size_t) { throw Error("producer failed"); });
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // An existing file under the final name is left untouched by a failed write.
  { std::ofstream(path) << "old"; }
  EXPECT_THROW(w.write(path), Error);
  EXPECT_EQ(test::read_bytes(path).size(), 3u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1u) << "a temporary file was left in " << dir;
}

TEST(GgufWriter, NeverTouchesOtherFilesOrNonRegularOutputs) {
  const auto dir = test::temp_dir();
  const auto path = (dir / "out.gguf").string();
  GgufWriter w;
  w.set_u32("x", 1);
  w.add_tensor_bytes("t", TensorType::I8, std::vector<int64_t>{3}, random_bytes(3, 1));
  // A file that happens to be named like a temporary of the output, and a symbolic link named so,
  // survive a successful write untouched (the old writer truncated "<path>.tmp", following links).
  { std::ofstream(path + ".tmp") << "precious"; }
  { std::ofstream((dir / "target").string()) << "target"; }
  std::filesystem::create_symlink(dir / "target", dir / "out2.gguf.tmp");
  w.write(path);
  w.write((dir / "out2.gguf").string());
  EXPECT_EQ(test::read_bytes(path + ".tmp").size(), 8u);
  EXPECT_EQ(test::read_bytes((dir / "target").string()).size(), 6u);
  EXPECT_GT(test::read_bytes(path).size(), 3u);
  // An output that is a folder is refused before anything is written, naming it.
  std::filesystem::create_directory(dir / "folder.gguf");
  try {
    w.write((dir / "folder.gguf").string());
    ADD_FAILURE() << "a folder was accepted as the output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("folder.gguf: exists and is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_directory(dir / "folder.gguf"));
  EXPECT_EQ(test::write_temporaries(dir), std::vector<std::string>{});
}

// Replacing an existing output keeps its permission bits (the rename would otherwise give a
// 0600 private file 0644).
TEST(GgufWriter, ReplacingAnOutputKeepsItsPermissions) {
  const auto dir = test::temp_dir();
  const auto path = (dir / "out.gguf").string();
  GgufWriter w;
  w.set_u32("x", 1);
  w.add_tensor_bytes("t", TensorType::I8, std::vector<int64_t>{3}, random_bytes(3, 2));
  { std::ofstream(path) << "old"; }
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  w.write(path);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_GT(test::read_bytes(path).size(), 3u);
}

// An output this process may not write is refused like an open for writing would refuse it, and
// left as it was, although the folder is writable (the replacing rename needs only that). Root
// may write any file, so as root (how CI runs) the write runs in a forked child that has dropped
// to the unprivileged user 65534 ("nobody"): the same check, really refused by the kernel.
TEST(GgufWriter, AReadOnlyOutputIsRefusedAndKeptEvenWhereItsFolderIsWritable) {
  const auto dir = test::temp_dir();
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);  // writable for the unprivileged child too
  const auto ro = (dir / "ro.gguf").string();
  { std::ofstream(ro) << "secret"; }
  ASSERT_EQ(::chmod(ro.c_str(), 0444), 0);
  auto attempt = [&]() -> std::string {
    GgufWriter w;
    w.add_tensor_bytes("t", TensorType::I8, std::vector<int64_t>{3}, random_bytes(3, 2));
    try {
      w.write(ro);
    } catch (const Error& e) {
      return e.what();
    }
    return "(replaced)";
  };
  std::string error;
  if (::geteuid() != 0) {
    error = attempt();
  } else {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {  // no gtest macros here, only _exit
      ::close(p[0]);
      std::string msg;
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
        msg = std::string("cannot drop root: ") + std::strerror(errno);
      else
        msg = attempt();
      const ssize_t n = ::write(p[1], msg.data(), msg.size());
      ::_exit(n == static_cast<ssize_t>(msg.size()) ? 0 : 1);
    }
    ::close(p[1]);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) error.append(buf, static_cast<size_t>(n));
    ::close(p[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ": " << error;
  }
  EXPECT_NE(error.find("ro.gguf: exists and is not writable (Permission denied): not overwritten"), std::string::npos)
      << error;
  EXPECT_EQ(test::read_bytes(ro).size(), 6u);
  EXPECT_EQ(test::write_temporaries(dir), std::vector<std::string>{});
}

TEST(GgufWriter, CallsOnTensorOncePerTensorInOrder) {
  GgufWriter w;
  w.add_tensor_bytes("first", TensorType::I8, std::vector<int64_t>{3}, random_bytes(3, 1));
  w.add_tensor_bytes("second", TensorType::F32, std::vector<int64_t>{2}, random_bytes(8, 2));
  std::vector<std::string> seen;
  std::vector<uint64_t> sizes;
  w.write((test::temp_dir() / "p.gguf").string(), [&](size_t i, std::string_view name, uint64_t n) {
    EXPECT_EQ(i, seen.size());
    seen.emplace_back(name);
    sizes.push_back(n);
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(sizes, (std::vector<uint64_t>{3, 8}));
}

TEST(GgufGetters, IntegerGettersAcceptAnyIntegerTypeWhoseValueFits) {
  GgufWriter w;
  w.set_u8("g.u8", 7);
  w.set_i32("g.neg", -1);
  w.set_u64("g.big", uint64_t{1} << 40);
  w.set_u64("g.max", std::numeric_limits<uint64_t>::max());
  w.set_i16("g.i16", 300);
  const auto f = GgufFile::open(write_gguf(w, test::temp_dir()).string());
  EXPECT_EQ(f->get_u32("g.u8"), 7u);
  EXPECT_EQ(f->get_i64("g.u8"), 7);
  EXPECT_EQ(f->get_u32("g.i16"), 300u);
  EXPECT_EQ(f->get_i64("g.neg"), -1);
  EXPECT_EQ(f->get_i64("g.big"), int64_t{1} << 40);
  EXPECT_EQ(f->require_u32("g.u8"), 7u);
  EXPECT_FALSE(f->get_u32("g.absent").has_value());
  using test::error_of;
  EXPECT_CONTAINS(error_of([&] { f->get_u32("g.neg"); }), "'g.neg' = -1 (i32) does not fit in u32");
  EXPECT_CONTAINS(error_of([&] { f->get_u32("g.big"); }),
                  "'g.big' = 1099511627776 (u64) does not fit in u32");
  EXPECT_CONTAINS(error_of([&] { f->get_i64("g.max"); }),
                  "18446744073709551615 (u64) does not fit in i64");
}

TEST(GgufGetters, TypeMismatchAndMissingKeysAreErrorsNamingFileKeyAndTypes) {
  GgufWriter w;
  w.set_string("g.s", "text");
  w.set_f32("g.f32", 0.5f);
  w.set_f64("g.f64", 0.25);
  w.set_u8("g.u8", 1);
  w.set_bool("g.b", true);
  const std::vector<uint32_t> u32{1, 0x80000000u};
  w.set_value("g.u32s", numeric_array(ValueType::U32, u32));
  const auto path = write_gguf(w, test::temp_dir()).string();
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->get_f32("g.f32"), 0.5f);
  EXPECT_EQ(f->get_f32("g.f64"), 0.25f);
  EXPECT_EQ(f->get_bool("g.b"), true);
  EXPECT_EQ(f->require_string("g.s"), "text");
  using test::error_of;
  const std::string u32_of_string = error_of([&] { f->get_u32("g.s"); });
  EXPECT_CONTAINS(u32_of_string, path);
  EXPECT_CONTAINS(u32_of_string, "'g.s' has type string, expected an integer (u32)");
  EXPECT_CONTAINS(error_of([&] { f->get_bool("g.u8"); }), "'g.u8' has type u8, expected bool");
  EXPECT_CONTAINS(error_of([&] { f->get_f32("g.s"); }), "'g.s' has type string, expected f32");
  EXPECT_CONTAINS(error_of([&] { f->get_string("g.f32"); }), "'g.f32' has type f32, expected string");
  EXPECT_CONTAINS(error_of([&] { f->get_string_array("g.u32s"); }),
                  "'g.u32s' has type array of u32, expected array of string");
  EXPECT_CONTAINS(error_of([&] { f->get_i32_array("g.u32s"); }),
                  "'g.u32s' element 1 = 2147483648 (u32) does not fit in i32");
  EXPECT_CONTAINS(error_of([&] { f->get_f32_array("g.s"); }), "'g.s' has type string");
  EXPECT_CONTAINS(error_of([&] { f->require_u32("g.none"); }), "missing metadata key g.none");
  EXPECT_CONTAINS(error_of([&] { f->require_f32("g.none"); }), "missing metadata key g.none");
  EXPECT_CONTAINS(error_of([&] { f->require_string("g.none"); }), "missing metadata key g.none");
}

}  // namespace
}  // namespace minfer::gguf
