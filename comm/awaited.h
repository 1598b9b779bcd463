// Awaited: what one operation waits for, in the terms the timeout diagnosis uses — a collective
// (every other rank of the group) or, for point to point, each peer and how many transfers with
// it this operation's completion needs. Set by Communicator on every Work it returns.
#pragma once
#include <cstdint>
#include <vector>

namespace st::comm {

struct Awaited {
  bool collective = false;
  // Point to point: per peer (group rank), the 1-based index — counted per direction over the
  // communicator's life — of this operation's last send to and last receive from it (0: none).
  struct Transfer {
    int peer = 0;
    uint64_t send_index = 0;
    uint64_t recv_index = 0;
  };
  std::vector<Transfer> transfers;
};

}  // namespace st::comm
