// The command lines the CLI hands back to its user: an error that needs more ranks names the
// `launch/mpirun.sh -n N -- shardtrain train ...` that runs it, and `shardtrain plan` prints one
// for each layout it lists. The program is named as it was started (argv[0], set by main()), the
// arguments are shell-quoted where they need it, so the line runs as printed from the checkout's
// root (where README.md's commands run).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace st::launch {

void set_program_path(const std::string& argv0);
const std::string& program_path();  // argv[0]; "build/shardtrain" until set

// `word` as one shell word: as it is when it holds only safe characters, else in single quotes.
std::string shell_quote(const std::string& word);

// "launch/mpirun.sh [--gpus] -n N [MPIRUN_OPTIONS] -- PROGRAM COMMAND ARGS" (gpus: one rank per
// GPU, --device cuda); for one rank without --gpus or options, "PROGRAM COMMAND ARGS".
std::string launch_line(int64_t ranks, bool gpus, const std::string& command, const std::vector<std::string>& args,
                        const std::vector<std::string>& mpirun_options = {});

}  // namespace st::launch
