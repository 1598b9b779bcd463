// DP×CP×TP×PP arithmetic and group construction (see process_grid.h for the rank order).
#include "comm/process_grid.h"

#include <sstream>

namespace st::comm {

GridLayout GridLayout::make(int world, int dp, int tp, int pp, int cp) {
  ST_CHECK(world >= 1, ValueError, "process grid: world size must be >= 1, got " << world);
  ST_CHECK(tp >= 1 && pp >= 1 && cp >= 1, ValueError,
           "process grid: tp, cp and pp must be >= 1, got tp " << tp << ", cp " << cp << ", pp " << pp);
  const int64_t replica = static_cast<int64_t>(tp) * cp * pp;
  if (dp <= 0) {
    ST_CHECK(world % replica == 0, ValueError,
             "process grid: world size " << world << " is not divisible by tp " << tp << " x cp " << cp << " x pp "
                                         << pp << " = " << replica);
    dp = static_cast<int>(world / replica);
  }
  ST_CHECK(dp * replica == world, ValueError,
           "process grid: dp " << dp << " x tp " << tp << " x cp " << cp << " x pp " << pp << " = " << dp * replica
                               << " != world size " << world);
  return GridLayout{world, dp, tp, pp, cp};
}

GridCoord GridLayout::coord(int rank) const {
  ST_CHECK(rank >= 0 && rank < world, ValueError, "process grid: rank " << rank << " outside [0, " << world << ")");
  GridCoord c;
  c.tp = rank % tp;
  c.cp = (rank / tp) % cp;
  c.dp = (rank / (tp * cp)) % dp;
  c.pp = rank / (tp * cp * dp);
  return c;
}

int GridLayout::rank_of(const GridCoord& c) const {
  ST_CHECK(c.dp >= 0 && c.dp < dp && c.tp >= 0 && c.tp < tp && c.pp >= 0 && c.pp < pp && c.cp >= 0 && c.cp < cp,
           ValueError,
           "process grid: coordinate (dp " << c.dp << ", cp " << c.cp << ", tp " << c.tp << ", pp " << c.pp
                                           << ") outside " << str());
  return ((c.pp * dp + c.dp) * cp + c.cp) * tp + c.tp;
}

std::vector<int> GridLayout::dp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp; ++c.dp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> GridLayout::tp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.tp = 0; c.tp < tp; ++c.tp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> GridLayout::pp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.pp = 0; c.pp < pp; ++c.pp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> GridLayout::cp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.cp = 0; c.cp < cp; ++c.cp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> GridLayout::dp_cp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp; ++c.dp)
    for (c.cp = 0; c.cp < cp; ++c.cp) g.push_back(rank_of(c));
  return g;
}

int GridLayout::prev_stage_rank(int rank) const {
  GridCoord c = coord(rank);
  if (c.pp == 0) return -1;
  c.pp -= 1;
  return rank_of(c);
}

int GridLayout::next_stage_rank(int rank) const {
  GridCoord c = coord(rank);
  if (c.pp == pp - 1) return -1;
  c.pp += 1;
  return rank_of(c);
}

// each color: the other indices of the coordinate in mixed radix (unique per group)
int GridLayout::dp_color(int rank) const {
  GridCoord c = coord(rank);
  return (c.pp * cp + c.cp) * tp + c.tp;
}
int GridLayout::tp_color(int rank) const {
  GridCoord c = coord(rank);
  return (c.pp * dp + c.dp) * cp + c.cp;
}
int GridLayout::pp_color(int rank) const {
  GridCoord c = coord(rank);
  return (c.dp * cp + c.cp) * tp + c.tp;
}
int GridLayout::cp_color(int rank) const {
  GridCoord c = coord(rank);
  return (c.pp * dp + c.dp) * tp + c.tp;
}
int GridLayout::dp_cp_color(int rank) const {
  GridCoord c = coord(rank);
  return c.pp * tp + c.tp;
}

std::string GridLayout::str() const {
  std::ostringstream os;
  os << "world " << world << " = dp " << dp << " x tp " << tp;
  if (cp > 1) os << " x cp " << cp;
  os << " x pp " << pp;
  return os.str();
}

ProcessGrid::ProcessGrid(std::shared_ptr<Communicator> world, int dp, int tp, int pp, int cp)
    : world_(std::move(world)) {
  ST_CHECK(world_ != nullptr, ValueError, "ProcessGrid: no world communicator");
  layout_ = GridLayout::make(world_->size(), dp, tp, pp, cp);
  const int r = world_->rank();
  coord_ = layout_.coord(r);
  auto label = [&](const char* kind, const char* a, int av, const char* b, int bv) {
    std::ostringstream os;
    os << kind << "[" << a << "=" << av << "," << b << "=" << bv << "]";
    return os.str();
  };
  dp_ = world_->split(layout_.dp_color(r), coord_.dp, label("dp", "pp", coord_.pp, "tp", coord_.tp));
  tp_ = world_->split(layout_.tp_color(r), coord_.tp, label("tp", "pp", coord_.pp, "dp", coord_.dp));
  pp_ = world_->split(layout_.pp_color(r), coord_.pp, label("pp", "dp", coord_.dp, "tp", coord_.tp));
  dp_cp_ = dp_;
  if (layout_.cp > 1) {  // every rank agrees on cp: the same splits everywhere
    cp_ = world_->split(layout_.cp_color(r), coord_.cp, label("cp", "dp", coord_.dp, "tp", coord_.tp));
    dp_cp_ = world_->split(layout_.dp_cp_color(r), coord_.dp * layout_.cp + coord_.cp,
                           label("dpcp", "pp", coord_.pp, "tp", coord_.tp));
  }
}

}  // namespace st::comm
