// The subcommands of `shardtrain`. Each takes the arguments after its name and returns the
// process exit code (0 success, 2 usage); errors are thrown (UsageError → 2, others → 1) and
// reported by launch/main.cpp.
#pragma once
#include <string>
#include <vector>

#include "runtime/generate/generate_config.h"
#include "runtime/setup/train_config.h"

namespace st::launch {

int cmd_train(const std::vector<std::string>& args);
int cmd_sample(const std::vector<std::string>& args);  // generate, with sample's defaults
int cmd_generate(const std::vector<std::string>& args, const std::string& cmd = "generate");
int cmd_prepare(const std::vector<std::string>& args);
int cmd_info(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);

// Generate options (`command`: "generate" or "sample", whose default temperature is 1); with
// `help` set, only fills *help with the --help text.
runtime::GenerateConfig parse_generate_args(const std::vector<std::string>& args, std::string* help,
                                            const std::string& command);
runtime::GenerateConfig parse_sample_args(const std::vector<std::string>& args, std::string* help);

// Tokenizes a text file into an llm.c .bin file; returns the token count.
int64_t prepare_tokens(const std::string& text_path, const std::string& out_path, const std::string& tokenizer);
// tokenizer "gpt2" reads vocab_dir/vocab.json + vocab_dir/merges.txt (launch/bpe_tokenizer.h).
int64_t prepare_tokens(const std::string& text_path, const std::string& out_path, const std::string& tokenizer,
                       const std::string& vocab_dir);

}  // namespace st::launch
