// libFuzzer target: what an object store or the environment hands the worker and `stoker index` as text: an S3
// ListObjectsV2 page and error body (storage/s3_xml.h), a shared-credentials file (storage/credentials.h) and an
// object URL (storage/url.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "storage/credentials.h"
#include "storage/s3_xml.h"
#include "storage/url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)stoker::storage::ParseListObjectsV2(text);
  (void)stoker::storage::ParseS3Error(text);
  (void)stoker::storage::XmlUnescape(text);
  (void)stoker::storage::ParseCredentialsFile(text, "default");
  (void)stoker::storage::ParseObjectUrl(text);
  return 0;
}
