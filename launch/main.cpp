// shardtrain: the command-line entry point. Dispatches to a subcommand; this is the one place
// where an error becomes an exit code: a one-line cause on stderr (naming the MPI rank when
// there is one, printed once when every rank fails alike) and exit 1, or 2 for usage errors;
// when MPI runs with several ranks, MPI_Abort ends every rank so none hangs in a collective
// (launch/error_report.h).
#include <iostream>
#include <string>
#include <vector>

#include "launch/build_info.h"
#include "launch/commands.h"
#include "launch/error_report.h"
#include "launch/launch_command.h"
#include "launch/options.h"

namespace {

const char* kUsage =
    "usage: shardtrain <command> [--help] [options]\n"
    "\n"
    "commands:\n"
    "  train    train a model (shardtrain train --help lists every option)\n"
    "  generate continue prompts from a checkpoint (KV cache, batches, --tp/--pp under mpirun)\n"
    "  plan     each rank's memory for a layout, or the layouts that fit a device (plan --help)\n"
    "  sample   generate with sample's defaults (temperature 1)\n"
    "  prepare  tokenize a text file into an llm.c .bin token file\n"
    "  info     build features, library versions and devices\n"
    "  version  the version and the commit it was built from (also --version)\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  st::launch::set_program_path(argv[0]);  // the launch lines errors and `plan` print
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
    if (cmd == "--version" || cmd == "version") {
      std::cout << "shardtrain " << st::launch::build_info().version << " (commit " << st::launch::build_info().commit
                << ")\n";
      return 0;
    }
    if (cmd == "train") return st::launch::cmd_train(rest);
    if (cmd == "generate") return st::launch::cmd_generate(rest);
    if (cmd == "plan") return st::launch::cmd_plan(rest);
    if (cmd == "sample") return st::launch::cmd_sample(rest);
    if (cmd == "prepare") return st::launch::cmd_prepare(rest);
    if (cmd == "info") return st::launch::cmd_info(rest);
    throw st::launch::UsageError("unknown command '" + cmd + "' (commands: train, generate, sample, plan, prepare, info, version)");
  } catch (const st::comm::DeadlineError& e) {
    return st::launch::report_deadline(e);
  } catch (const st::launch::UsageError& e) {
    return st::launch::report_error(e.what(), 2);
  } catch (const std::exception& e) {
    return st::launch::report_error(e.what(), 1);
  } catch (...) {
    return st::launch::report_error("unknown exception", 1);
  }
}
