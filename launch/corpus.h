// The built-in corpus: real English text that every Debian system carries (the license texts
// of base-files under /usr/share/common-licenses: GPL, LGPL, GFDL, Apache, MPL, Artistic, ...,
// about 240 KB), concatenated in a fixed order and byte-tokenized on first use into a cached
// llm.c .bin file. The cache name carries a hash of the text, so a changed text gives a new file;
// it is written atomically (temporary name + rename), so ranks starting together are safe.
#pragma once
#include <string>
#include <vector>

namespace st::launch {

// Candidate text files, in order (those that exist are used).
const std::vector<std::string>& builtin_corpus_sources();

// The cache directory: $XDG_CACHE_HOME/shardtrain, else $HOME/.cache/shardtrain, else
// /tmp/shardtrain-<uid>.
std::string corpus_cache_dir();

// Path of the tokenized corpus, creating it if needed. Throws IOError when none of the sources
// exists (naming them) or the cache cannot be written.
std::string builtin_corpus_path();

}  // namespace st::launch
