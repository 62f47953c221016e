// Local group: the secret that ties a training process to the node-local workers beside it. They share a
// directory (the client's private one in local mode, or an emptyDir both containers of a Kubernetes pod mount);
// the group is the file `group` in it. The client registers its session with the group and the workers register as
// local to it, so the coordinator lists those workers to that session only and leases its units to them first
// (docs/design.md, 2b). Their batches travel over ipc:// sockets in the same directory.
//
// The file is made by whoever comes first (a worker or the client), mode 0600, atomically: written under a
// temporary name and linked into place, so a reader never sees it half written and two makers agree on one. A group
// file that is not this user's, is readable or writable by others, or is not 32 lowercase hex digits is refused:
// whoever could read it could join the group, and whoever could write it could choose it.
//
// The secret never reaches a log, /state or an error message.
//
// Thread safety: free functions.
#pragma once

#include <string>

#include "stoker/status.h"

namespace stoker {

// The group file's name inside the shared directory.
inline constexpr const char* kLocalGroupFile = "group";

// Whether `text` has a group's form (32 lowercase hex digits): what a group file holds, and all a peer may send as one.
bool IsLocalGroup(const std::string& text);

// The group of `dir` (an absolute path to an existing directory): read, or made if absent.
StatusOr<std::string> ReadOrMakeLocalGroup(const std::string& dir);

// Whether `endpoint` is an ipc:// socket directly inside `dir` (both absolute; `dir` without a trailing slash).
bool IpcEndpointIn(const std::string& endpoint, const std::string& dir);

}  // namespace stoker
