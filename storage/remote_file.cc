// RemoteFile (remote_file.h): ranged reads with a one-block cache.
#include "storage/remote_file.h"

#include <algorithm>
#include <cstring>

namespace stoker::storage {

RemoteFile::RemoteFile(ObjectStore& store, ObjectInfo info, size_t block_bytes)
    : store_(store), info_(std::move(info)), block_bytes_(std::max<size_t>(512, block_bytes)) {}

StatusOr<size_t> RemoteFile::Read(uint64_t offset, size_t n, void* out) const {
  if (offset >= info_.size || n == 0) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, info_.size - offset));
  if (n >= block_bytes_) {
    STOKER_RETURN_IF_ERROR(store_.ReadRange(info_.url, offset, n, info_.etag, static_cast<uint8_t*>(out)));
    fetched_ += n;
    ++requests_;
    return n;
  }
  MutexLock lock(mu_);
  if (offset < block_offset_ || offset + n > block_offset_ + block_.size()) {
    const size_t length = static_cast<size_t>(std::min<uint64_t>(block_bytes_, info_.size - offset));
    std::vector<uint8_t> block(length);
    STOKER_RETURN_IF_ERROR(store_.ReadRange(info_.url, offset, length, info_.etag, block.data()));
    fetched_ += length;
    ++requests_;
    block_ = std::move(block);
    block_offset_ = offset;
  }
  std::memcpy(out, block_.data() + (offset - block_offset_), n);
  return n;
}

}  // namespace stoker::storage
