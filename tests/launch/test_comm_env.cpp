// The CLI's communicator options from the environment (launch/comm_env.h): each documented
// variable (docs/testing.md) sets its CommOptions field, unset keeps the default, and a bad value
// is a ValueError naming the variable — the rules comm/ itself no longer reads.
#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <string>

#include "launch/comm_env.h"
#include "tensor/error.h"

namespace st::launch {
namespace {

comm::CommOptions from(const std::map<std::string, std::string>& env) {
  return comm_options_from([&](const char* var) -> const char* {
    auto it = env.find(var);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(CommEnv, UnsetKeepsTheDefaults) {
  const comm::CommOptions o = from({});
  EXPECT_FALSE(o.debug);
  EXPECT_EQ(o.p2p, comm::P2PMode::standard);
  EXPECT_EQ(o.max_count, INT_MAX);
  EXPECT_EQ(o.mpi_cuda_aware, comm::CudaAwareMode::ask);
  EXPECT_EQ(o.flight_recorder_entries, 256);
  EXPECT_TRUE(o.diagnose_deadlines);
}

TEST(CommEnv, EachVariableSetsItsField) {
  const comm::CommOptions o = from({{"SHARDTRAIN_COMM_DEBUG", "1"},
                                    {"SHARDTRAIN_P2P", "strict"},
                                    {"SHARDTRAIN_COMM_MAX_COUNT", "3"},
                                    {"SHARDTRAIN_MPI_CUDA_AWARE", "0"}});
  EXPECT_TRUE(o.debug);
  EXPECT_EQ(o.p2p, comm::P2PMode::strict);
  EXPECT_EQ(o.max_count, 3);
  EXPECT_EQ(o.mpi_cuda_aware, comm::CudaAwareMode::off);
  EXPECT_FALSE(from({{"SHARDTRAIN_COMM_DEBUG", "0"}}).debug);
  EXPECT_EQ(from({{"SHARDTRAIN_P2P", "default"}}).p2p, comm::P2PMode::standard);
  EXPECT_EQ(from({{"SHARDTRAIN_MPI_CUDA_AWARE", "1"}}).mpi_cuda_aware, comm::CudaAwareMode::on);
}

TEST(CommEnv, ABadValueNamesItsVariable) {
  for (const auto& [var, bad] : std::map<std::string, std::string>{{"SHARDTRAIN_P2P", "loose"},
                                                                    {"SHARDTRAIN_COMM_MAX_COUNT", "0"},
                                                                    {"SHARDTRAIN_MPI_CUDA_AWARE", "yes"}}) {
    try {
      from({{var, bad}});
      ADD_FAILURE() << var << "=" << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace st::launch
