// The path a user probably meant when the one given does not exist: a mistyped folder name
// ("runs/x/chekpoints" for "runs/x/checkpoints") is corrected component by component against the
// entries of the deepest folder that exists, by edit distance, so an error about a missing
// --checkpoint-dir, --init-from or --checkpoint can name the fix instead of only the problem.
#pragma once
#include <string>

namespace st::runtime {

// An existing path that differs from `path` only by small edits of its missing components (at
// most 2 edits each, fewer than half the name's characters; case differences are free), written
// as `path` was (relative stays relative); "" when there is none, or when `path` exists.
std::string similar_existing_path(const std::string& path);

// " (did you mean X?)" for similar_existing_path(path) = X, else "".
std::string did_you_mean(const std::string& path);

}  // namespace st::runtime
