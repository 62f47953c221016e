// LocalManifest: local mode's dataset. `manifest=` may name a dataset instead of a manifest (a folder, a .tar shard,
// an s3://, http:// or https:// prefix); it is indexed once, by `stoker index`, and the manifest kept:
//   - beside a local dataset (".../train/" -> ".../train.stoker") when the folder holding it is this user's and no
//     one else's to write (but this user's own group), or when a manifest of this user's (or root's) is already
//     there;
//   - else in $XDG_CACHE_HOME/stoker (~/.cache/stoker), named by a hash of the absolute path or URL.
// A kept manifest is made again when a local dataset's folder, or one of the folders directly in it (ImageFolder's
// classes), was modified after it. Processes indexing the same dataset at once (the ranks of one node) take turns
// on a lock file beside the manifest: one indexes, the others then find its manifest. `stoker index` shows its
// progress on this process's standard error and is tied to this process by a lifeline.
//
// Thread safety: any thread; concurrent calls for one dataset serialise on the lock file.
#pragma once

#include <string>

#include "stoker/status.h"

namespace stoker::client {

// Whether `path` is this user's (or root's) and no one else may write it: a place whose files local mode may trust.
bool OnlyOursToWrite(const std::string& path);

// `dataset` itself if it names a manifest (or something the coordinator will refuse clearly), else the path of its
// manifest, made if need be with `bin_dir`/stoker.
StatusOr<std::string> LocalManifest(const std::string& dataset, const std::string& bin_dir);

}  // namespace stoker::client
