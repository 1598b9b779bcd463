// Process-grid arithmetic (no ranks needed) over many (world, dp, tp, pp, cp), and the backend choice.
#include <gtest/gtest.h>

#include <set>

#include "comm/process_grid.h"

namespace st::comm {
namespace {

TEST(GridLayout, RankOrderAndGroupsForManyLayouts) {
  int layouts = 0;
  for (int world = 1; world <= 24; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; pp <= world; ++pp)
        for (int cp = 1; cp <= world; ++cp) {
          if (world % (tp * pp * cp)) continue;
          GridLayout L = GridLayout::make(world, 0, tp, pp, cp);
          ++layouts;
          ASSERT_EQ(L.dp * L.tp * L.pp * L.cp, world);
          std::set<int> colors_dp, colors_tp, colors_pp, colors_cp, colors_dpcp;
          for (int r = 0; r < world; ++r) {
            GridCoord c = L.coord(r);
            // the documented contract: tp fastest, then cp, then dp, pp slowest
            ASSERT_EQ(r, ((c.pp * L.dp + c.dp) * cp + c.cp) * tp + c.tp) << L.str();
            ASSERT_EQ(L.rank_of(c), r);
            auto tpg = L.tp_group(r), dpg = L.dp_group(r), ppg = L.pp_group(r), cpg = L.cp_group(r),
                 dcg = L.dp_cp_group(r);
            ASSERT_EQ(static_cast<int>(tpg.size()), tp);
            ASSERT_EQ(static_cast<int>(dpg.size()), L.dp);
            ASSERT_EQ(static_cast<int>(ppg.size()), pp);
            ASSERT_EQ(static_cast<int>(cpg.size()), cp);
            ASSERT_EQ(static_cast<int>(dcg.size()), L.dp * cp);
            // tp group: consecutive ranks starting at a multiple of tp (stays inside a node).
            for (int i = 0; i < tp; ++i) ASSERT_EQ(tpg[i], r - c.tp + i);
            ASSERT_EQ(tpg[c.tp], r);
            ASSERT_EQ(dpg[c.dp], r);
            ASSERT_EQ(ppg[c.pp], r);
            ASSERT_EQ(cpg[c.cp], r);
            ASSERT_EQ(dcg[c.dp * cp + c.cp], r);
            for (int i = 0; i < cp; ++i) ASSERT_EQ(cpg[i], r + (i - c.cp) * tp);
            for (int i = 0; i < L.dp; ++i) ASSERT_EQ(dpg[i], r + (i - c.dp) * tp * cp);
            for (int i = 0; i < pp; ++i) ASSERT_EQ(ppg[i], r + (i - c.pp) * tp * cp * L.dp);
            // dp × cp: the dp and cp groups' ranks of this (pp, tp) position, no other
            for (int m : dcg) {
              ASSERT_EQ(L.coord(m).pp, c.pp);
              ASSERT_EQ(L.coord(m).tp, c.tp);
            }
            // Same color ⇔ same group.
            for (int m : tpg) ASSERT_EQ(L.tp_color(m), L.tp_color(r));
            for (int m : dpg) ASSERT_EQ(L.dp_color(m), L.dp_color(r));
            for (int m : ppg) ASSERT_EQ(L.pp_color(m), L.pp_color(r));
            for (int m : cpg) ASSERT_EQ(L.cp_color(m), L.cp_color(r));
            for (int m : dcg) ASSERT_EQ(L.dp_cp_color(m), L.dp_cp_color(r));
            colors_dp.insert(L.dp_color(r));
            colors_tp.insert(L.tp_color(r));
            colors_pp.insert(L.pp_color(r));
            colors_cp.insert(L.cp_color(r));
            colors_dpcp.insert(L.dp_cp_color(r));
            ASSERT_EQ(L.prev_stage_rank(r), c.pp == 0 ? -1 : r - tp * cp * L.dp);
            ASSERT_EQ(L.next_stage_rank(r), c.pp == pp - 1 ? -1 : r + tp * cp * L.dp);
          }
          ASSERT_EQ(static_cast<int>(colors_dp.size()), world / L.dp);
          ASSERT_EQ(static_cast<int>(colors_tp.size()), world / tp);
          ASSERT_EQ(static_cast<int>(colors_pp.size()), world / pp);
          ASSERT_EQ(static_cast<int>(colors_cp.size()), world / cp);
          ASSERT_EQ(static_cast<int>(colors_dpcp.size()), world / (L.dp * cp));
        }
  EXPECT_GT(layouts, 200);
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
  EXPECT_TRUE(L.cp_group(5) == std::vector<int>{5}) << "cp 1: a group of one";
  EXPECT_EQ(L.dp_cp_group(5), L.dp_group(5));
}

// The header's world-16 example: dp 2, cp 2, tp 2, pp 2.
TEST(GridLayout, DocumentedContextParallelExample) {
  GridLayout L = GridLayout::make(16, 2, 2, 2, 2);
  EXPECT_EQ(L.str(), "world 16 = dp 2 x tp 2 x cp 2 x pp 2");
  const std::vector<int> cp_idx{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1};
  const std::vector<int> dp_idx{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(L.coord(r).tp, r % 2) << r;
    EXPECT_EQ(L.coord(r).cp, cp_idx[r]) << r;
    EXPECT_EQ(L.coord(r).dp, dp_idx[r]) << r;
    EXPECT_EQ(L.coord(r).pp, r / 8) << r;
  }
  EXPECT_EQ(L.coord(11), (GridCoord{0, 1, 1, 1}));  // dp 0, tp 1, pp 1, cp 1
  EXPECT_EQ(L.rank_of(GridCoord{1, 0, 0, 1}), 6);
  EXPECT_EQ(L.tp_group(6), (std::vector<int>{6, 7}));
  EXPECT_EQ(L.cp_group(4), (std::vector<int>{4, 6}));
  EXPECT_EQ(L.cp_group(13), (std::vector<int>{13, 15}));
  EXPECT_EQ(L.dp_group(2), (std::vector<int>{2, 6}));
  EXPECT_EQ(L.dp_group(11), (std::vector<int>{11, 15}));
  EXPECT_EQ(L.pp_group(7), (std::vector<int>{7, 15}));
  EXPECT_EQ(L.dp_cp_group(0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(L.dp_cp_group(13), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(L.prev_stage_rank(14), 6);
  EXPECT_EQ(L.next_stage_rank(5), 13);
}

TEST(GridLayout, InvalidLayoutsNameTheNumbers) {
  auto msg = [](int w, int dp, int tp, int pp, int cp = 1) {
    try {
      GridLayout::make(w, dp, tp, pp, cp);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(msg(8, 0, 3, 1), "process grid: world size 8 is not divisible by tp 3 x cp 1 x pp 1 = 3");
  EXPECT_EQ(msg(8, 3, 2, 1), "process grid: dp 3 x tp 2 x cp 1 x pp 1 = 6 != world size 8");
  EXPECT_EQ(msg(4, 1, 0, 1), "process grid: tp, cp and pp must be >= 1, got tp 0, cp 1, pp 1");
  EXPECT_EQ(msg(8, 0, 1, 1, 3), "process grid: world size 8 is not divisible by tp 1 x cp 3 x pp 1 = 3");
  EXPECT_EQ(msg(8, 2, 2, 1, 4), "process grid: dp 2 x tp 2 x cp 4 x pp 1 = 16 != world size 8");
  EXPECT_EQ(msg(4, 1, 1, 1, 0), "process grid: tp, cp and pp must be >= 1, got tp 1, cp 0, pp 1");
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
