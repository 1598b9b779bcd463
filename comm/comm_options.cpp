// The communicator options' parsers and checks (see comm_options.h).
#include "comm/comm_options.h"

#include <cerrno>
#include <cstdlib>

#include "tensor/error.h"

namespace st::comm {

const char* p2p_mode_name(P2PMode m) { return m == P2PMode::strict ? "strict" : "default"; }

void CommOptions::validate() const {
  ST_CHECK(max_count >= 1 && max_count <= INT_MAX, ValueError,
           "comm options: max_count must be in [1, 2147483647], got " << max_count);
  ST_CHECK(flight_recorder_entries >= 0 && flight_recorder_entries <= (1 << 20), ValueError,
           "comm options: flight_recorder_entries must be in [0, 1048576], got " << flight_recorder_entries);
}

bool parse_comm_debug(const std::string& text, const std::string&) { return !text.empty() && text != "0"; }

P2PMode parse_p2p_mode(const std::string& text, const std::string& source) {
  if (text.empty() || text == "default") return P2PMode::standard;
  if (text == "strict") return P2PMode::strict;
  ST_THROW(ValueError, source << " must be 'default' or 'strict' (or unset), got '" << text << "'");
}

int64_t parse_max_count(const std::string& text, const std::string& source) {
  if (text.empty()) return INT_MAX;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  ST_CHECK(errno == 0 && *end == '\0' && n >= 1 && n <= INT_MAX, ValueError,
           source << " must be an integer in [1, 2147483647] (or unset), got '" << text << "'");
  return n;
}

CudaAwareMode parse_cuda_aware(const std::string& text, const std::string& source) {
  if (text.empty()) return CudaAwareMode::ask;
  ST_CHECK(text == "0" || text == "1", ValueError, source << " must be 0 or 1, got '" << text << "'");
  return text == "1" ? CudaAwareMode::on : CudaAwareMode::off;
}

}  // namespace st::comm
