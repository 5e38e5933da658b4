// What the fuzz targets share: inputs of several files packed into one byte string, and a
// private directory to unpack them into.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autopar/ir/graph.h"

namespace autopar::fuzz {

// The line that separates the files of a packed input (a plan directory's manifest and role
// files, a model and its external data).
inline constexpr std::string_view kPartSeparator = "\n==autopar-fuzz-part==\n";

std::vector<std::string_view> unpack(std::string_view input);
std::string pack(const std::vector<std::string>& parts);

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `bytes` to path()/name; false when it cannot.
  bool write(const std::string& name, std::string_view bytes) const;

 private:
  std::string path_;
};

// Shape-only zoo models the targets lower and price their inputs on, built once per process.
const Graph& tiny_model(std::string_view name);

}  // namespace autopar::fuzz
