#include "autopar/support/files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace autopar {

Status write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string temporary = path + ".partial";
  std::error_code ec;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return error("{}: cannot write: {}", path, std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(temporary, ec);
      return error("{}: cannot write: the write failed (disk full?)", path);
    }
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(temporary, ec);
    return error("{}: cannot write: {}", path, why);
  }
  return Status::ok();
}

}  // namespace autopar
