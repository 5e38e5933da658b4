#include "fuzz_support.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "autopar/zoo/zoo.h"

namespace autopar::fuzz {

std::vector<std::string_view> unpack(std::string_view input) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t at = input.find(kPartSeparator);
    parts.push_back(input.substr(0, at));
    if (at == std::string_view::npos) break;
    input.remove_prefix(at + kPartSeparator.size());
  }
  return parts;
}

std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += kPartSeparator;
    out += parts[i];
  }
  return out;
}

ScratchDir::ScratchDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/autopar-fuzz-XXXXXX";
  if (!mkdtemp(pattern.data())) {
    std::perror("autopar fuzz: mkdtemp");
    std::abort();
  }
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool ScratchDir::write(const std::string& name, std::string_view bytes) const {
  std::ofstream out(path_ + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

const Graph& tiny_model(std::string_view name) {
  static std::mutex mutex;
  static std::map<std::string, Graph, std::less<>> models;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = models.find(name);
  if (it == models.end()) {
    ZooOptions options;
    options.with_weights = false;
    auto model = build_zoo_model(name, options);
    if (!model.is_ok()) {
      std::fprintf(stderr, "autopar fuzz: zoo model %.*s: %s\n", static_cast<int>(name.size()),
                   name.data(), model.status().message().c_str());
      std::abort();
    }
    it = models.emplace(std::string(name), std::move(model).value()).first;
  }
  return it->second;
}

}  // namespace autopar::fuzz
