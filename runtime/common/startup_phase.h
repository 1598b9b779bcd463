// Where a process is in its start-up, for a watchdog outside the runtime (launch/startup_watchdog.h:
// a rank that does not arrive at a phase within --timeout-s is named, and the job ends). The
// runtime says when it reaches a phase; the launcher sets what that does. Without a hook (tests,
// one process) nothing happens.
//   startup_phase("loading")   communicators and the options' agreement done: the model, the data
//   startup_phase("")          start-up is over (the first step runs under the communicators'
//                              own deadlines)
#pragma once
#include <functional>
#include <string>

namespace st::runtime {

void set_startup_hook(std::function<void(const std::string& phase)> hook);
void startup_phase(const std::string& phase);

}  // namespace st::runtime
