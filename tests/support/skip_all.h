// A GoogleTest environment that skips every test of the binary with a reason (a gpu test on a
// machine without a GPU), and the exit code ctest then reads as "Skipped".
#pragma once
#include <gtest/gtest.h>

#include <string>

namespace st::testing_support {

constexpr int kSkipReturnCode = 77;  // = SKIP_RETURN_CODE of every test that may skip

class SkipAll : public ::testing::Environment {
 public:
  explicit SkipAll(std::string reason) : reason_(std::move(reason)) {}
  void SetUp() override { GTEST_SKIP() << reason_; }

 private:
  std::string reason_;
};

}  // namespace st::testing_support
