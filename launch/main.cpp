// shardtrain: the command-line entry point. Dispatches to a subcommand; this is the one place
// where an error becomes an exit code: a one-line cause on stderr (naming the MPI rank when
// there is one) and exit 1, or 2 for usage errors; when MPI runs with several ranks, MPI_Abort
// ends every rank so none hangs in a collective.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "launch/commands.h"
#include "launch/options.h"

namespace {

const char* kUsage =
    "usage: shardtrain <command> [--help] [options]\n"
    "\n"
    "commands:\n"
    "  train    train a model (shardtrain train --help lists every option)\n"
    "  sample   generate text from a checkpoint\n"
    "  prepare  tokenize a text file into an llm.c .bin token file\n"
    "  info     build features, library versions and devices\n";

// "[rank R] " under a launcher that sets a rank (Open MPI, PMI/MPICH/Slurm's PMI, srun), else "".
std::string rank_prefix() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return std::string("[rank ") + v + "] ";
  return "";
}

int report(const std::string& what, int code) {
  std::string line = what;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  // one write() of the whole line: ranks sharing a pipe (mpirun) never interleave inside it
  const std::string out = rank_prefix() + "shardtrain: error: " + line + "\n";
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty()) {
      std::cerr << kUsage;
      return 2;
    }
    const std::string cmd = args[0];
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::cout << kUsage;
      return 0;
    }
    if (cmd == "train") return st::launch::cmd_train(rest);
    if (cmd == "sample") return st::launch::cmd_sample(rest);
    if (cmd == "prepare") return st::launch::cmd_prepare(rest);
    if (cmd == "info") return st::launch::cmd_info(rest);
    throw st::launch::UsageError("unknown command '" + cmd + "' (commands: train, sample, prepare, info)");
  } catch (const st::launch::UsageError& e) {
    return report(e.what(), 2);
  } catch (const std::exception& e) {
    return report(e.what(), 1);
  } catch (...) {
    return report("unknown exception", 1);
  }
}
