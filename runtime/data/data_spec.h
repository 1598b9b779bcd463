// The `--data` / `--val-data` value (docs/design.md, "What --data names"):
//   SPEC  = PART[,PART...]         (a comma list: a mixture of the parts by weight)
//   PART  = WHERE[:WEIGHT]         (WEIGHT > 0, default 1; only the last ':' followed by a number)
//   WHERE = a token file           (read exactly as ever: runtime/data/token_data.h)
//         | a `prepare` directory  (its index.json lists the shards: runtime/data/corpus_index.h)
//         | a glob of token files  (`*`, `?`, `[...]`; the matches sorted by name)
// One part is read alone (a weight on it changes nothing); several are a TokenMixture. A
// directory's or glob's files are one TokenCorpus. Paths holding ',' cannot be named.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/token_data.h"

namespace st::runtime {

struct DataPart {
  std::string where;               // as written
  std::vector<std::string> files;  // the token files, in stream order
  bool single_file = false;        // `where` is one token file
  double weight = 1.0;
  bool weighted = false;           // a ':WEIGHT' was written
};

// Parses and resolves every part (no file is opened but a directory's index.json). Throws
// IOError naming the part: no such file or directory, a directory without index.json, a glob
// matching nothing, an index whose shards are missing; ValueError for a bad weight or an empty part.
std::vector<DataPart> resolve_data_spec(const std::string& spec);

// The source `spec` names: a single file → TokenData (order applied); a directory or glob →
// TokenCorpus (order applied to its stream); several parts → TokenMixture of those, each part
// in `order`, the mixture's draws seeded by order.seed. A directory's shards are checked against
// its index.json (token counts): IOError naming the shard.
std::shared_ptr<const TokenSource> open_token_source(const std::string& spec, SequenceOrder order = {});

}  // namespace st::runtime
