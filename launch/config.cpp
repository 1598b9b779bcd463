// The train option table, its validation and --init-from resolution. Field names are those of
// runtime/setup/train_config.h; flag names are docs/design.md's (kebab-case).
#include "launch/config.h"
#include "launch/run_dir.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "launch/checkpoint_paths.h"

#include "runtime/data/data_spec.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/common/json_io.h"
#include "runtime/setup/model_registry.h"
#include "runtime/setup/resume_model.h"

namespace st::launch {
namespace fs = std::filesystem;
using runtime::TrainConfig;

namespace {
std::string fmt(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
// Whether `p` is a regular file (want_dir: a directory); never throws: `why` gets the system's
// reason when there is one (" (File name too long)"), so a bad path is a UsageError like any other.
bool exists_as(const fs::path& p, bool want_dir, std::string& why) {
  std::error_code ec;
  const bool ok = want_dir ? fs::is_directory(p, ec) : fs::is_regular_file(p, ec);
  why = ec ? " (" + ec.message() + ")" : "";
  return ok;
}
}  // namespace

OptionTable train_options(TrainConfig& c) {
  OptionTable t("train");
  auto I = [&t](const char* name, const char* group, int64_t& f, const char* metavar, const char* help) {
    t.add({name, group, metavar, help, false, OptionTable::bind(f), [&f] { return std::to_string(f); }});
  };
  auto F = [&t](const char* name, const char* group, double& f, const char* help) {
    t.add({name, group, "F", help, false, OptionTable::bind(f), [&f] { return fmt(f); }});
  };
  auto S = [&t](const char* name, const char* group, std::string& f, const char* metavar, const char* help) {
    t.add({name, group, metavar, help, false, OptionTable::bind(f), [&f] { return f; }});
  };
  auto E = [&t]<runtime::NamedEnum En>(const char* name, const char* group, En& f, const char* help) {
    t.add({name, group, runtime::choices_of<En>(), help, false, OptionTable::bind_enum(f),
           [&f] { return runtime::to_string(f); }});
  };
  auto B = [&t](const char* name, const char* group, bool& f, const char* help) {
    t.add({name, group, "0|1", help, true, OptionTable::bind(f), [&f] { return std::string(f ? "1" : "0"); }});
  };
  // model
  // the families the registry holds (models/register.cpp): "" picks its default
  std::string families;
  for (const std::string& f : runtime::registered_models()) families += (families.empty() ? "" : "|") + f;
  t.add({"model", "model", families, "model family", false,
         OptionTable::bind_choice(c.model, runtime::registered_models()), [&c] { return runtime::model_family(c); }});
  I("layers", "model", c.layers, "N", "transformer blocks (MLP: hidden layers)");
  I("d-model", "model", c.d_model, "N", "model width C");
  I("heads", "model", c.heads, "N", "attention heads (d-model must be divisible by it)");
  I("kv-heads", "model", c.kv_heads, "N",
    "llama: key/value heads (grouped-query attention; heads must be a multiple); 0: as many as the heads");
  I("ffn", "model", c.ffn, "N", "llama: the MLP's width; 0: 2/3 x 4 x d-model rounded up to a multiple of 256");
  F("rope-theta", "model", c.rope_theta, "llama: the rotary positions' base");
  I("tie-embeddings", "model", c.tie_embeddings, "0|1",
    "llama: the head shares the token embedding (1) or has its own (0); -1: the family's default (gpt: tied, "
    "llama: untied)");
  I("vocab", "model", c.vocab, "N", "vocabulary size (256 for the byte tokenizer)");
  I("seq-len", "model", c.seq_len, "N", "sequence length T; 0: the model's context length");
  S("init-from", "model", c.init_from, "DIR",
    "a new run from these weights: a Hugging Face save_pretrained dir of GPT-2 (model_type gpt2) or Llama (llama), "
    "or one of our step folders (config.json + model.safetensors or its sharded index), or a run's "
    "--checkpoint-dir (its newest step); the family and sizes come from it");
  F("dropout", "model", c.dropout,
    "p of every dropout layer (GPT: embedding, residual); -1: the model's own (GPT 0 or config.json's, "
    "simple-transformer 0.1). Masks follow the global sequence index: the same in every layout");
  // layout
  I("dp", "layout", c.dp, "N", "data-parallel replicas; 0: world / (tp * cp * pp)");
  I("tp", "layout", c.tp, "N",
    "tensor-parallel ranks per layer; gpt and llama (simple-transformer and mlp have no tensor-parallel form)");
  I("sequence-parallel", "layout", c.sequence_parallel, "0|1",
    "with --tp >= 2 (gpt, llama): the norm and residual regions hold seq-len/tp positions per rank; an all-gather "
    "along the sequence before each column-parallel GEMM and a reduce-scatter after each row-parallel one replace "
    "the all-reduces; the column-parallel GEMMs gather their inputs again in the backward, so every (B, T, C) "
    "activation a block keeps falls by tp (not under --precision fp8). Needs seq-len divisible by tp and --dropout 0; "
    "no effect at tp 1");
  I("cp", "layout", c.cp, "N",
    "context-parallel ranks per sequence (gpt, llama): each holds 2 of its 2*cp chunks (one from each end) and "
    "attention runs as a ring over them; weights replicated, gradients summed over dp x cp; with --pp each stage passes its chunks' "
    "activations to the next stage at the same cp index; ZeRO 1-3 shard over dp x cp. Needs seq-len divisible by 2*cp; "
    "not with --sequence-parallel 1, dropout or --precision fp8");
  I("pp", "layout", c.pp, "N", "pipeline stages");
  E("schedule", "layout", c.schedule, "pipeline schedule (interleaved: 1F1B over --virtual-stages chunks per stage)");
  I("virtual-stages", "layout", c.virtual_stages, "V",
    "model chunks per pipeline stage; >= 2 with --schedule interleaved, else 1");
  E("partition", "layout", c.partition, "how layers are split into stages");
  t.add({"comm", "layout", "auto|nccl|mpi", "communication backend", false,
         OptionTable::bind_choice(c.comm, {"auto", "nccl", "mpi"}), [&c] { return c.comm; }});
  // batch
  I("micro-batch", "batch", c.micro_batch, "B", "sequences per micro-batch per DP replica");
  I("grad-accum", "batch", c.grad_accum, "K", "micro-batches per optimizer step per replica (pipeline m = K)");
  I("global-batch", "batch", c.global_batch, "N",
    "sequences per optimizer step in every layout (0: micro-batch x grad-accum x dp): micro-batch and grad-accum "
    "derived per layout, N = micro-batch x grad-accum x dp (--micro-batch is then the most per micro-batch; one "
    "given with --grad-accum on the command line must agree)");
  // numerics
  E("precision", "numerics", c.precision,
    "compute precision (fp32 master weights); fp8: bf16 plus the decoder blocks' linear GEMMs (qkv, o, MLP) in "
    "FP8 E4M3 with per-tensor scaling (--fp8-scaling; gpt, llama; emulated on the CPU); the metrics then count the "
    "casts' overflows and underflows (fp8_overflow, fp8_underflow)");
  E("fp8-scaling", "numerics", c.fp8_scaling,
    "--precision fp8's per-tensor scaling: current (s from the tensor being cast, one more read of it) or "
    "delayed (Transformer Engine's recipe: the casts use the scale of the last step and record their amax; after "
    "each optimizer step the amaxes are max-reduced over the dp and tp ranks and the scales set from the last "
    "--fp8-amax-history amaxes; the histories are checkpointed)");
  I("fp8-amax-history", "numerics", c.fp8_amax_history, "N",
    "--fp8-scaling delayed: amaxes kept per tensor (1-4096); the scale follows their max");
  E("device", "numerics", c.device, "where the model runs");
  t.add({"seed", "numerics", "N", "random seed (initialisation, dropout, the --shuffle order)", false, OptionTable::bind(c.seed),
         [&c] { return std::to_string(c.seed); }});
  B("recompute", "numerics", c.recompute, "recompute activations in backward (saves memory)");
  B("cuda-graph", "numerics", c.cuda_graph,
    "capture the training step once as a CUDA graph and replay it (same bits as eager; the step line is read a "
    "step late, so the host never waits inside a step). Applies to one process on CUDA with AdamW; elsewhere the "
    "step runs eagerly, with a note on CUDA (dp/tp/pp, SGD); 0: always eager");
  B("chunked-head", "numerics", c.chunked_head,
    "gpt: the LM head fused with the cross-entropy in chunks of rows, so no (B*T, vocab) logits or their "
    "gradient exist in training (ops/lm_head_loss.h): less memory (GPT-2 124M bf16 B64 on an H200: 22.9 "
    "instead of 34.5 GiB), about 4 % slower there; the tensor-parallel head (tp > 1) and ZeRO-3 keep the "
    "unfused one. Default 0: the unfused head, the faster");
  B("tf32", "numerics", c.tf32,
    "f32 matrix products on TF32 tensor cores (inputs rounded to a 10-bit mantissa, f32 accumulation), like "
    "PyTorch's set_float32_matmul_precision('high'); 0: exact f32. CUDA only: no effect on the CPU or on "
    "fp16/bf16 products");
  I("zero", "numerics", c.zero, "0|1|2|3",
    "ZeRO stage over the DP replicas: 0 off; 1 shard the optimizer state (and f32 masters); 2 also the "
    "gradients (each bucket reduced to its owner during backward, the others' copy freed; keep --bucket-mb "
    "well below the gradients' size / dp); 3 also the parameters (FSDP-style: 1/dp of each layer per rank, "
    "all-gathered in the compute dtype before its forward and its backward and freed after, gradients "
    "reduce-scattered per layer every micro-batch; --bucket-mb unused)");
  E("grad-comm-dtype", "numerics", c.grad_comm_dtype, "dtype of the DP / ZeRO gradient all-reduce");
  F("bucket-mb", "numerics", c.bucket_mb, "DP / ZeRO gradient bucket size in MiB");
  F("max-memory", "numerics", c.max_memory_gib,
    "cap on each rank's tensor bytes, in GiB (0: none); an allocation past it ends the run naming the category, "
    "the layer, the size, what is in use and the plan's estimate (shardtrain plan). One large device can stand for "
    "a smaller one; the device's own free memory is a separate limit");
  I("max-nonfinite-steps", "numerics", c.max_nonfinite_steps, "N",
    "stop after N steps in a row with an inf/NaN loss or grad norm (fp32/bf16: each is skipped; fp16: overflows "
    "at the loss scale's floor); 0: never stop");
  F("max-loss-ratio", "numerics", c.max_loss_ratio,
    "stop when the loss is above this many times its running mean (an average of about the last 10 steps; "
    "at least 1) for --loss-ratio-steps steps in a row: a run diverging without inf/NaN; 0: off");
  I("loss-ratio-steps", "numerics", c.loss_ratio_steps, "K",
    "steps in a row above --max-loss-ratio × the running mean that stop the run (a shorter spike passes)");
  I("max-zero-grad-steps", "numerics", c.max_zero_grad_steps, "N",
    "stop after N steps in a row whose global gradient norm is exactly 0 (nothing learns any more: a run that "
    "diverged into saturation sits at loss ln(vocab)); 0: never stop");
  // optimizer
  E("optimizer", "optimizer", c.optimizer, "optimizer");
  F("lr", "optimizer", c.lr, "peak learning rate");
  F("weight-decay", "optimizer", c.weight_decay, "decoupled weight decay (tensors of >= 2 dims)");
  F("beta1", "optimizer", c.beta1, "AdamW beta1");
  F("beta2", "optimizer", c.beta2, "AdamW beta2");
  F("eps", "optimizer", c.eps, "AdamW epsilon");
  F("momentum", "optimizer", c.momentum, "SGD momentum");
  F("clip", "optimizer", c.clip, "clip the global grad norm to this; 0: off");
  E("lr-schedule", "optimizer", c.lr_schedule, "learning-rate schedule");
  I("warmup", "optimizer", c.warmup, "N", "linear warm-up steps");
  F("min-lr-ratio", "optimizer", c.min_lr_ratio, "cosine floor as a fraction of lr");
  // run
  I("steps", "run", c.steps, "N",
    "the run's total optimizer steps (a resumed run goes on to N; its lr schedule keeps the length the "
    "checkpoint was written with, so a longer run goes on at the cosine's floor)");
  S("data", "run", c.data, "PATH[:W],...",
    "training tokens: a token file (llm.c .bin), a `shardtrain prepare` directory (its index.json: the shards "
    "read as one stream) or a glob of token files; a comma list of those, each with an optional :WEIGHT, is a "
    "mixture (each step's sequences drawn from the parts by weight, the same in every layout); empty: the "
    "built-in corpus");
  B("shuffle", "run", c.shuffle,
    "read the sequences in a new random order each pass over --data (seeded by --seed; the same order in "
    "every layout and after --resume); 0: the file's order");
  B("data-changed", "run", c.data_changed,
    "with --resume: go on with --data other than the data the checkpoint was trained on (state.json records its "
    "identity); 0: such a resume is refused");
  S("val-data", "run", c.val_data, "PATH[:W],...",
    "validation tokens (the forms of --data): the mean loss of its first micro-batches (--eval-tokens)");
  I("eval-tokens", "run", c.eval_tokens, "N",
    "tokens each validation reads: the first ceil(N / (micro-batch x seq-len)) micro-batches of --val-data (fewer if it "
    "holds fewer); 0: 8 micro-batches");
  I("eval-every", "run", c.eval_every, "N",
    "validate every N steps; 0: with --val-data every max(1, steps / 10) steps, without it never");
  S("checkpoint-dir", "run", c.checkpoint_dir, "DIR",
    "where step_NNNNNNNN/ checkpoints go; a run without --resume refuses a DIR that already holds some; with "
    "--resume also one step folder DIR/step_N (resumed; it must be DIR's newest)");
  I("checkpoint-every", "run", c.checkpoint_every, "N", "checkpoint every N steps; 0: only at the end if a dir is set");
  I("keep-checkpoints", "run", c.keep_checkpoints, "N", "keep the newest N checkpoints; 0: all");
  B("async-checkpoint", "run", c.async_checkpoint,
    "write checkpoints in the background: the step boundary copies each rank's share to host memory, a "
    "thread writes it while training goes on (at most one save in flight; committed at a later step "
    "boundary, the same files); 0: written at the step boundary");
  B("save-on-signal", "run", c.save_on_signal,
    "on SIGINT / SIGTERM (Ctrl-C, kill, scancel) every rank stops after the same step and, with a "
    "--checkpoint-dir, saves a checkpoint there; then one line: the step, the newest checkpoint, the command "
    "that resumes (exit 130 / 143). A second signal stops at once. 0: stop without saving");
  B("resume", "run", c.resume,
    "continue from the newest complete checkpoint in --checkpoint-dir, or the step folder it names (a dir that "
    "exists and holds none: start fresh, and say so; a dir that does not exist: an error)");
  B("allow-unchecked", "run", c.allow_unchecked,
    "with --resume: read a checkpoint of ours that carries no checksums (written before 2026-12-03, or stripped of "
    "them) as it is; 0: such a checkpoint is refused, naming the file");
  B("overwrite-checkpoints", "run", c.overwrite_checkpoints,
    "without --resume, write into a --checkpoint-dir that holds another run's checkpoints (--keep-checkpoints "
    "may then delete them) and start anew a --metrics file that holds another run's steps");
  S("run-dir", "run", c.run_dir, "DIR",
    "the run's folder: DIR/checkpoints (--checkpoint-dir), DIR/metrics.jsonl (--metrics), DIR/config.yaml (the "
    "resolved options, for --config), DIR/plots (launch/plot.sh --run-dir DIR); a --checkpoint-dir or --metrics "
    "given on the command line keeps its path");
  S("metrics", "run", c.metrics, "FILE.jsonl",
    "one JSON object per optimizer step (rank 0); a resumed run appends, a new run refuses a FILE that holds "
    "another run's steps");
  S("trace", "run", c.trace, "FILE.json", "Chrome/Perfetto trace: a process per rank, a thread per track");
  F("timeout-s", "run", c.timeout_s,
    "a collective slower than this aborts every rank with one diagnosis: the rank that is behind, where each "
    "rank waits, the first operation at which the ranks diverge (printed once, by rank 0 unless rank 0 is the "
    "one stuck)");
  S("flight-recorder-dump", "run", c.flight_recorder_dump, "DIR",
    "on a deadline, write each rank's flight recorder (its last 256 collectives and transfers per group, with "
    "times) as DIR/flight_recorder_rank<R>.json");
  I("log-every", "run", c.log_every, "N", "print a step line every N steps");
  B("progress", "run", c.progress,
    "a progress bar below the step lines, only when stdout is a terminal (isatty); redirected (a file, a "
    "pipe, a SLURM .out) the step lines are plain");
  return t;
}

void validate(const TrainConfig& c, const OptionTable& t) {
  // each subsystem's options where they are defined, then the rules between them
  // (runtime/setup/train_config.h); here only what names where a value came from and the files
  c.validate([&](const std::string& name, const std::string& msg) {
    ST_THROW(UsageError, "--" << name << t.origin_of(name) << ": " << msg);
  });
  auto fail = [&](const std::string& name, const std::string& msg) {
    ST_THROW(UsageError, "--" << name << t.origin_of(name) << ": " << msg);
  };
  // each part a file, a prepare directory (its index.json) or a glob that matches (runtime/data/data_spec.h)
  for (const auto& [name, spec] : {std::pair<const char*, const std::string&>{"data", c.data}, {"val-data", c.val_data}}) {
    if (spec.empty()) continue;
    try {
      runtime::resolve_data_spec(spec);
    } catch (const Error& e) {
      fail(name, e.what());
    }
  }
}

void resolve_init_from(TrainConfig& c, const OptionTable& t, std::string* note) {
  if (c.init_from.empty()) return;
  const std::string where = "--init-from" + t.origin_of("init-from");
  // a model directory, or a run's checkpoint root: its newest step (launch/checkpoint_paths.h)
  c.init_from = resolve_model_dir(c.init_from, "--init-from", note);
  const fs::path dir = c.init_from;
  std::string why;
  if (!exists_as(dir / "config.json", false, why))
    ST_THROW(UsageError, where << ": " << (dir / "config.json").string() << " is missing" << why);
  if (!runtime::SafetensorsStore::exists(dir.string(), "model"))
    ST_THROW(UsageError, where << ": " << c.init_from << " holds neither model.safetensors nor model.safetensors.index.json");
  const std::string cfg_path = (dir / "config.json").string();
  const nlohmann::json j = runtime::read_json_file(cfg_path);
  std::string family;
  try {
    family = runtime::family_of_hf_config(j, cfg_path);  // the registry's family of its model_type
  } catch (const ValueError& e) {
    ST_THROW(UsageError, where << ": " << e.what());
  }
  if (t.was_set("model") && c.model != family)
    ST_THROW(UsageError, "--model" << t.origin_of("model") << ": " << c.model << " conflicts with the " << family
                                   << " checkpoint in " << c.init_from);
  c.model = family;
  runtime::ModelOptions from;
  try {
    from = runtime::model_factory(family).options_of_hf(j);
  } catch (const ValueError& e) {
    ST_THROW(UsageError, where << ": " << e.what());
  }
  // a size given as a flag must be the file's; the others are taken from it
  auto take = [&](const char* flag, auto& field, auto value) {
    if (t.was_set(flag) && field != value)
      ST_THROW(UsageError, "--" << flag << t.origin_of(flag) << ": " << field << " conflicts with " << value << " in "
                                << cfg_path);
    field = value;
  };
  take("layers", c.layers, from.layers);
  take("d-model", c.d_model, from.d_model);
  take("heads", c.heads, from.heads);
  take("vocab", c.vocab, from.vocab);
  take("kv-heads", c.kv_heads, from.kv_heads);
  take("ffn", c.ffn, from.ffn);
  take("rope-theta", c.rope_theta, from.rope_theta);
  take("tie-embeddings", c.tie_embeddings, from.tie_embeddings);
  const int64_t n_pos = from.seq_len;
  if (c.seq_len == 0) c.seq_len = n_pos;
  if (c.seq_len > n_pos)
    ST_THROW(UsageError, "--seq-len" << t.origin_of("seq-len") << ": " << c.seq_len << " exceeds the context length "
                                     << n_pos << " in " << cfg_path);
}

TrainConfig parse_train_args(const std::vector<std::string>& args, std::vector<std::string>* notes) {
  TrainConfig cfg;
  OptionTable t = train_options(cfg);
  const std::string file = OptionTable::config_path(args);
  if (!file.empty()) t.load_yaml(file);
  t.parse_flags(args);
  cfg.micro_batch_given = t.origin_of("micro-batch") == " (from command line)";  // --global-batch's rule
  cfg.grad_accum_given = t.origin_of("grad-accum") == " (from command line)";
  std::string note;
  resolve_init_from(cfg, t, &note);  // first: the sizes then come from config.json
  if (notes && !note.empty()) notes->push_back(note);
  apply_run_dir(cfg, t);           // --run-dir: the checkpoints and metrics under it (launch/run_dir.h)
  resolve_checkpoint_dir(cfg, t);  // a step folder: its root and step (launch/checkpoint_paths.h)
  // --resume: the model flags agree with the checkpoint it takes, or are taken from it
  runtime::take_model_from_checkpoint(
      cfg, [&](const std::string& flag) { return t.was_set(flag); },
      [&](const std::string& flag, const std::string& why) {
        ST_THROW(UsageError, "--" << flag << t.origin_of(flag) << ": " << why);
      });
  validate(cfg, t);
  // SHARDTRAIN_PROGRESS=0 (docs/testing.md): no bar whatever the flags say
  if (const char* v = std::getenv("SHARDTRAIN_PROGRESS"); v && std::string(v) == "0") cfg.progress = false;
  return cfg;
}

std::string train_usage() {
  TrainConfig defaults;
  return train_options(defaults).help(
      "shardtrain train [--config FILE.yaml] [--key value ...]   (flags override the file)",
      "The YAML file is a flat mapping whose keys are the flag names without \"--\" (e.g. d-model: 64);\n"
      "an empty value keeps the default. Global batch = micro-batch x grad-accum x dp sequences\n"
      "(--global-batch N fixes it; the other two are derived per layout).\n"
      "Layouts: dp x cp x tp x pp = the MPI world size (launch with mpirun -np N).");
}

}  // namespace st::launch
