// RankClaim: a rank the coordinator granted this process that no session uses yet. Client::Connect holds one from
// the registration's answer until the I/O thread takes the rank over (Commit). A Connect that fails in between
// simply returns: the claim gives the rank back as it is destroyed (it deregisters), and no I/O thread or worker
// connection is ever started for a rank that is only being returned.
//
// Thread safety: a move-only value, of the thread that connects.
#pragma once

#include <functional>
#include <utility>

#include "wire/control_messages.h"

namespace stoker::client {

class RankClaim {
 public:
  // `give_back` deregisters the rank (and waits a moment for the coordinator's answer).
  RankClaim(RegisterClientResponse registered, std::function<void()> give_back)
      : registered_(std::move(registered)), give_back_(std::move(give_back)) {}
  RankClaim(RankClaim&& other) noexcept
      : registered_(std::move(other.registered_)), give_back_(std::exchange(other.give_back_, nullptr)) {}
  RankClaim& operator=(RankClaim&& other) noexcept {
    if (this != &other) {
      GiveBack();
      registered_ = std::move(other.registered_);
      give_back_ = std::exchange(other.give_back_, nullptr);
    }
    return *this;
  }
  RankClaim(const RankClaim&) = delete;
  RankClaim& operator=(const RankClaim&) = delete;
  ~RankClaim() { GiveBack(); }

  // What the coordinator answered: the job, where this session starts, the workers.
  const RegisterClientResponse& registered() const { return registered_; }
  bool held() const { return static_cast<bool>(give_back_); }

  // The rank is the session's from now on, and the session gives it back when it ends: the claim no longer will.
  RegisterClientResponse Commit() {
    give_back_ = nullptr;
    return std::move(registered_);
  }

 private:
  void GiveBack() {
    if (give_back_) std::exchange(give_back_, nullptr)();
  }

  RegisterClientResponse registered_;
  std::function<void()> give_back_;  // empty once committed, given back or moved from
};

}  // namespace stoker::client
