// The wait graph, the culprit and the first divergence (see deadline_diagnosis.h).
#include "comm/deadline_diagnosis.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "comm/communicator.h"

namespace st::comm {
namespace {

struct Edge {
  int to = 0;
  bool strong = false;  // the target has not done its part (not issued, no answer); weak: waits elsewhere
  bool not_issued = false;  // strong because it has not issued the operation (else: no answer)
};

std::string seconds(Millis t) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << std::chrono::duration<double>(t).count() << " s";
  return os.str();
}

std::string ranks_text(std::vector<int> r) {
  std::sort(r.begin(), r.end());
  std::string s = r.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < r.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(r[i]);
  }
  return s;
}

// "allreduce(sum) f32 x4 tag 2" for a collective entry (without its seq).
std::string describe_entry(const FlightEntry& e) {
  const CollectiveSignature s{static_cast<int64_t>(e.op), e.dtype, e.count, e.arg, e.root, e.tag,
                              static_cast<int64_t>(e.seq)};
  std::string d = describe_signature(s);
  const std::string seq = " seq " + std::to_string(e.seq);
  const size_t at = d.find(seq);
  if (at != std::string::npos) d.erase(at, seq.size());
  return d;
}

class Graph {
 public:
  Graph(const std::vector<std::optional<RankReport>>& reports) : rep_(reports), edges_(reports.size()) {
    for (size_t r = 0; r < rep_.size(); ++r)
      if (answered(static_cast<int>(r))) build(static_cast<int>(r));
  }
  bool answered(int r) const { return r >= 0 && static_cast<size_t>(r) < rep_.size() && rep_[static_cast<size_t>(r)]; }
  const RankReport& report(int r) const { return *rep_[static_cast<size_t>(r)]; }
  bool waiting(int r) const { return answered(r) && report(r).wait.state != WaitSnapshot::State::none; }
  const std::vector<Edge>& edges(int r) const { return edges_[static_cast<size_t>(r)]; }
  int size() const { return static_cast<int>(rep_.size()); }

  // Ranks reached from the waiting ranks that wait on nobody.
  std::set<int> ends() const {
    std::set<int> seen, out;
    std::vector<int> todo;
    for (int r = 0; r < size(); ++r)
      if (waiting(r)) todo.push_back(r);
    while (!todo.empty()) {
      const int r = todo.back();
      todo.pop_back();
      if (!seen.insert(r).second) continue;
      if (edges(r).empty()) out.insert(r);
      for (const Edge& e : edges(r)) todo.push_back(e.to);
    }
    return out;
  }

  // "rank 0 in batch_p2p seq 7 of 'pp' on rank 1"
  std::string wait_text(int r) const {
    if (!answered(r)) return "rank " + std::to_string(r) + " gave no answer";
    const WaitSnapshot& w = report(r).wait;
    std::string s = "rank " + std::to_string(r);
    if (w.state == WaitSnapshot::State::none) return s + " waits in nothing (busy outside comm)";
    if (w.group.empty()) return s + " waits in " + w.text;
    s += (w.state == WaitSnapshot::State::timed_out ? " timed out in " : " in ") + w.op + " seq " +
         std::to_string(w.seq) + " of '" + w.group + "'";
    std::vector<int> strong, weak;
    for (const Edge& e : edges(r)) (e.strong ? strong : weak).push_back(e.to);
    const std::vector<int>& on = strong.empty() ? weak : strong;
    if (!on.empty()) s += " on " + ranks_text(on);
    return s;
  }

