// A rank's report: built from the live communicators, as bytes and as JSON (see flight_report.h).
#include "comm/flight_report.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include "comm/communicator.h"
#include "tensor/dtype.h"
#include "tensor/error.h"

namespace st::comm {

std::string group_key(const std::string& name, const std::vector<int>& members) {
  std::string k = name + " [";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i) k += ",";
    k += std::to_string(members[i]);
  }
  return k + "]";
}

std::string GroupReport::key() const { return group_key(name, members); }

const GroupReport* RankReport::group(const std::string& key) const {
  for (const GroupReport& g : groups)
    if (g.key() == key) return &g;
  return nullptr;
}

RankReport build_rank_report(int world_rank) {
  RankReport r;
  r.world_rank = world_rank;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) r.host = host;
  r.pid = static_cast<int64_t>(getpid());
  r.now_ns = flight_now_ns();
  r.wait = WaitingScope::snapshot();
  for (const auto& st : live_comm_states()) {
    if (st->world_ranks().empty()) continue;  // still being created
    GroupReport g;
    g.name = st->name();
    g.members = st->world_ranks();
    g.rank = st->rank();
    const CommState::Progress& p = st->progress();
    g.collectives = p.collectives;
    g.p2p = p.p2p;
    g.sends_to = p.sends_to;
    g.recvs_from = p.recvs_from;
    g.broken = st->broken();
    if (st->recorder()) g.entries = st->recorder()->snapshot();
    r.groups.push_back(std::move(g));
  }
  return r;
}

