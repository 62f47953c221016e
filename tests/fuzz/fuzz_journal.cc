// libFuzzer target: a journal file as recovery reads it (coordinator/journal_format.h), every update it yields
// applied to a CoordinatorState, and one update's payload and the journal's high-water mark decoded on their own.
// Recovery must end in a replay, a torn tail or a refusal naming a byte; never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/env.h"
#include "coordinator/journal_format.h"
#include "coordinator/state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  stoker::coordinator::CoordinatorState state;
  stoker::StringFile file("fuzz.journal", bytes);
  (void)stoker::coordinator::ScanJournal(file, [&](const stoker::coordinator::Update& u) { state.Apply(u); });
  (void)stoker::coordinator::DecodeJournalUpdate(data, size);
  (void)stoker::coordinator::DecodeJournalMark({data, size});
  return 0;
}
