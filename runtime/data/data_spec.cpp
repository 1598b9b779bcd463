// `--data DIR|GLOB|FILE[:weight],...` → a TokenSource (runtime/data/data_spec.h).
#include "runtime/data/data_spec.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "runtime/data/corpus_index.h"
#include "runtime/data/token_corpus.h"
#include "runtime/data/token_mixture.h"
#include "tensor/error.h"

namespace st::runtime {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i)
      if (std::error_code ec; fs::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  std::sort(out.begin(), out.end());  // glob sorts by the locale's collation; byte order everywhere
  return out;
}

// WHERE[:WEIGHT]: the last ':' when what follows is a number
void split_weight(DataPart& p, const std::string& part) {
  p.where = part;
  const size_t colon = part.rfind(':');
  if (colon == std::string::npos) return;
  const std::string w = part.substr(colon + 1);
  char* end = nullptr;
  const double v = std::strtod(w.c_str(), &end);
  if (w.empty() || end != w.c_str() + w.size()) return;  // not a number: part of the path
  ST_CHECK(std::isfinite(v) && v > 0, ValueError, part << ": weight " << w << " must be a number > 0");
  p.where = part.substr(0, colon);
  p.weight = v;
  p.weighted = true;
}

}  // namespace

std::vector<DataPart> resolve_data_spec(const std::string& spec) {
  std::vector<DataPart> parts;
  for (const std::string& text : split_commas(spec)) {
    ST_CHECK(!text.empty(), ValueError, spec << ": an empty part (two commas, or one at an end)");
    DataPart p;
    split_weight(p, text);
    std::error_code ec;
    if (fs::is_directory(p.where, ec)) {
      if (!fs::exists(CorpusIndex::path_in(p.where), ec))
        ST_THROW(IOError, p.where << " is a directory without index.json (" << CorpusIndex::path_in(p.where)
                                  << "): not a `shardtrain prepare --input ... --out DIR`; DIR/*.bin reads its token files");
      const CorpusIndex idx = CorpusIndex::read(p.where);  // IOError naming DIR/index.json
      for (const auto& s : idx.shards) p.files.push_back((fs::path(p.where) / s.file).string());
    } else if (fs::is_regular_file(p.where, ec)) {
      p.files = {p.where};
      p.single_file = true;
    } else if (has_glob_chars(p.where)) {
      p.files = glob_files(p.where);
      if (p.files.empty()) ST_THROW(IOError, p.where << ": the glob matches no file");
    } else {
      ST_THROW(IOError, p.where << ": no such file or directory (a token file, a prepare directory or a glob)");
    }
    parts.push_back(std::move(p));
  }
  return parts;
}

namespace {

std::shared_ptr<const TokenSource> open_part(const DataPart& p, SequenceOrder order) {
  if (p.single_file) return std::make_shared<TokenData>(p.where, order);
  auto corpus = std::make_shared<TokenCorpus>(p.files, p.where, order);
  std::error_code ec;
  if (fs::is_directory(p.where, ec)) {  // the shards as index.json lists them
    const CorpusIndex idx = CorpusIndex::read(p.where);
    for (size_t k = 0; k < idx.shards.size(); ++k)
      if (corpus->shard(k).num_tokens() != idx.shards[k].tokens)
        ST_THROW(IOError, "token file " << corpus->shard(k).path() << ": " << corpus->shard(k).num_tokens() << " tokens, but "
                                        << CorpusIndex::path_in(p.where) << " lists " << idx.shards[k].tokens);
  }
  return corpus;
}

}  // namespace

std::shared_ptr<const TokenSource> open_token_source(const std::string& spec, SequenceOrder order) {
  const std::vector<DataPart> parts = resolve_data_spec(spec);
  if (parts.size() == 1) return open_part(parts[0], order);
  std::vector<std::shared_ptr<const TokenSource>> sources;
  std::vector<double> weights;
  for (const auto& p : parts) {
    sources.push_back(open_part(p, order));
    weights.push_back(p.weight);
  }
  return std::make_shared<TokenMixture>(std::move(sources), std::move(weights), order.seed, spec);
}

}  // namespace st::runtime