namespace {

// Little-endian-free: the ranks of a job run one build on one architecture.
class Writer {
 public:
  void i64(int64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    out_ += s;
  }
  template <class T>
  void ints(const std::vector<T>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (T x : v) i64(static_cast<int64_t>(x));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  int64_t i64() {
    ST_CHECK(pos_ + sizeof(int64_t) <= in_.size(), CommError, "flight report: truncated at byte " << pos_);
    int64_t v;
    std::memcpy(&v, in_.data() + pos_, sizeof(v));
    pos_ += sizeof(v);
    return v;
  }
  size_t count(size_t each) {
    const int64_t n = i64();
    ST_CHECK(n >= 0 && static_cast<size_t>(n) <= (in_.size() - pos_) / each, CommError,
             "flight report: bad length " << n << " at byte " << pos_);
    return static_cast<size_t>(n);
  }
  std::string str() {
    const size_t n = count(1);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <class T>
  std::vector<T> ints() {
    std::vector<T> v(count(sizeof(int64_t)));
    for (T& x : v) x = static_cast<T>(i64());
    return v;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

constexpr int64_t kMagic = 0x5354464c49474854;  // "STFLIGHT"

}  // namespace

std::string encode_report(const RankReport& r) {
  Writer w;
  w.i64(kMagic);
  w.i64(r.world_rank);
  w.str(r.host);
  w.i64(r.pid);
  w.i64(r.now_ns);
  const WaitSnapshot& s = r.wait;
  w.i64(static_cast<int64_t>(s.state));
  w.str(s.group);
  w.ints(s.members);
  w.i64(s.rank);
  w.str(s.op);
  w.i64(static_cast<int64_t>(s.seq));
  w.i64(s.collective ? 1 : 0);
  w.i64(static_cast<int64_t>(s.peers.size()));
  for (const auto& p : s.peers) {
    w.i64(p.world_rank);
    w.i64(static_cast<int64_t>(p.send_index));
    w.i64(static_cast<int64_t>(p.recv_index));
  }
  w.str(s.text);
  w.i64(static_cast<int64_t>(r.groups.size()));
  for (const GroupReport& g : r.groups) {
    w.str(g.name);
    w.ints(g.members);
    w.i64(g.rank);
    w.i64(static_cast<int64_t>(g.collectives));
    w.i64(static_cast<int64_t>(g.p2p));
    w.ints(g.sends_to);
    w.ints(g.recvs_from);
    w.i64(g.broken ? 1 : 0);
    w.i64(static_cast<int64_t>(g.entries.size()));
    for (const FlightEntry& e : g.entries)
      for (int64_t v : {static_cast<int64_t>(e.id), static_cast<int64_t>(e.seq), static_cast<int64_t>(e.op),
                        static_cast<int64_t>(e.peer), static_cast<int64_t>(e.dtype), static_cast<int64_t>(e.arg),
                        static_cast<int64_t>(e.root), e.count, e.bytes, e.tag, e.enqueued_ns, e.started_ns,
                        e.completed_ns})
        w.i64(v);
  }
  return w.take();
}

RankReport decode_report(const std::string& bytes) {
  Reader in(bytes);
  ST_CHECK(in.i64() == kMagic, CommError, "flight report: not a report");
  RankReport r;
  r.world_rank = static_cast<int>(in.i64());
  r.host = in.str();
  r.pid = in.i64();
  r.now_ns = in.i64();
  WaitSnapshot& s = r.wait;
  s.state = static_cast<WaitSnapshot::State>(in.i64());
  s.group = in.str();
  s.members = in.ints<int>();
  s.rank = static_cast<int>(in.i64());
  s.op = in.str();
  s.seq = static_cast<uint64_t>(in.i64());
  s.collective = in.i64() != 0;
  s.peers.resize(in.count(3 * sizeof(int64_t)));
  for (auto& p : s.peers) {
    p.world_rank = static_cast<int>(in.i64());
    p.send_index = static_cast<uint64_t>(in.i64());
    p.recv_index = static_cast<uint64_t>(in.i64());
  }
  s.text = in.str();
  r.groups.resize(in.count(1));
  for (GroupReport& g : r.groups) {
    g.name = in.str();
    g.members = in.ints<int>();
    g.rank = static_cast<int>(in.i64());
    g.collectives = static_cast<uint64_t>(in.i64());
    g.p2p = static_cast<uint64_t>(in.i64());
    g.sends_to = in.ints<uint64_t>();
    g.recvs_from = in.ints<uint64_t>();
    g.broken = in.i64() != 0;
    g.entries.resize(in.count(13 * sizeof(int64_t)));
    for (FlightEntry& e : g.entries) {
      e.id = static_cast<uint64_t>(in.i64());
      e.seq = static_cast<uint64_t>(in.i64());
      e.op = static_cast<FlightOp>(in.i64());
      e.peer = static_cast<int32_t>(in.i64());
      e.dtype = static_cast<int32_t>(in.i64());
      e.arg = static_cast<int32_t>(in.i64());
      e.root = static_cast<int32_t>(in.i64());
      e.count = in.i64();
      e.bytes = in.i64();
      e.tag = in.i64();
      e.enqueued_ns = in.i64();
      e.started_ns = in.i64();
      e.completed_ns = in.i64();
    }
  }
  ST_CHECK(in.done(), CommError, "flight report: trailing bytes");
  return r;
}

namespace {

std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      o += buf;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ",";
    o += std::to_string(v[i]);
  }
  return o + "]";
}

const char* state_name(WaitSnapshot::State s) {
  switch (s) {
    case WaitSnapshot::State::none: return "none";
    case WaitSnapshot::State::waiting: return "waiting";
    case WaitSnapshot::State::timed_out: return "timed_out";
  }
  return "?";
}

std::string dtype_text(int32_t d) {
  return d >= 0 && d <= static_cast<int32_t>(DType::i64) ? dtype_name(static_cast<DType>(d)) : "?";
}

}  // namespace

std::string report_json(const RankReport& r) {
  std::ostringstream os;
  const WaitSnapshot& s = r.wait;
  os << "{\"rank\": " << r.world_rank << ", \"host\": " << quoted(r.host) << ", \"pid\": " << r.pid
     << ", \"clock\": \"steady_ns\", \"now_ns\": " << r.now_ns << ",\n \"wait\": {\"state\": \""
     << state_name(s.state) << "\", \"group\": " << quoted(s.group) << ", \"members\": " << list(s.members)
     << ", \"op\": " << quoted(s.op) << ", \"seq\": " << s.seq << ", \"collective\": "
     << (s.collective ? "true" : "false") << ", \"peers\": [";
  for (size_t i = 0; i < s.peers.size(); ++i)
    os << (i ? ", " : "") << "{\"rank\": " << s.peers[i].world_rank << ", \"send_index\": " << s.peers[i].send_index
       << ", \"recv_index\": " << s.peers[i].recv_index << "}";
  os << "], \"text\": " << quoted(s.text) << "},\n \"groups\": [";
  for (size_t gi = 0; gi < r.groups.size(); ++gi) {
    const GroupReport& g = r.groups[gi];
    os << (gi ? ",\n  " : "\n  ") << "{\"name\": " << quoted(g.name) << ", \"members\": " << list(g.members)
       << ", \"rank\": " << g.rank << ", \"collectives_issued\": " << g.collectives << ", \"p2p_issued\": " << g.p2p
       << ", \"sends_to\": " << list(g.sends_to) << ", \"recvs_from\": " << list(g.recvs_from)
       << ", \"broken\": " << (g.broken ? "true" : "false") << ", \"entries\": [";
    for (size_t i = 0; i < g.entries.size(); ++i) {
      const FlightEntry& e = g.entries[i];
      const bool known = e.peer >= 0 && static_cast<size_t>(e.peer) < g.members.size();
      const int peer = known ? g.members[static_cast<size_t>(e.peer)] : -1;  // world rank
      os << (i ? ",\n    " : "\n    ") << "{\"id\": " << e.id << ", \"seq\": " << e.seq << ", \"op\": \""
         << flight_op_name(e.op) << "\", \"peer\": " << peer
         << ", \"dtype\": \"" << dtype_text(e.dtype) << "\", \"count\": " << e.count << ", \"bytes\": " << e.bytes
         << ", \"tag\": " << e.tag << ", \"reduce_op\": "
         << (e.arg >= 0 ? quoted(reduce_op_name(static_cast<ReduceOp>(e.arg))) : std::string("null"))
         << ", \"root\": " << e.root << ", \"enqueued_ns\": " << e.enqueued_ns << ", \"started_ns\": " << e.started_ns
         << ", \"completed_ns\": " << e.completed_ns << "}";
    }
    os << "]}";
  }
  os << "]}\n";
  return os.str();
}

}  // namespace st::comm
