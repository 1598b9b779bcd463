// Process grid: the DP×CP×TP×PP layout of the world, each rank's coordinates, its dp / tp / pp /
// cp groups, the dp × cp group of the gradient reduction, and its pipeline neighbours.
//
// Rank order (documented contract):
//   rank = ((pp_idx · dp + dp_idx) · cp + cp_idx) · tp + tp_idx.
// tp varies fastest, so a tp group is tp consecutive ranks and stays inside a node (mpirun and
// SLURM place consecutive ranks together); then cp (the ring's neighbours next, after tp); then dp;
// pp slowest (stages span nodes, where only point-to-point activations cross). With cp 1 this is
// the DP×TP×PP order rank = (pp_idx · dp + dp_idx) · tp + tp_idx. Example world 8, dp 2, tp 2, pp 2:
//   rank:   0 1 2 3 4 5 6 7
//   tp_idx: 0 1 0 1 0 1 0 1    tp groups {0,1} {2,3} {4,5} {6,7}
//   dp_idx: 0 0 1 1 0 0 1 1    dp groups {0,2} {1,3} {4,6} {5,7}
//   pp_idx: 0 0 0 0 1 1 1 1    pp groups {0,4} {1,5} {2,6} {3,7}
// Example world 16, dp 2, cp 2, tp 2, pp 2:
//   rank:   0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15
//   tp_idx: 0 1 0 1 0 1 0 1 0 1  0  1  0  1  0  1   tp groups {0,1} {2,3} … {14,15}
//   cp_idx: 0 0 1 1 0 0 1 1 0 0  1  1  0  0  1  1   cp groups {0,2} {1,3} {4,6} … {13,15}
//   dp_idx: 0 0 0 0 1 1 1 1 0 0  0  0  1  1  1  1   dp groups {0,4} {1,5} {2,6} … {11,15}
//   pp_idx: 0 0 0 0 0 0 0 0 1 1  1  1  1  1  1  1   pp groups {0,8} {1,9} … {7,15}
//   dp × cp groups (the gradient sum: the weights are replicated over both) {0,2,4,6} {1,3,5,7}
//   {8,10,12,14} {9,11,13,15}, group rank dp_idx · cp + cp_idx.
// Within a group, group rank = the varying index (tp group rank = tp_idx, pp group rank = pp_idx).
// The arithmetic is pure (GridLayout, tested without ranks); ProcessGrid splits a communicator.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/make_communicator.h"

namespace st::comm {

struct GridCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
  bool operator==(const GridCoord&) const = default;
};

struct GridLayout {
  int world = 1, dp = 1, tp = 1, pp = 1, cp = 1;

  // dp <= 0 means world / (tp·cp·pp). Throws ValueError naming the numbers when a size is < 1 or
  // dp·cp·tp·pp != world.
  static GridLayout make(int world, int dp, int tp, int pp, int cp = 1);

  GridCoord coord(int rank) const;
  int rank_of(const GridCoord& c) const;
  // World ranks of `rank`'s groups, in group-rank order.
  std::vector<int> dp_group(int rank) const;
  std::vector<int> tp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> cp_group(int rank) const;
  // the ranks of `rank`'s (pp, tp) position over dp × cp, group rank dp_idx · cp + cp_idx
  std::vector<int> dp_cp_group(int rank) const;
  // World rank of the previous / next pipeline stage of `rank`'s pp group, -1 at the ends.
  int prev_stage_rank(int rank) const;
  int next_stage_rank(int rank) const;
  // Split colors: ranks sharing a color form one group (key = the group rank).
  int dp_color(int rank) const;
  int tp_color(int rank) const;
  int pp_color(int rank) const;
  int cp_color(int rank) const;
  int dp_cp_color(int rank) const;
  std::string str() const;  // "world 8 = dp 2 x tp 2 x pp 2" ("… x cp 2 …" when cp > 1)
};

class ProcessGrid {
 public:
  // Collective over `world` (splits it three times, five with cp > 1, same order on every rank).
  ProcessGrid(std::shared_ptr<Communicator> world, int dp, int tp, int pp, int cp = 1);

  const GridLayout& layout() const { return layout_; }
  const GridCoord& coord() const { return coord_; }
  int rank() const { return world_->rank(); }
  const std::shared_ptr<Communicator>& world() const { return world_; }
  const std::shared_ptr<Communicator>& dp_group() const { return dp_; }
  const std::shared_ptr<Communicator>& tp_group() const { return tp_; }
  const std::shared_ptr<Communicator>& pp_group() const { return pp_; }
  // cp 1: null (no ring) and the dp group (the gradient sum over dp × 1)
  const std::shared_ptr<Communicator>& cp_group() const { return cp_; }
  const std::shared_ptr<Communicator>& dp_cp_group() const { return dp_cp_; }
  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == layout_.pp - 1; }
  // Neighbour stages as ranks of pp_group() (-1 at the ends) and as world ranks.
  int prev_stage() const { return is_first_stage() ? -1 : coord_.pp - 1; }
  int next_stage() const { return is_last_stage() ? -1 : coord_.pp + 1; }
  int prev_stage_world_rank() const { return layout_.prev_stage_rank(rank()); }
  int next_stage_world_rank() const { return layout_.next_stage_rank(rank()); }

 private:
  GridLayout layout_;
  GridCoord coord_;
  std::shared_ptr<Communicator> world_, dp_, tp_, pp_, cp_, dp_cp_;
};

}  // namespace st::comm
