// Shared test helpers.
#include "testing/testing.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include "autopar/ir/builder.h"

namespace autopar::testing {

Graph tiny_linear_graph() {
  GraphBuilder b("tiny");
  b.set_seed(7);
  ValueId x = b.input("x", DType::kFloat32, {2, 4}, {"batch", ""});
  b.push_scope("fc");
  ValueId w = b.parameter("weight", {4, 3}, ParamInit::normal(0.5f));
  ValueId bias = b.parameter("bias", {3}, ParamInit::zeros());
  ValueId y = b.op1("Add", {b.op1("MatMul", {x, w}), bias});
  b.pop_scope();
  b.output(b.op1("Relu", {y}), "y", {"batch", ""});
  return b.finish();
}

Graph two_layer_mlp(bool with_data) {
  GraphBuilder b("mlp");
  b.set_with_data(with_data);
  const ValueId x = b.input("x", DType::kFloat32, {4, 8});
  b.set_layer(0);
  const ValueId w0 = b.parameter("w0", {8, 8}, ParamInit::normal(0.1f));
  const ValueId h0 = b.op1("Relu", {b.op1("MatMul", {x, w0})});
  b.set_layer(1);
  const ValueId w1 = b.parameter("w1", {8, 8}, ParamInit::normal(0.1f));
  b.output(b.op1("Relu", {b.op1("MatMul", {h0, w1})}), "y");
  return b.finish();
}

std::string source_path(const std::string& relative) {
  return std::string(AUTOPAR_SOURCE_DIR) + "/" + relative;
}

namespace {
// The directories this process made, removed when it exits: a full ctest run starts about 1,400
// processes, and the plans and models they write add up to gigabytes.
class TempDirs {
 public:
  ~TempDirs() {
    const char* keep = std::getenv("AUTOPAR_KEEP_TEST_DIRS");
    if (keep && *keep && std::string(keep) != "0") return;
    for (const auto& dir : dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
  void add(const std::filesystem::path& dir) {
    const std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back(dir);
  }

 private:
  std::mutex mutex_;
  std::vector<std::filesystem::path> dirs_;
};

TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}
}  // namespace

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "autopar_tests" /
                   fmt::format("{}.{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs().add(dir);
  return dir.string();
}

namespace {
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}
}  // namespace

CommandResult run_autopar(const std::vector<std::string>& args, const std::string& working_dir) {
  const std::string dir = working_dir.empty() ? temp_dir("run") : working_dir;
  std::string command = "cd " + shell_quote(dir) + " && " + shell_quote(AUTOPAR_BINARY);
  for (const std::string& a : args) command += " " + shell_quote(a);
  const std::string out_path = dir + "/.stdout";
  const std::string err_path = dir + "/.stderr";
  command += " >" + shell_quote(out_path) + " 2>" + shell_quote(err_path);
  const int status = std::system(command.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return result;
}

}  // namespace autopar::testing
