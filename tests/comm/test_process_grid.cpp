// Process-grid arithmetic (no ranks needed) over many (world, dp, tp, pp), and the backend choice.
#include <gtest/gtest.h>

#include <set>

#include "comm/process_grid.h"

namespace st::comm {
namespace {

TEST(GridLayout, RankOrderAndGroupsForManyLayouts) {
  int layouts = 0;
  for (int world = 1; world <= 24; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; pp <= world; ++pp) {
        if (world % (tp * pp)) continue;
        GridLayout L = GridLayout::make(world, 0, tp, pp);
        ++layouts;
        ASSERT_EQ(L.dp * L.tp * L.pp, world);
        std::set<int> colors_dp, colors_tp, colors_pp;
        for (int r = 0; r < world; ++r) {
          GridCoord c = L.coord(r);
          ASSERT_EQ(r, ((c.pp * L.dp) + c.dp) * L.tp + c.tp) << L.str();
          ASSERT_EQ(L.rank_of(c), r);
          auto tpg = L.tp_group(r), dpg = L.dp_group(r), ppg = L.pp_group(r);
          ASSERT_EQ(static_cast<int>(tpg.size()), tp);
          ASSERT_EQ(static_cast<int>(dpg.size()), L.dp);
          ASSERT_EQ(static_cast<int>(ppg.size()), pp);
          // tp group: consecutive ranks starting at a multiple of tp (stays inside a node).
          for (int i = 0; i < tp; ++i) ASSERT_EQ(tpg[i], r - c.tp + i);
          ASSERT_EQ(tpg[c.tp], r);
          ASSERT_EQ(dpg[c.dp], r);
          ASSERT_EQ(ppg[c.pp], r);
          for (int i = 0; i < L.dp; ++i) ASSERT_EQ(dpg[i], r + (i - c.dp) * tp);
          for (int i = 0; i < pp; ++i) ASSERT_EQ(ppg[i], r + (i - c.pp) * tp * L.dp);
          // Same color ⇔ same group.
          for (int m : tpg) ASSERT_EQ(L.tp_color(m), L.tp_color(r));
          for (int m : dpg) ASSERT_EQ(L.dp_color(m), L.dp_color(r));
          for (int m : ppg) ASSERT_EQ(L.pp_color(m), L.pp_color(r));
          colors_dp.insert(L.dp_color(r));
          colors_tp.insert(L.tp_color(r));
          colors_pp.insert(L.pp_color(r));
          ASSERT_EQ(L.prev_stage_rank(r), c.pp == 0 ? -1 : r - tp * L.dp);
          ASSERT_EQ(L.next_stage_rank(r), c.pp == pp - 1 ? -1 : r + tp * L.dp);
        }
        ASSERT_EQ(static_cast<int>(colors_dp.size()), world / L.dp);
        ASSERT_EQ(static_cast<int>(colors_tp.size()), world / tp);
        ASSERT_EQ(static_cast<int>(colors_pp.size()), world / pp);
      }
  EXPECT_GT(layouts, 100);
}

TEST(GridLayout, DocumentedExample) {
  GridLayout L = GridLayout::make(8, 2, 2, 2);
  EXPECT_EQ(L.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(L.dp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(L.pp_group(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(L.coord(6), (GridCoord{1, 0, 1}));
  EXPECT_EQ(L.prev_stage_rank(6), 2);
  EXPECT_EQ(L.next_stage_rank(2), 6);
  EXPECT_EQ(L.str(), "world 8 = dp 2 x tp 2 x pp 2");
}

TEST(GridLayout, InvalidLayoutsNameTheNumbers) {
  auto msg = [](int w, int dp, int tp, int pp) {
    try {
      GridLayout::make(w, dp, tp, pp);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(msg(8, 0, 3, 1), "process grid: world size 8 is not divisible by tp 3 x pp 1 = 3");
  EXPECT_EQ(msg(8, 3, 2, 1), "process grid: dp 3 x tp 2 x pp 1 = 6 != world size 8");
  EXPECT_EQ(msg(4, 1, 0, 1), "process grid: tp and pp must be >= 1, got tp 0, pp 1");
  EXPECT_THROW(GridLayout::make(0, 1, 1, 1), ValueError);
  EXPECT_THROW(GridLayout::make(4, 1, 1, 1).coord(4), ValueError);
}

TEST(BackendChoice, AutoNeedsAGpuPerRank) {
  auto d = decide_backend("auto", true, 8, 8, true);
  EXPECT_TRUE(d.nccl);
  EXPECT_EQ(d.reason, "auto -> nccl: every rank owns a GPU (8 rank(s), 8 visible GPU(s) on this node)");
  d = decide_backend("auto", true, 1, 4, false);
  EXPECT_FALSE(d.nccl);
  EXPECT_EQ(d.reason, "auto -> mpi: 4 ranks on this node share 1 visible GPU(s)");
  d = decide_backend("auto", false, 8, 2, false);
  EXPECT_EQ(d.reason, "auto -> mpi: this build has no NCCL");
  d = decide_backend("auto", true, 0, 2, false);
  EXPECT_EQ(d.reason, "auto -> mpi: no CUDA device is visible");
  d = decide_backend("auto", true, 4, 4, false);
  EXPECT_FALSE(d.nccl);
  EXPECT_EQ(d.reason, "auto -> mpi: another node has fewer visible GPUs than ranks");
  EXPECT_FALSE(decide_backend("mpi", true, 8, 8, true).nccl);
  EXPECT_TRUE(decide_backend("nccl", true, 2, 2, true).nccl);
  EXPECT_THROW(decide_backend("nccl", false, 2, 2, true), DeviceError);
  EXPECT_THROW(decide_backend("gloo", true, 2, 2, true), ValueError);
}

}  // namespace
}  // namespace st::comm
