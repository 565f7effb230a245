// The compact containers behind the tokenizer: StringTable (one arena), MergeList, TokenIndex
// (open addressing over a StringTable) and MergeTable (flat (left, right) -> (rank, result)).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/merge_list.h"
#include "tokenizer/merge_table.h"
#include "tokenizer/string_table.h"
#include "tokenizer/token_index.h"

namespace minfer::tok {
namespace {

TEST(TokenizerTables, StringTableKeepsEveryStringByIndex) {
  StringTable t;
  t.push_back("Ġhello");
  t.push_back("");
  t.push_back_concat("ab", "cd");
  t.push_back(std::string("x\0y", 3));
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0], "Ġhello");
  EXPECT_EQ(t[1], "");
  EXPECT_EQ(t[2], "abcd");
  EXPECT_EQ(t[3], std::string_view("x\0y", 3));
  EXPECT_GE(t.memory_bytes(), 7u + 4u + 3u + 4 * 2 * sizeof(uint32_t));
}

TEST(TokenizerTables, StringTableSetAndPushOfItsOwnViewsSurviveReallocation) {
  StringTable t;
  t.push_back("first");
  for (int i = 0; i < 1000; ++i) t.push_back(t[0]);  // grows the arena many times
  t.set(1, t[0]);
  t.resize(1003);
  t.set(1002, "last");
  EXPECT_EQ(t[1000], "first");
  EXPECT_EQ(t[1], "first");
  EXPECT_EQ(t[1001], "");
  EXPECT_EQ(t[1002], "last");
  StringTable u = t;
  EXPECT_EQ(u, t);
  u.set(5, "other");
  EXPECT_FALSE(u == t);
}

TEST(TokenizerTables, MergeListGivesBothSidesAndTheJoinedText) {
  MergeList m;
  m.emplace_back("Ġ", "t");
  m.emplace_back("he", "llo");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].first, "Ġ");
  EXPECT_EQ(m[0].second, "t");
  EXPECT_EQ(m.joined(1), "hello");
  // Same joined text, different split: not equal.
  MergeList other;
  other.emplace_back("Ġ", "t");
  other.emplace_back("hel", "lo");
  EXPECT_FALSE(m == other);
}

TEST(TokenizerTables, TokenIndexFindsEveryTokenAndReportsDuplicates) {
  StringTable t;
  for (int i = 0; i < 5000; ++i) t.push_back("tok" + std::to_string(i));
  t.push_back("tok17");  // id 5000 duplicates id 17
  TokenIndex index;
  index.reset(t.size());
  for (int32_t i = 0; i < 5000; ++i) EXPECT_EQ(index.insert(t, i), -1);
  EXPECT_EQ(index.insert(t, 5000), 17);
  for (int32_t i = 0; i < 5000; i += 7) EXPECT_EQ(index.find(t, "tok" + std::to_string(i)), i);
  EXPECT_EQ(index.find(t, "tok5000"), -1);
  EXPECT_EQ(index.find(t, ""), -1);
  EXPECT_EQ(TokenIndex().find(t, "tok1"), -1);  // empty index
}

TEST(TokenizerTables, TokenIndexFindManyEqualsFindForEachText) {
  // More tokens than fit the tag-free id bits of a small table, texts of 1 to 40 bytes, and
  // lookups of present, absent and empty texts, in blocks of every size around the pipeline's
  // depth (find_many runs its lookups staggered a few dozen texts apart).
  StringTable t;
  for (int i = 0; i < 70000; ++i) t.push_back(std::string(static_cast<size_t>(1 + i % 40), 'a' + i % 26) + std::to_string(i));
  TokenIndex index;
  index.reset(t.size());
  for (int32_t i = 0; i < static_cast<int32_t>(t.size()); ++i) ASSERT_EQ(index.insert(t, i), -1);
  std::vector<std::string> owned;
  for (int i = 0; i < 3000; ++i) {
    owned.push_back(std::string(t[static_cast<size_t>(i * 23 % 70000)]));
    if (i % 3 == 0) owned.push_back(owned.back() + "x");  // absent
  }
  owned.push_back("");
  std::vector<std::string_view> texts(owned.begin(), owned.end());
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{25}, size_t{33}, texts.size()}) {
    std::vector<int32_t> ids(n, -2);
    index.find_many(t, std::span(texts).first(n), ids);
    for (size_t k = 0; k < n; ++k) ASSERT_EQ(ids[k], index.find(t, texts[k])) << n << " " << k;
  }
  std::vector<int32_t> ids(texts.size(), -2);
  TokenIndex().find_many(t, texts, ids);  // empty index
  for (int32_t id : ids) EXPECT_EQ(id, -1);
}

TEST(TokenizerTables, MergeTableKeepsTheLowestRankOfARepeatedPair) {
  MergeTable m;
  EXPECT_EQ(m.find(1, 2), nullptr);  // before reset
  m.reset(4);
  m.insert(1, 2, 0, 100);
  m.insert(2, 1, 1, 101);
  m.insert(1, 2, 2, 102);  // repeated pair: rank 0 stays
  m.insert(0, 0, 3, 103);
  EXPECT_EQ(m.size(), 3u);
  ASSERT_NE(m.find(1, 2), nullptr);
  EXPECT_EQ(m.find(1, 2)->rank, 0);
  EXPECT_EQ(m.find(1, 2)->result, 100);
  EXPECT_EQ(m.find(2, 1)->result, 101);
  EXPECT_EQ(m.find(0, 0)->rank, 3);
  EXPECT_EQ(m.find(2, 2), nullptr);
  EXPECT_EQ(m.find(0, 1), nullptr);
}

TEST(TokenizerTables, MergeTableFindsManyPairsWithLargeIds) {
  MergeTable m;
  const int32_t n = 200000;
  m.reset(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) m.insert(i, 151935 - (i % 151936), i, i + 7);
  for (int32_t i = 0; i < n; i += 13) {
    const auto* e = m.find(i, 151935 - (i % 151936));
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(e->rank, i);
    EXPECT_EQ(e->result, i + 7);
  }
  EXPECT_EQ(m.find(n, 0), nullptr);
  EXPECT_EQ(m.size(), static_cast<size_t>(n));
  EXPECT_LE(m.memory_bytes(), static_cast<size_t>(n) * 4 * sizeof(MergeTable::Entry));  // load >= 5/16
}

}  // namespace
}  // namespace minfer::tok
