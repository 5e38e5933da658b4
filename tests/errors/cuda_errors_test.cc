// User errors of the CUDA backend's flags: one line, exit code 2, with or without a GPU.
#include <filesystem>

#include <gtest/gtest.h>

#include "autopar/runtime/cuda_executor.h"
#include "testing/testing.h"

namespace autopar {
namespace {

using testing::run_autopar;

void expect_error(const std::vector<std::string>& args, const std::string& line) {
  const std::string dir =
      testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const testing::CommandResult r = run_autopar(args, dir);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, line + "\n");
}

TEST(CudaErrors, UnknownBackend) {
  expect_error({"run", "gpt-tiny", "--train", "--backend", "tpu"},
               "autopar: error: --backend tpu: expected cpu or cuda");
  expect_error({"verify", "plan", "--backend", "tpu"},
               "autopar: error: --backend tpu: expected cpu or cuda");
}

// Where no GPU can be used, asking for one says why.
TEST(CudaErrors, NoDevice) {
  const std::string why = runtime::cuda_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present";
  expect_error({"run", "gpt-tiny", "--train", "--steps", "1", "--backend", "cuda"},
               "autopar: error: --backend cuda: " + why);
  // Before the plan is read: the backend is what is missing.
  expect_error({"verify", "plan", "--backend", "cuda"}, "autopar: error: --backend cuda: " + why);
}

}  // namespace
}  // namespace autopar