 private:
  void add(int from, Edge e) {
    for (const Edge& x : edges_[static_cast<size_t>(from)])
      if (x.to == e.to) return;
    edges_[static_cast<size_t>(from)].push_back(e);
  }
  static bool same_wait(const WaitSnapshot& a, const WaitSnapshot& b) {
    return a.group == b.group && a.members == b.members && a.op == b.op && a.seq == b.seq &&
           a.collective == b.collective;
  }
  void build(int r) {
    const WaitSnapshot& w = report(r).wait;
    if (w.state == WaitSnapshot::State::none || w.group.empty()) return;
    const std::string key = group_key(w.group, w.members);
    if (w.collective) {
      for (int m : w.members) {
        if (m == r) continue;
        if (!answered(m)) {
          add(r, {m, true, false});
          continue;
        }
        const GroupReport* g = report(m).group(key);
        if (!g || g->collectives <= w.seq)
          add(r, {m, true, true});
        else if (waiting(m) && !same_wait(report(m).wait, w))
          add(r, {m, false, false});
      }
      return;
    }
    const auto me = std::find(w.members.begin(), w.members.end(), r);
    const size_t my = static_cast<size_t>(me - w.members.begin());
    for (const WaitSnapshot::Peer& p : w.peers) {
      if (!answered(p.world_rank)) {
        add(r, {p.world_rank, true, false});
        continue;
      }
      const GroupReport* g = report(p.world_rank).group(key);
      const bool lacks = !g || my >= g->sends_to.size() || (p.recv_index > 0 && g->sends_to[my] < p.recv_index) ||
                         (p.send_index > 0 && g->recvs_from[my] < p.send_index);
      if (lacks)
        add(r, {p.world_rank, true, true});
      else if (waiting(p.world_rank))
        add(r, {p.world_rank, false, false});
    }
  }
  const std::vector<std::optional<RankReport>>& rep_;
  std::vector<std::vector<Edge>> edges_;
};

struct Divergence {
  std::string text;
  std::vector<int> odd;  // the ranks on the minority side
};

// Per group: the first seq, over the range every member's ring still holds, where the members'
// collectives differ. Groups where the waiting ranks wait come first.
std::optional<Divergence> first_signature_divergence(const Graph& g) {
  std::map<std::string, std::vector<std::pair<int, const GroupReport*>>> groups;  // key -> (world rank, report)
  std::vector<std::string> order;
  for (int r = 0; r < g.size(); ++r) {
    if (!g.answered(r)) continue;
    const WaitSnapshot& w = g.report(r).wait;
    if (!w.group.empty()) {
      const std::string k = group_key(w.group, w.members);
      if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
    }
    for (const GroupReport& gr : g.report(r).groups) groups[gr.key()].push_back({r, &gr});
  }
  for (const auto& [k, v] : groups)
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  for (const std::string& k : order) {
    const auto it = groups.find(k);
    if (it == groups.end() || it->second.size() < 2) continue;
    // seq -> entry, collectives only, per member
    std::vector<std::map<uint64_t, const FlightEntry*>> by_seq;
    uint64_t lo = 0, hi = UINT64_MAX;
    bool any = true;
    for (const auto& [r, gr] : it->second) {
      std::map<uint64_t, const FlightEntry*> m;
      for (const FlightEntry& e : gr->entries)
        if (!is_p2p(e.op)) m[e.seq] = &e;
      if (m.empty()) {
        any = false;
        break;
      }
      lo = std::max(lo, m.begin()->first);
      hi = std::min(hi, m.rbegin()->first);
      by_seq.push_back(std::move(m));
    }
    if (!any) continue;
    for (uint64_t s = lo; s <= hi && lo <= hi; ++s) {
      // classes of equal signatures, in rank order
      std::vector<std::pair<const FlightEntry*, std::vector<int>>> classes;
      bool complete = true;
      for (size_t i = 0; i < by_seq.size(); ++i) {
        const auto e = by_seq[i].find(s);
        if (e == by_seq[i].end()) {
          complete = false;
          break;
        }
        auto c = std::find_if(classes.begin(), classes.end(),
                              [&](const auto& x) { return x.first->same_signature(*e->second); });
        if (c == classes.end())
          classes.push_back({e->second, {it->second[i].first}});
        else
          c->second.push_back(it->second[i].first);
      }
      if (!complete || classes.size() < 2) continue;
      Divergence d;
      size_t most = 0;
      for (const auto& c : classes) most = std::max(most, c.second.size());
      size_t with_most = 0;
      for (const auto& c : classes) with_most += c.second.size() == most ? 1 : 0;
      std::ostringstream os;
      os << "group '" << it->second.front().second->name << "' seq " << s << ": ";
      for (size_t c = 0; c < classes.size(); ++c) {
        os << (c ? "; " : "") << ranks_text(classes[c].second) << " " << describe_entry(*classes[c].first);
        // the minority: every class smaller than the largest (all, when the largest are tied)
        if (classes[c].second.size() < most || with_most > 1)
          d.odd.insert(d.odd.end(), classes[c].second.begin(), classes[c].second.end());
      }
      d.text = os.str();
      return d;
    }
  }
  return std::nullopt;
}

}  // namespace

