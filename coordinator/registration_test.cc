// How fast one key may register new workers (CoordinatorOptions::worker_registrations_per_second): a stolen worker
// key gets made-up workers at the pool's own pace, never a registry's worth at once, and other keys are not slowed.
#include "coordinator/impl_test_fixture.h"

namespace stoker::coordinator {
namespace {

class RegistrationTest : public CoordinatorImplTest {
 protected:
  void SetUp() override {
    CoordinatorImplTest::SetUp();
    options_.worker_registrations_per_second = 2;  // 8 at once
    impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  }
  Status Join(const std::string& id, const std::string& key) {
    return impl_->RegisterWorker({id, "tcp://" + id + ":1", 1, "t", "", true}, Caller{key}).status();
  }
};

TEST_F(RegistrationTest, AKeyRegistersNewWorkersAtItsPaceAndOthersAreNotSlowed) {
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Join("w-" + std::to_string(i), "worker:stolen").ok()) << i;
  EXPECT_EQ(Join("w-8", "worker:stolen").code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Join("w-0", "worker:stolen").ok()) << "a registered id registering again spends nothing";
  EXPECT_TRUE(Join("p-0", "worker:pool").ok()) << "another key has its own budget";
  clock_.Advance(Millis(499));
  EXPECT_EQ(Join("w-8", "worker:stolen").code(), StatusCode::kResourceExhausted);
  clock_.Advance(Millis(1));
  EXPECT_TRUE(Join("w-8", "worker:stolen").ok()) << "one more every half second";
  EXPECT_EQ(Join("w-9", "worker:stolen").code(), StatusCode::kResourceExhausted);
  clock_.Advance(Millis(60000));
  for (int i = 9; i < 17; ++i) EXPECT_TRUE(Join("w-" + std::to_string(i), "worker:stolen").ok()) << i;
  EXPECT_EQ(Join("w-17", "worker:stolen").code(), StatusCode::kResourceExhausted) << "4 seconds' worth banked";
}

}  // namespace
}  // namespace stoker::coordinator
