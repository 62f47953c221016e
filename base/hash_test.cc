// DeriveSeed: every input, and their order, changes the seed.
#include "base/hash.h"

#include <gtest/gtest.h>

#include <string>

namespace stoker {
namespace {

TEST(Xxh64, MatchesPublishedVectors) {
  EXPECT_EQ(Xxh64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(Xxh64("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(Xxh64("abc", 3), 0x44BC2CF5AD770999ULL);
  std::string fox = "Nobody inspects the spammish repetition";
  EXPECT_EQ(Xxh64(fox.data(), fox.size()), 0xFBCEA83C8A378BF1ULL);
}

// Found by fuzz_journal (UBSan): hashing nothing from a null pointer (an empty vector's data) passed null to
// memcpy. Nothing is read, and the hash is that of the empty input.
TEST(Xxh64, NothingFromANullPointerIsTheEmptyHash) {
  EXPECT_EQ(Xxh64(nullptr, 0), Xxh64("", 0));
  EXPECT_EQ(Xxh64(nullptr, 0, 7), Xxh64("", 0, 7));
}

TEST(Xxh64, StreamingEqualsOneShotForEverySplit) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  for (size_t len : {0u, 1u, 31u, 32u, 33u, 64u, 100u, 300u}) {
    uint64_t expected = Xxh64(data.data(), len, 42);
    for (size_t split = 0; split <= len; split += 7) {
      Xxh64Stream s(42);
      s.Update(data.data(), split);
      s.Update(data.data() + split, len - split);
      EXPECT_EQ(s.Digest(), expected) << "len " << len << " split " << split;
    }
  }
}

TEST(DeriveSeed, DependsOnEveryInputAndOrder) {
  EXPECT_NE(DeriveSeed(1, 2), DeriveSeed(2, 1));
  EXPECT_NE(DeriveSeed(1, 2, 3), DeriveSeed(1, 2, 4));
  EXPECT_NE(DeriveSeed(0, 0), DeriveSeed(0, 1));
  EXPECT_EQ(DeriveSeed(7, 8, 9), DeriveSeed(7, 8, 9));
}

}  // namespace
}  // namespace stoker
