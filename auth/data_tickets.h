// Data tickets: how a worker's data port authenticates clients when it does not encrypt (`stoker-worker
// --plain-data`, for networks the operator trusts: CURVE costs about three times the client's CPU per image).
//
// The coordinator derives a master key from its own CURVE secret key, and from that one key per worker id. A worker
// registering with --plain-data gets its key in the registration reply (over the encrypted control plane). A client
// gets, in every worker list, a ticket per plain worker: a keyed BLAKE2b of its own authenticated identity under
// that worker's key. It connects with ZeroMQ's PLAIN mechanism (user name = its identity, password = the ticket),
// and the worker's ZAP handler admits it only if the ticket is that identity's. So a data connection still belongs
// to an identity the coordinator vouched for, and no client can speak for another; what is given up is secrecy
// and integrity of the bytes on the wire (the client still checks every batch against its plan). Nothing here is
// stored: the keys are derived again after a restart.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "auth/keys.h"
#include "stoker/status.h"

namespace stoker {

// 32 bytes, from the coordinator's key pair (its secret key never leaves the process).
StatusOr<std::string> DataTicketMasterKey(const KeyPair& coordinator);
// A worker's 32-byte ticket key.
std::string WorkerTicketKey(const std::string& master_key, const std::string& worker_id);
// The ticket for `client_identity` at the worker holding `worker_key`: 64 hexadecimal characters.
std::string DataTicket(const std::string& worker_key, const std::string& client_identity);
// Whether `ticket` is `client_identity`'s under `worker_key` (compared in constant time).
bool VerifyDataTicket(const std::string& worker_key, const std::string& client_identity, const std::string& ticket);

}  // namespace stoker
