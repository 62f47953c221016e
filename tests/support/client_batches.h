// A Client's batches to the end of its job as delivery-log entries, which the checker (checker.h) reads: what the
// local-mode and node-local tests take from a Client they opened in-process.
#pragma once

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "stoker/client.h"
#include "stoker/status.h"
#include "tools/delivery_log.h"

namespace stoker::testing {

// Takes every batch until the end of the job into `delivered`, holding each for `hold` (a training step); `after(n)`
// runs after the n-th. The first failed Next() is returned.
inline Status TakeAll(Client& client, std::vector<tools::LoggedBatch>* delivered,
                      std::chrono::milliseconds hold = std::chrono::milliseconds(0),
                      const std::function<void(size_t)>& after = {}) {
  while (true) {
    auto next = client.Next(std::chrono::seconds(60));
    if (!next.ok()) return next.status();
    if (next->kind == DeliveryKind::kEndOfJob) return Status::Ok();
    if (next->kind != DeliveryKind::kBatch) continue;
    const Batch& b = next->batch;
    tools::LoggedBatch logged;
    logged.batch = {b.epoch(), 0, b.index(), {b.sample_ids().begin(), b.sample_ids().end()},
                    {b.flags().begin(), b.flags().end()}};
    logged.worker_id = b.worker_id();
    delivered->push_back(std::move(logged));
    if (hold.count() > 0) std::this_thread::sleep_for(hold);  // the training step this batch feeds
    if (after) after(delivered->size());
  }
}

}  // namespace stoker::testing
