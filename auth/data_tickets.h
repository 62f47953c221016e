// Data tickets and seal keys: how a worker's data port knows its clients. The coordinator derives a master key from
// its own CURVE secret key, and from that one key per worker id and session (the SessionCheck of the secret the
// worker process drew), which the worker gets in its registration reply (over the encrypted control plane): a
// process that registers the id after it (a restart, or a stolen worker key once the id is lost) gets another key. A client gets, in every worker list, a ticket and a seal key for each
// worker, both keyed BLAKE2b of its own authenticated identity under that worker's key (with different labels).
// It connects with ZeroMQ's PLAIN mechanism (user name = its identity, password = the ticket), and the worker's ZAP
// handler admits it only if the ticket is that identity's: a data connection belongs to an identity the
// coordinator vouched for, and no client can speak for another. The ticket crosses the network in the clear (PLAIN),
// so it only keeps strangers out; the seal key never does, and the connection's keys derive from it (auth/seal.h),
// so only that identity can read its batches or send credits the worker accepts. Nothing here is stored: the keys
// are derived again after a restart (the coordinator journals each worker's SessionCheck).
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "auth/keys.h"
#include "stoker/status.h"

namespace stoker {

// 32 bytes, from the coordinator's key pair (its secret key never leaves the process).
StatusOr<std::string> DataTicketMasterKey(const KeyPair& coordinator);
// A worker's 32-byte ticket key, for its session's SessionCheck (empty: a worker that sent no secret).
std::string WorkerTicketKey(const std::string& master_key, const std::string& worker_id,
                            const std::string& session_check);
// The ticket for `client_identity` at the worker holding `worker_key`: 64 hexadecimal characters.
std::string DataTicket(const std::string& worker_key, const std::string& client_identity);
// The seal key `client_identity` and the worker holding `worker_key` share (32 bytes): what their sealed
// connections' keys derive from (auth/seal.h). The coordinator hands it to the client over CURVE, beside the ticket;
// unlike the ticket it never travels in the clear.
std::string DataSealKey(const std::string& worker_key, const std::string& client_identity);
// Whether `ticket` is `client_identity`'s under `worker_key` (compared in constant time).
bool VerifyDataTicket(const std::string& worker_key, const std::string& client_identity, const std::string& ticket);

// Rank sessions. A client process draws a secret (NewSessionSecret: 32 random bytes) and sends it, over CURVE, with
// its registration, its heartbeats and its deregistration; the coordinator keeps and journals only SessionCheck of
// it (BLAKE2b-256) and compares in constant time. So a process holding the same client key, which can read the
// victim's client id in /state, still cannot ack for its session, take it over or end it.
constexpr size_t kSessionSecretBytes = 32;
constexpr size_t kSessionCheckBytes = 32;  // SessionCheck's length
std::string NewSessionSecret();
// OK for an empty secret (none sent) or one of kSessionSecretBytes; INVALID_ARGUMENT otherwise.
Status CheckSessionSecret(const std::string& secret);
std::string SessionCheck(const std::string& secret);
// Whether `secret` is the one `check` was made from; true when `check` is empty (a session its client started
// without a secret, or one replayed from a journal older than sessions).
bool SessionMatches(const std::string& check, const std::string& secret);

}  // namespace stoker
