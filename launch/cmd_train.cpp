// `shardtrain train`: options (YAML + flags), the built-in corpus when --data is empty, then the
// trainer.
#include <iostream>

#include "launch/commands.h"
#include "launch/config.h"
#include "launch/corpus.h"

namespace st::launch {

int cmd_train(const std::vector<std::string>& args) {
  if (OptionTable::wants_help(args)) {
    std::cout << train_usage();
    return 0;
  }
  runtime::TrainConfig cfg = parse_train_args(args);
  if (cfg.data.empty()) cfg.data = builtin_corpus_path();
  return train_command(cfg);
}

}  // namespace st::launch
