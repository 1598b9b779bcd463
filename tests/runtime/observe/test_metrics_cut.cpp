// cut_metrics_back (runtime/observe/metrics.h): on resume at step S the file keeps the lines of
// steps ≤ S in order, drops later steps and a torn last line, keeps a foreign line elsewhere,
// and leaves a clean file byte for byte as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/observe/metrics.h"

namespace st::runtime {
namespace {

std::string path_for(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("st_metrics_" + name + "_" + std::to_string(::getpid()) + ".jsonl"))
      .string();
}
void write(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
std::string read(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
std::string line(int64_t step) { return "{\"step\": " + std::to_string(step) + ", \"loss\": 1.5}\n"; }

TEST(MetricsCut, DropsStepsAfterTheCheckpointAndATornLine) {
  const std::string p = path_for("cut");
  write(p, line(1) + line(2) + line(3) + "not json but not ours\n" + line(4) + line(5) + line(6) +
               "{\"step\": 7, \"lo");
  EXPECT_EQ(cut_metrics_back(p, 4), 3);  // steps 5, 6 and the torn 7
  EXPECT_EQ(read(p), line(1) + line(2) + line(3) + "not json but not ours\n" + line(4));
  EXPECT_EQ(cut_metrics_back(p, 4), 0);
  EXPECT_EQ(read(p), line(1) + line(2) + line(3) + "not json but not ours\n" + line(4));
  // a complete last line without its newline is kept and completed
  write(p, line(1) + "{\"step\": 2}");
  EXPECT_EQ(cut_metrics_back(p, 2), 0);
  EXPECT_EQ(read(p), line(1) + "{\"step\": 2}\n");
  // resumed at 0 (a checkpoint of step 0 does not exist, but the rule holds): nothing kept
  write(p, line(1) + line(2));
  EXPECT_EQ(cut_metrics_back(p, 0), 2);
  EXPECT_EQ(read(p), "");
  std::filesystem::remove(p);
  EXPECT_EQ(cut_metrics_back(p, 3), 0);  // no file
  EXPECT_FALSE(std::filesystem::exists(p));
}

}  // namespace
}  // namespace st::runtime
