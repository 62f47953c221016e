// The S3 XML parsers against real responses, and against garbage: truncation, wrong roots, hostile sizes.
#include "storage/s3_xml.h"

#include <gtest/gtest.h>

#include <random>

namespace stoker::storage {
namespace {

constexpr char kPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix>
<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
<Contents><Key>p/shard-0000.tar</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>
<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>1048576</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>p/a&amp;b &#233;.tar</Key><ETag>"x"</ETag><Size>7</Size></Contents></ListBucketResult>)";

TEST(S3Xml, ParsesAListPage) {
  auto page = ParseListObjectsV2(kPage);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "p/shard-0000.tar");
  EXPECT_EQ(page->objects[0].size, 1048576u);
  EXPECT_EQ(page->objects[0].etag, "\"9b2cf535f27731c974343645a3985328\"");
  EXPECT_EQ(page->objects[1].key, "p/a&b \xc3\xa9.tar");
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  auto empty = ParseListObjectsV2("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->objects.empty());
}

TEST(S3Xml, RefusesMalformedPages) {
  for (const char* bad : {"", "garbage", "<Error><Code>x</Code></Error>", "<ListBucketResult>",
                          "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
                          "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
                          "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999</Size></Contents>"
                          "</ListBucketResult>",
                          "<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>",
                          "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
                          "<ListBucketResult><Contents><Key>k</Key><Size>1</Size></ListBucketResult>"}) {
    auto page = ParseListObjectsV2(bad);
    EXPECT_FALSE(page.ok()) << bad;
  }
}

TEST(S3Xml, SurvivesRandomAndTruncatedInput) {
  std::mt19937_64 rng(7);
  const std::string page = kPage;
  for (size_t cut = 0; cut < page.size(); cut += 7) (void)ParseListObjectsV2(page.substr(0, cut));
  for (int i = 0; i < 2000; ++i) {
    std::string s = page;
    for (int k = 0; k < 8; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    auto parsed = ParseListObjectsV2(s);
    if (parsed.ok()) {
      for (const auto& o : parsed->objects) EXPECT_FALSE(o.key.empty());
    }
    (void)ParseS3Error(s);
  }
}

TEST(S3Xml, ParsesErrors) {
  S3Error e = ParseS3Error("<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request "
                           "signature we calculated does not match</Message><StringToSign>x</StringToSign></Error>");
  EXPECT_EQ(e.code, "SignatureDoesNotMatch");
  EXPECT_EQ(e.message, "The request signature we calculated does not match");
  EXPECT_EQ(ParseS3Error("<html>503</html>").code, "");
  EXPECT_LE(ParseS3Error("<Error><Message>" + std::string(1000, 'm') + "</Message></Error>").message.size(), 200u);
}

TEST(S3Xml, Unescapes) {
  EXPECT_EQ(XmlUnescape("a&lt;b&gt;&amp;&quot;&apos;&#65;&#x42;"), "a<b>&\"'AB");
  EXPECT_EQ(XmlUnescape("&bogus; &#0; &#xD800; &"), "&bogus; &#0; &#xD800; &");
}

}  // namespace
}  // namespace stoker::storage
