// Object URLs: the schemes, bucket and host rules, and garbage refused with a message.
#include "storage/url.h"

#include <gtest/gtest.h>

namespace stoker::storage {
namespace {

TEST(ObjectUrl, ParsesS3AndHttp) {
  auto s3 = ParseObjectUrl("s3://my-bucket/prefix/shard-0000.tar");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_TRUE(s3->s3());
  EXPECT_EQ(s3->bucket, "my-bucket");
  EXPECT_EQ(s3->key, "prefix/shard-0000.tar");
  EXPECT_EQ(s3->ToString(), "s3://my-bucket/prefix/shard-0000.tar");
  auto prefix = ParseObjectUrl("s3://bucket");
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->key, "");
  auto http = ParseObjectUrl("https://127.0.0.1:8443/data/a.tar");
  ASSERT_TRUE(http.ok());
  EXPECT_EQ(http->scheme, UrlScheme::kHttps);
  EXPECT_EQ(http->authority, "127.0.0.1:8443");
  EXPECT_EQ(http->key, "data/a.tar");
}

TEST(ObjectUrl, RefusesMalformedUrls) {
  for (const char* bad : {"", "/data/a.tar", "ftp://host/a", "s3://", "s3://UPPER/key", "s3://ab/key",
                          "http:///path", "http://user:secret@host/a.tar", "http://host/a.tar?x-amz-signature=1",
                          "http://host/a\n.tar", "s3://bucket/key#frag"}) {
    auto parsed = ParseObjectUrl(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  std::string huge = "s3://bucket/" + std::string(5000, 'k');
  EXPECT_FALSE(ParseObjectUrl(huge).ok());
}

TEST(ObjectUrl, EncodesLikeSigV4) {
  EXPECT_EQ(UriEncode("a b/c+d~e_f.g-h", true), "a%20b/c%2Bd~e_f.g-h");
  EXPECT_EQ(UriEncode("a/b=c", false), "a%2Fb%3Dc");
  EXPECT_EQ(UriEncode("\xc3\xa9", true), "%C3%A9");
}

}  // namespace
}  // namespace stoker::storage
