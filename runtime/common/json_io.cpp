// JSON file helpers: read with named errors, atomic write (tmp + fsync + rename + dir fsync).
#include "runtime/common/json_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tensor/error.h"

namespace st::runtime {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ST_THROW(IOError, "json " << path << ": cannot open: " << std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  try {
    return nlohmann::json::parse(s.str());
  } catch (const nlohmann::json::exception& ex) {
    ST_THROW(IOError, "json " << path << ": not valid JSON: " << ex.what());
  }
}

std::string temp_name_for(const std::string& path) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return path + ".tmp." + host + "." + std::to_string(::getpid());
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ST_THROW(IOError, "fsync " << path << ": cannot open: " << std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) ST_THROW(IOError, "fsync " << path << ": " << std::strerror(err));
}

void fsync_parent_dir(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path).parent_path();
  fsync_path(p.string());
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = temp_name_for(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) ST_THROW(IOError, "json " << path << ": cannot create " << tmp << ": " << std::strerror(errno));
    out << j.dump(2) << "\n";
    out.flush();
    if (!out) ST_THROW(IOError, "json " << path << ": write failed");
  }
  fsync_path(tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    ST_THROW(IOError, "json " << path << ": rename from " << tmp << " failed: " << std::strerror(err));
  }
  fsync_parent_dir(path);
}

}  // namespace st::runtime
