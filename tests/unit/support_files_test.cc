#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "autopar/support/files.h"
#include "testing/testing.h"

namespace autopar {
namespace {

namespace fs = std::filesystem;

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(WriteFileAtomic, ReplacesTheFileAndLeavesNoTemporary) {
  const fs::path dir = testing::temp_dir("write_file_atomic_replace");
  const std::string path = (dir / "report.md").string();
  ASSERT_TRUE(write_file_atomic(path, "old\n").is_ok());
  ASSERT_TRUE(write_file_atomic(path, std::string(100000, 'x')).is_ok());
  EXPECT_EQ(contents(path), std::string(100000, 'x'));
  EXPECT_FALSE(fs::exists(path + ".partial"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(WriteFileAtomic, AFailedWriteLeavesTheOldFileAndSaysWhere) {
  const fs::path dir = testing::temp_dir("write_file_atomic_fail");
  // A directory where the file should go: the rename fails, the directory stays.
  const fs::path target = dir / "trace.json";
  fs::create_directories(target / "inside");
  Status s = write_file_atomic(target.string(), "{}");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message().rfind(target.string() + ": cannot write: ", 0), 0u) << s.message();
  EXPECT_TRUE(fs::is_directory(target / "inside"));
  EXPECT_FALSE(fs::exists(target.string() + ".partial"));
  // A folder that does not exist: nothing is created.
  s = write_file_atomic((dir / "missing" / "scheme.yaml").string(), "mesh: {dp: 2}\n");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(), (dir / "missing" / "scheme.yaml").string() +
                             ": cannot write: No such file or directory");
  EXPECT_FALSE(fs::exists(dir / "missing"));
}

}  // namespace
}  // namespace autopar
