// Files autopar writes appear whole or not at all.
#pragma once

#include <string>
#include <string_view>

#include "autopar/support/status.h"

namespace autopar {

// Writes `bytes` to `path`.partial and renames it over `path`: a reader sees the old file or
// the new one, never part of one, and a write that fails (or a process killed part-way) leaves
// `path` as it was. Errors are one line, "<path>: cannot write: <why>".
Status write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace autopar
