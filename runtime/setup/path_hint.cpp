// A missing path's likely intended twin (runtime/setup/path_hint.h).
#include "runtime/setup/path_hint.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <vector>

namespace st::runtime {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p.empty() ? fs::path(".") : p, ec);
}

// The entry of `dir` closest to `name` within the bounds of the header, "" when none.
std::string closest_entry(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end;
  std::string best;
  size_t best_d = std::min<size_t>(3, (name.size() + 1) / 2);  // at most 2 edits, fewer than half the name
  for (; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    const size_t d = edit_distance(lower(name), lower(entry));
    if (d < best_d || (d == best_d && !best.empty() && entry < best)) best_d = d, best = entry;
  }
  return best;
}

}  // namespace

std::string similar_existing_path(const std::string& path) {
  if (path.empty() || path_exists(path)) return "";
  const fs::path given(path);
  std::vector<fs::path> parts(given.begin(), given.end());
  if (!parts.empty() && parts.back().empty()) parts.pop_back();  // a trailing '/'
  fs::path at;  // the prefix that exists, as written
  for (const fs::path& part : parts) {
    fs::path next = at / part;
    if (!path_exists(next)) {
      const std::string fix = closest_entry(at, part.string());
      if (fix.empty()) return "";
      next = at / fix;
    }
    at = next;
  }
  return at.string();
}

std::string did_you_mean(const std::string& path) {
  const std::string fix = similar_existing_path(path);
  return fix.empty() ? "" : " (did you mean " + fix + "?)";
}

}  // namespace st::runtime
