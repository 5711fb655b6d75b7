//===- TempBundle.h - A bundle directory written by a test ------*- C++ -*-===//

#ifndef MOE_UNITTESTS_RUNTIME_TEMPBUNDLE_H
#define MOE_UNITTESTS_RUNTIME_TEMPBUNDLE_H

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace moe {
namespace runtime {

/// A fresh temporary directory that the test fills with bundle files; it is
/// removed with them when the test ends.
class TempBundle {
public:
  TempBundle() {
    std::string pattern = ::testing::TempDir() + "moe-bundle-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    EXPECT_NE(mkdtemp(buffer.data()), nullptr);
    path = buffer.data();
  }
  ~TempBundle() {
    for (const std::string &file : files)
      std::remove((path + "/" + file).c_str());
    rmdir(path.c_str());
  }
  TempBundle(const TempBundle &) = delete;
  TempBundle &operator=(const TempBundle &) = delete;

  /// Writes `contents` to the file `name` of the bundle.
  void write(const std::string &name, const std::string &contents) {
    std::FILE *file = std::fopen((path + "/" + name).c_str(), "wb");
    ASSERT_NE(file, nullptr) << name;
    std::fwrite(contents.data(), 1, contents.size(), file);
    std::fclose(file);
    files.push_back(name);
  }

  /// Makes the file `name` of the bundle a symbolic link to `target`.
  void link(const std::string &name, const std::string &target) {
    ASSERT_EQ(symlink(target.c_str(), (path + "/" + name).c_str()), 0) << name;
    files.push_back(name);
  }

  /// Makes the file `name` of the bundle a FIFO.
  void fifo(const std::string &name) {
    ASSERT_EQ(mkfifo((path + "/" + name).c_str(), 0600), 0) << name;
    files.push_back(name);
  }

  std::string path;

private:
  std::vector<std::string> files;
};

} // namespace runtime
} // namespace moe

#endif // MOE_UNITTESTS_RUNTIME_TEMPBUNDLE_H
