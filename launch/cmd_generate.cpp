// `shardtrain generate` (alias `sample`): options, the model (each rank loads only its pipeline
// stage and tp shard), the tokenizer, the generation loop (runtime/generate/generation.h), the text
// on stdout (world rank 0) and the numbers on stderr. MPI as in `train`: without mpirun a world
// of one; world = tp × pp ranks.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "comm/make_communicator.h"
#include "comm/mpi_env.h"
#include "comm/process_grid.h"
#include "launch/checkpoint_paths.h"
#include "launch/comm_env.h"
#include "launch/commands.h"
#include "launch/build_info.h"
#include "launch/gpu_env.h"
#include "launch/error_report.h"
#include "launch/launch_command.h"
#include "launch/options.h"
#include "launch/startup_watchdog.h"
#include "launch/text_codec.h"
#include "runtime/common/partition.h"
#include "runtime/data/utf8.h"
#include "runtime/generate/generation.h"
#include "runtime/generate/sampler.h"
#include "runtime/setup/model_registry.h"

namespace st::launch {
namespace {

// after "shardtrain generate" or "shardtrain sample"
const char* kUsageArgs =
    " --checkpoint DIR --prompt TEXT [--prompt TEXT ... | --prompts FILE]\n"
    "    [--max-new-tokens N] [--temperature F --top-k N --top-p F --stop-token ID --seed N]\n"
    "    [--tokenizer byte|gpt2|DIR --vocab DIR] [--cache 0|1]\n"
    "    [--tp N --pp N --micro-batches N --timeout-s F]\n"
    "    (under mpirun for --tp/--pp)";

}  // namespace

runtime::GenerateConfig parse_generate_args(const std::vector<std::string>& args, std::string* help,
                                            const std::string& command) {
  runtime::GenerateConfig c;
  if (command == "sample") c.temperature = 1.0;  // sample's default since it existed
  OptionTable t(command, false);
  auto num = [](auto& v) {  // %g-like: 0.9, 1e-05, not 0.900000
    return [&v] {
      std::ostringstream o;
      o << v;
      return o.str();
    };
  };
  t.add({"checkpoint", "model", "DIR",
         "a run's --checkpoint-dir (its newest step), one step folder of it, or a HF GPT-2 dir (config.json + "
         "model.safetensors or its sharded index) (required)",
         false, OptionTable::bind(c.checkpoint), nullptr});
  t.add({"init-from", "model", "DIR", "the same as --checkpoint (a Hugging Face save_pretrained directory)", false,
         OptionTable::bind(c.checkpoint), nullptr});
  t.add({"prompt", "input", "TEXT", "a prompt; repeat for a batch", false,
         [&c](const std::string& v) { c.prompts.push_back(v); }, nullptr});
  t.add({"prompts", "input", "FILE", "one prompt per line (after any --prompt)", false, OptionTable::bind(c.prompts_file), nullptr});
  t.add({"tokenizer", "input", "byte|gpt2|DIR",
         "byte (token = byte value, vocab 256), gpt2 (byte-level BPE, needs --vocab), or a Hugging Face tokenizer.json "
         "(or DIR holding one); default: the model folder's tokenizer.json if it has one, else byte",
         false,
         [&c](const std::string& v) {
           if (!TextCodec::known(v))
             ST_THROW(ValueError, "expected byte, gpt2, a tokenizer.json or a directory holding one, got '" << v << "'");
           c.tokenizer = v;
           c.tokenizer_given = true;
         },
         [&c] { return c.tokenizer; }});
  t.add({"vocab", "input", "DIR", "gpt2 tokenizer: directory with GPT-2's vocab.json and merges.txt", false,
         OptionTable::bind(c.vocab), nullptr});
  t.add({"max-new-tokens", "generation", "N", "tokens to generate per prompt", false, OptionTable::bind(c.max_new_tokens),
         num(c.max_new_tokens)});
  t.add({"tokens", "generation", "N", "the same as --max-new-tokens", false, OptionTable::bind(c.max_new_tokens), nullptr});
  t.add({"temperature", "generation", "F", "softmax temperature; 0: greedy (deterministic)", false, OptionTable::bind(c.temperature),
         num(c.temperature)});
  t.add({"top-k", "generation", "N", "sample among the k most likely tokens; 0: all", false, OptionTable::bind(c.top_k), num(c.top_k)});
  t.add({"top-p", "generation", "F", "then among the most likely tokens holding probability F (nucleus); 1: all", false,
         OptionTable::bind(c.top_p), num(c.top_p)});
  t.add({"stop-token", "generation", "ID", "a prompt's continuation ends at this token id (not printed); -1: none", false,
         OptionTable::bind(c.stop_token), num(c.stop_token)});
  t.add({"seed", "generation", "N", "random seed (prompt r draws from seed + r)", false, OptionTable::bind(c.seed), num(c.seed)});
  t.add({"cache", "generation", "0|1", "KV cache: the prompt runs once, then one position per token (0: recompute everything)",
         false, OptionTable::bind(c.cache), [&c] { return std::string(c.cache ? "1" : "0"); }});
  t.add({"tp", "layout", "N", "tensor-parallel ranks (heads and the KV cache split)", false, OptionTable::bind(c.tp), num(c.tp)});
  t.add({"pp", "layout", "N", "pipeline stages (each loads only its layers)", false, OptionTable::bind(c.pp), num(c.pp)});
  t.add({"micro-batches", "layout", "N", "pipeline: the batch splits into N micro-batches that overlap across stages; 0: pp",
         false, OptionTable::bind(c.micro_batches), num(c.micro_batches)});
  t.add({"timeout-s", "layout", "F",
         "a collective slower than this ends every rank with one diagnosis naming the rank that is behind (as "
         "train's --timeout-s)",
         false, OptionTable::bind(c.timeout_s), num(c.timeout_s)});
  t.add({"allow-unchecked", "model", "0|1",
         "read a checkpoint of ours that carries no checksums (written before 2026-12-03, or stripped of them) as it "
         "is; 0: refused",
         true, OptionTable::bind(c.allow_unchecked), [&c] { return std::string(c.allow_unchecked ? "1" : "0"); }});
  t.add({"device", "layout", runtime::choices_of<Device>(), "where the model runs", false, OptionTable::bind_enum(c.device),
         [&c] { return runtime::to_string(c.device); }});
  t.add({"ids-out", "input", "FILE", "also write the prompt and generated token ids as JSON {\"prompts\", \"tokens\"}", false,
         OptionTable::bind(c.ids_out), nullptr});
  if (help) {
    *help = t.help("shardtrain " + command + kUsageArgs +
                   (command == "sample" ? "\n    (generate with temperature 1 by default)" : ""));
    return c;
  }
  t.parse_flags(args);
  const std::string& cmd = command;
  if (c.device == Device::cuda)  // the reason `shardtrain info` gives (launch/build_info.h), first
    if (const std::string why = cuda_unusable(); !why.empty())
      ST_THROW(UsageError, cmd << ": --device cuda: " << why << "; --device cpu runs on the CPU");
  if (c.checkpoint.empty()) ST_THROW(UsageError, cmd << ": --checkpoint DIR (or --init-from DIR) is required");
  // a model directory (a step folder, Hugging Face's) or a run's checkpoint root: its newest step
  // (launch/checkpoint_paths.h); a missing one names a similar path that exists
  // (checked here; a root stays a root: the sampler takes its newest complete step and says which
  // incomplete ones it passed over)
  resolve_model_dir(c.checkpoint, cmd + ": --checkpoint");
  if (!c.prompts_file.empty()) {
    std::ifstream in(c.prompts_file);
    if (!in) ST_THROW(UsageError, cmd << ": --prompts " << c.prompts_file << " cannot be read");
    for (std::string line; std::getline(in, line); ++c.file_prompts) c.prompts.push_back(line);
    if (c.file_prompts == 0) ST_THROW(UsageError, cmd << ": --prompts " << c.prompts_file << " holds no line");
  }
  if (c.prompts.empty()) c.prompts.push_back(cmd == "sample" ? "\n" : "");  // sample: a new line
  if (c.max_new_tokens < 0) ST_THROW(UsageError, cmd << ": --max-new-tokens must be >= 0, got " << c.max_new_tokens);
  if (c.temperature < 0) ST_THROW(UsageError, cmd << ": --temperature must be >= 0, got " << c.temperature);
  if (c.top_k < 0) ST_THROW(UsageError, cmd << ": --top-k must be >= 0, got " << c.top_k);
  if (!(c.top_p > 0 && c.top_p <= 1)) ST_THROW(UsageError, cmd << ": --top-p must be in (0, 1], got " << c.top_p);
  if (c.tp < 1 || c.pp < 1) ST_THROW(UsageError, cmd << ": --tp and --pp must be >= 1");
  if (c.micro_batches < 0) ST_THROW(UsageError, cmd << ": --micro-batches must be >= 0");
  if (!(c.timeout_s > 0)) ST_THROW(UsageError, cmd << ": --timeout-s must be positive, got " << c.timeout_s);
  if (c.stop_token < -1) ST_THROW(UsageError, cmd << ": --stop-token must be a token id or -1 (none), got " << c.stop_token);
  if (!c.cache && c.pp > 1) ST_THROW(UsageError, cmd << ": --pp needs the KV cache (--cache 1)");
  return c;
}

runtime::GenerateConfig parse_sample_args(const std::vector<std::string>& args, std::string* help) {
  return parse_generate_args(args, help, "sample");
}

int run_generate(const runtime::GenerateConfig& c, const std::string& cmd, const std::vector<std::string>& args) {
  const comm::CommSetup setup =
      comm::make_communicator(c.device == Device::cuda ? "auto" : "mpi",
                              std::chrono::milliseconds(static_cast<int64_t>(c.timeout_s * 1000)), comm_options_from_env());
  const auto& world = setup.world;
  ST_CHECK(world->size() == c.tp * c.pp, ValueError,
           cmd << ": --tp " << c.tp << " x --pp " << c.pp << " needs " << c.tp * c.pp << " ranks, the job has "
               << world->size() << (world->size() == 1 ? " (started without mpirun)" : "") << ": "
               << launch_line(c.tp * c.pp, c.device == Device::cuda, cmd, args));
  comm::ProcessGrid grid(world, 1, static_cast<int>(c.tp), static_cast<int>(c.pp));
  const int stage = grid.coord().pp;
  // no --tokenizer: the model folder's tokenizer.json, where it has one (Hugging Face's save_pretrained
  // folders and checkpoints that carry one), said on the console
  std::string tokenizer = c.tokenizer;
  if (!c.tokenizer_given) {
    std::string dir = resolve_model_dir(c.checkpoint, cmd + ": --checkpoint");
    if (!runtime::HfTokenizer::found_at(dir)) dir = c.checkpoint;  // a run's root may hold it beside its steps
    if (std::filesystem::is_directory(dir) && runtime::HfTokenizer::found_at(dir)) {
      tokenizer = dir;
      if (world->rank() == 0)
        std::cerr << cmd << ": tokenizer " << (std::filesystem::path(dir) / "tokenizer.json").string()
                  << " (the model folder's; --tokenizer chooses another)" << std::endl;
    }
  }
  TextCodec codec(tokenizer, c.vocab);
  // The stage's layers: cut uniformly by layer count over the description (no weights read).
  runtime::ModelBuild build;
  build.tp = c.tp > 1 ? grid.tp_group() : nullptr;
  std::string from;
  std::shared_ptr<runtime::LanguageModel> model;
  if (c.pp > 1) {
    auto probe = runtime::load_model_for_sampling(c.checkpoint, &from, runtime::ModelBuild{{runtime::LayerRange{0, 1}}, nullptr, 0},
                                                  nullptr, c.allow_unchecked);
    const runtime::Partition part = runtime::partition_uniform(probe->total_layers(), static_cast<int>(c.pp));
    build.layers = {runtime::LayerRange{part.begin(stage), part.end(stage)}};
  }
  std::string note;  // incomplete checkpoints passed over
  startup_watchdog_phase("loading");
  model = runtime::load_model_for_sampling(c.checkpoint, &from, build, &note, c.allow_unchecked);
  stop_startup_watchdog();  // the generation's collectives run under the communicator's deadline
  if (!note.empty() && world->rank() == 0) std::cerr << cmd << ": " << note << std::endl;
  codec.check_model(model->vocab_size());
  // a stop token the model cannot produce would never stop anything (issue 55: 999999 accepted)
  ST_CHECK(c.stop_token < model->vocab_size(), UsageError,
           cmd << ": --stop-token " << c.stop_token << " is outside the model's vocabulary of " << model->vocab_size()
               << " (ids 0 ... " << model->vocab_size() - 1 << "; -1: none)");
  if (c.device == Device::cuda) model->move_parameters(Device::cuda);
  std::vector<std::vector<int64_t>> prompts;
  for (const std::string& p : c.prompts) prompts.push_back(codec.encode(p));
  for (size_t r = 0; r < prompts.size(); ++r) {  // before anything is printed, naming the flag or line
    const std::string where = r < c.prompts.size() - c.file_prompts
                                  ? "--prompt #" + std::to_string(r + 1)
                                  : "--prompts " + c.prompts_file + " line " + std::to_string(r + 1 - (c.prompts.size() - c.file_prompts));
    ST_CHECK(!prompts[r].empty(), ValueError, cmd << ": " << where << " is empty (a prompt needs at least one token)");
    ST_CHECK(static_cast<int64_t>(prompts[r].size()) <= model->context_length(), ValueError,
             cmd << ": " << where << " is " << prompts[r].size() << " tokens, longer than the model's context of "
                 << model->context_length());
  }
  const bool printer = world->rank() == 0, stream = prompts.size() == 1;
  std::vector<std::string> text(prompts.size());
  for (size_t r = 0; r < prompts.size(); ++r) text[r] = c.prompts[r];
  if (printer && stream) std::cout << text[0] << std::flush;
  // the output is the decode of all the new ids of a row together (a tokenizer.json's decoder
  // joins tokens: a character split between byte tokens, Metaspace's and Strip's first-token rules);
  // streamed, each token prints what it adds to that decode, holding back a trailing U+FFFD that
  // the next byte may complete
  std::vector<int64_t> streamed;
  std::string printed;
  auto sink = [&](size_t, int64_t tok) {
    if (!printer || !stream) return;
    streamed.push_back(tok);
    std::string now = codec.decode(streamed);
    while (now.size() >= 3 && now.compare(now.size() - 3, 3, runtime::kReplacementChar) == 0) now.resize(now.size() - 3);
    if (now.size() > printed.size() && now.compare(0, printed.size(), printed) == 0) {
      std::cout << now.substr(printed.size()) << std::flush;
      printed = now;
    }
  };
  runtime::GenerationOptions opt;
  opt.max_new_tokens = c.max_new_tokens;
  opt.temperature = c.temperature;
  opt.top_k = c.top_k;
  opt.top_p = c.top_p;
  opt.stop_token = c.stop_token;
  opt.seed = c.seed;
  opt.use_cache = c.cache;
  opt.micro_batches = c.micro_batches > 0 ? c.micro_batches : c.pp;
  runtime::GenerationResult res;
  if (c.pp > 1) {
    // the residual width a stage sends, from the model's description (any decoder family)
    const runtime::ModelDescription desc =
        runtime::describe_model({{"family", model->family()}, {"config", model->config_json()}}, 1);
    ST_CHECK(desc.decoder.has_value(), ValueError, "generate --pp: the " << model->family() << " model is not a decoder");
    const int64_t hidden = desc.decoder->d_model;
    res = runtime::generate_pipelined(*model, grid.pp_group(), hidden, prompts, opt, c.device, sink);
  } else {
    res = runtime::generate_tokens(*model, prompts, opt, c.device, sink);
  }
  int64_t mine = res.cache_bytes, all = mine, made = 0;
  if (world->size() > 1) {  // through the communicator: under its deadline, as every collective here
    const Device dev = std::string(world->backend()) == "nccl" ? Device::cuda : Device::cpu;
    Tensor sum = Tensor::from_vector(std::vector<int64_t>{mine}, {1}).to(dev);  // (1)
    world->all_reduce(sum)->wait();
    all = sum.to(Device::cpu).data<int64_t>()[0];
  }
  for (const auto& t : res.tokens) made += static_cast<int64_t>(t.size());
  if (printer && !c.ids_out.empty()) {
    std::ofstream f(c.ids_out);
    f << nlohmann::json{{"prompts", prompts}, {"tokens", res.tokens}}.dump() << "\n";
    if (!f) ST_THROW(IOError, cmd << ": --ids-out " << c.ids_out << " cannot be written");
  }
  if (printer) {
    if (stream) {
      const std::string all = codec.decode(res.tokens[0]);
      if (all.compare(0, printed.size(), printed) == 0) std::cout << all.substr(printed.size());
      else std::cout << "\n" << cmd << ": (the decode of all the new tokens differs from what was streamed:) " << all;
      std::cout << std::endl;
    } else {
      for (size_t r = 0; r < text.size(); ++r) std::cout << "[" << r << "] " << text[r] + codec.decode(res.tokens[r]) << "\n";
      std::cout << std::flush;
    }
    std::cerr << cmd << ": " << from << " (" << model->family() << ", " << model->num_parameters() << " parameters on rank 0), "
              << prompts.size() << " prompt(s), " << made << " new tokens in " << res.seconds << " s: "
              << (res.seconds > 0 ? static_cast<double>(made) / res.seconds : 0.0) << " tokens/s ("
              << (c.cache ? "KV cache" : "no cache") << ", prompt pass " << res.prompt_seconds * 1e3 << " ms), KV cache "
              << mine << " bytes on rank 0, " << all << " on all " << world->size() << " ranks; temperature "
              << c.temperature << ", top-k " << c.top_k << ", top-p " << c.top_p << ", seed " << c.seed << "\n";
    // a row that filled the context stopped short of --max-new-tokens: say so, not in silence
    const int64_t ctx = model->context_length();
    for (size_t r = 0; r < prompts.size(); ++r) {
      const int64_t got = static_cast<int64_t>(res.tokens[r].size()), len = static_cast<int64_t>(prompts[r].size());
      if (got >= c.max_new_tokens || len + got < ctx) continue;  // all it asked, or a stop token
      std::cerr << cmd << ": " << (prompts.size() > 1 ? "prompt #" + std::to_string(r + 1) + " " : std::string())
                << "stopped after " << got << " of the " << c.max_new_tokens << " new tokens asked: with its " << len
                << " prompt tokens that fills the model's context of " << ctx
                << " tokens, the most it can see (longer text needs a model trained with a longer --seq-len)\n";
    }
  }
  return 0;
}

int cmd_generate(const std::vector<std::string>& args, const std::string& cmd) {
  if (OptionTable::wants_help(args)) {
    std::string h;
    parse_generate_args(args, &h, cmd);
    std::cout << h;
    return 0;
  }
  start_startup_watchdog(args, runtime::GenerateConfig{}.timeout_s);  // to the first token: launch/startup_watchdog.h
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    comm::apply_mpi_defaults();
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  startup_watchdog_phase("communicator set-up");
  prepare_error_agreement();
  const runtime::GenerateConfig c = parse_generate_args(args, nullptr, cmd);
  apply_gpu_environment();
  const int rc = run_generate(c, cmd, args);
  release_error_agreement();
  MPI_Finalize();
  return rc;
}

int cmd_sample(const std::vector<std::string>& args) { return cmd_generate(args, "sample"); }

}  // namespace st::launch