Diagnosis diagnose(const std::vector<std::optional<RankReport>>& reports, Millis window) {
  Graph g(reports);
  Diagnosis d;
  const std::string no_answer =
      "no answer on the side channel within " + seconds(window) + ": stopped, dead or busy outside comm";
  std::ostringstream os;
  os << "comm deadline: ";
  std::vector<int> silent;
  for (int r : g.ends())
    if (!g.answered(r)) silent.push_back(r);
  const std::optional<Divergence> div = first_signature_divergence(g);
  std::string why;
  if (!silent.empty()) {
    d.behind = silent;
    // who waits on it directly
    std::vector<int> waiters;
    for (int r = 0; r < g.size(); ++r)
      for (const Edge& e : g.edges(r))
        if (std::find(silent.begin(), silent.end(), e.to) != silent.end() &&
            std::find(waiters.begin(), waiters.end(), r) == waiters.end())
          waiters.push_back(r);
    why = no_answer;
    if (!waiters.empty()) why += "; " + ranks_text(waiters) + (waiters.size() == 1 ? " waits" : " wait") + " on it";
  } else if (div && !div->odd.empty()) {
    d.behind = div->odd;
    why = "its collectives differ from the others' (first divergence below)";
  } else {
    // the fewest ranks that have not issued what others wait in
    std::map<std::string, std::set<int>> targets;  // group key of the waiter -> ranks that have not issued
    std::map<std::string, std::string> names;      // group key -> its name
    for (int r = 0; r < g.size(); ++r) {
      if (!g.waiting(r) || g.report(r).wait.group.empty()) continue;
      const WaitSnapshot& w = g.report(r).wait;
      for (const Edge& e : g.edges(r))
        if (e.not_issued) {
          targets[group_key(w.group, w.members)].insert(e.to);
          names[group_key(w.group, w.members)] = w.group;
        }
    }
    const std::set<int>* best = nullptr;
    std::string best_key;
    for (const auto& [k, t] : targets)
      if (!best || t.size() < best->size()) {
        best = &t;
        best_key = k;
      }
    if (best) {
      d.behind.assign(best->begin(), best->end());
      why = std::string(best->size() == 1 ? "it has" : "they have") +
            " not issued the collective the others wait in, in group '" + names[best_key] + "'";
    }
  }
  if (!div) {
    // two groups' collectives issued in different orders: a waits in G, which b has not issued,
    // and b in H, which a has not
    for (int a = 0; a < g.size() && d.divergence.empty(); ++a)
      for (const Edge& e : g.edges(a)) {
        if (!e.not_issued || !g.waiting(e.to)) continue;
        const int b = e.to;
        for (const Edge& back : g.edges(b))
          if (back.to == a && back.not_issued && g.report(a).wait.group != g.report(b).wait.group) {
            const WaitSnapshot &wa = g.report(a).wait, &wb = g.report(b).wait;
            d.divergence = "rank " + std::to_string(a) + " waits in " + wa.op + " seq " + std::to_string(wa.seq) +
                           " of '" + wa.group + "', which rank " + std::to_string(b) + " has not issued, while rank " +
                           std::to_string(b) + " waits in " + wb.op + " seq " + std::to_string(wb.seq) + " of '" +
                           wb.group + "', which rank " + std::to_string(a) +
                           " has not issued: the two groups' collectives were issued in different orders";
            break;
          }
        if (!d.divergence.empty()) break;
      }
  } else {
    d.divergence = div->text;
  }
  if (d.behind.empty())
    os << "no rank found behind (every rank answered and none waits on another)";
  else
    os << ranks_text(d.behind) << (d.behind.size() == 1 ? " is" : " are") << " behind: " << why;
  // where each rank waits (the first 16)
  os << ". Waits: ";
  const int shown = std::min(g.size(), 16);
  for (int r = 0; r < shown; ++r) os << (r ? "; " : "") << g.wait_text(r);
  if (shown < g.size()) os << "; and " << g.size() - shown << " more ranks";
  os << ". First divergence: "
     << (d.divergence.empty() ? std::string("none (the rings agree seq by seq in every group)") : d.divergence);
  d.line = os.str();
  return d;
}

}  // namespace st::comm
