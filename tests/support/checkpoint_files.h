// Two checkpoints of one step compared file by file, byte for byte (tensors, state.json with its
// checksums, config.json): what an asynchronous save, or a resumed run, must write exactly as the
// synchronous, uninterrupted one.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/train/train_checkpoint.h"

namespace st::testing_support {

inline std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file of DIR_A/step_N against DIR_B/step_N; B's checksums hold.
inline void expect_same_files(const std::string& a, const std::string& b, int64_t step, const std::string& what) {
  namespace fs = std::filesystem;
  const std::string sa = runtime::CheckpointDir(a).path_for(step), sb = runtime::CheckpointDir(b).path_for(step);
  ASSERT_TRUE(fs::is_directory(sa)) << what << ": " << sa;
  ASSERT_TRUE(fs::is_directory(sb)) << what << ": " << sb;
  std::set<std::string> fa, fb;
  for (auto& e : fs::directory_iterator(sa)) fa.insert(e.path().filename().string());
  for (auto& e : fs::directory_iterator(sb)) fb.insert(e.path().filename().string());
  ASSERT_EQ(fa, fb) << what << " step " << step;
  for (const std::string& f : fa)
    EXPECT_TRUE(bytes_of(sa + "/" + f) == bytes_of(sb + "/" + f)) << what << " step " << step << ": " << f << " differs";
  EXPECT_NO_THROW(runtime::open_train_checkpoint(sb)) << what;  // the checksums hold
}

}  // namespace st::testing_support
