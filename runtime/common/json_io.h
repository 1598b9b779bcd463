// JSON files (state.json, config.json): reading with errors that name the file, and atomic
// writing (temporary name in the same directory, fsync, rename, fsync the directory) so a crash
// never leaves a half-written file under the final name.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace st::runtime {

// Parses `path`; throws IOError naming the file (missing, unreadable, not valid JSON).
nlohmann::json read_json_file(const std::string& path);

// Writes `j` (indented) to `path` atomically; throws IOError naming the file.
void write_json_file(const std::string& path, const nlohmann::json& j);

// A temporary name beside `path`, unique across processes and hosts sharing a file system:
// path.tmp.<host>.<pid>.
std::string temp_name_for(const std::string& path);

// fsync helpers shared by the checkpoint code; throw IOError naming the path.
void fsync_path(const std::string& path);  // a file or a directory
void fsync_parent_dir(const std::string& path);

}  // namespace st::runtime
