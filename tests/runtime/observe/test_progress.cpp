// runtime/observe/progress: the bar's text (cells, counts, percent, eta) and how step lines and the bar
// share one stream.
#include <gtest/gtest.h>

#include <sstream>

#include "runtime/observe/progress.h"

using st::runtime::format_bar;
using st::runtime::format_duration;
using st::runtime::Progress;

TEST(Progress, Durations) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(15.4), "0:15");
  EXPECT_EQ(format_duration(187), "3:07");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "--");
}

TEST(Progress, BarText) {
  // 40 of 200 steps in 10 s: 0.25 s per step, 160 left → 40 s.
  EXPECT_EQ(format_bar(40, 200, 0, 10.0, 10), "[##--------]  40/200  20%  eta 0:40");
  EXPECT_EQ(format_bar(0, 200, 0, 0.0, 10), "[----------]   0/200   0%  eta --");
  EXPECT_EQ(format_bar(200, 200, 0, 99.0, 10), "[##########] 200/200 100%  eta 0:00");
  // A resumed run (first = 100): the rate counts only this run's steps: 50 steps in 5 s.
  EXPECT_EQ(format_bar(150, 200, 100, 5.0, 4), "[###-] 150/200  75%  eta 0:05");
}

TEST(Progress, LinesScrollAboveTheBar) {
  std::ostringstream o;
  {
    Progress p(0, 4, true, o);
    p.update(1);
    p.line("step 1/4");
    p.update(2);
  }
  std::string s = o.str();
  // bar, erase + line, bar again, bar for step 2, final newline.
  EXPECT_EQ(s.find("\r["), 0u);
  size_t erase = s.find("\r\033[Kstep 1/4\n");
  ASSERT_NE(erase, std::string::npos) << s;
  EXPECT_NE(s.find("2/4  50%", erase), std::string::npos) << s;
  EXPECT_EQ(s.back(), '\n');
}

TEST(Progress, DisabledPrintsOnlyLines) {
  std::ostringstream o;
  {
    Progress p(0, 4, false, o);
    p.update(1);
    p.line("step 1/4");
    p.update(2);
  }
  EXPECT_EQ(o.str(), "step 1/4\n");
}
