// Every example scheme in configs/schemes/ that autopar lowers today (fp32, the default) transforms
// gpt-tiny into a plan that verifies against one device.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace autopar {
namespace {

TEST(SchemeExamples, LowerAndVerifyOnGptTiny) {
  const std::filesystem::path dir = testing::source_path("configs/schemes");
  const std::string work = testing::temp_dir("scheme_examples");
  int verified = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("precision: bf16") != std::string::npos ||
        text.str().find("precision: fp16") != std::string::npos)
      continue;
    const std::string plan = work + "/" + entry.path().stem().string();
    auto t = testing::run_autopar(
        {"transform", "gpt-tiny", "--scheme", entry.path().string(), "-o", plan});
    ASSERT_EQ(t.exit_code, 0) << entry.path() << ": " << t.err;
    auto v = testing::run_autopar({"verify", plan, "--json"});
    ASSERT_EQ(v.exit_code, 0) << entry.path() << ": " << v.out << v.err;
    EXPECT_TRUE(nlohmann::json::parse(v.out)["ok"].get<bool>()) << entry.path() << v.out;
    ++verified;
  }
  EXPECT_EQ(verified, 8);
}

}  // namespace
}  // namespace autopar
