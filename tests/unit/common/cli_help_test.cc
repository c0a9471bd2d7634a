#include "common/cli_help.h"

#include <gtest/gtest.h>

namespace kvserve::common {
namespace {

TEST(RepositoryRelativePathTest, AbsoluteCheckoutPathsAreDropped) {
  EXPECT_EQ(RepositoryRelativePath("/srv/src/kvserve/server/flags.cc"), "server/flags.cc");
  EXPECT_EQ(RepositoryRelativePath("srv/src/kvserve/server/flags.cc"), "server/flags.cc");
  EXPECT_EQ(RepositoryRelativePath("/home/a/kvserve/tools/loadgen/loadgen_main.cc"),
            "tools/loadgen/loadgen_main.cc");
}

TEST(RepositoryRelativePathTest, TheLastTopLevelFolderWins) {
  // A checkout that itself sits below a folder called "tools" or "server".
  EXPECT_EQ(RepositoryRelativePath("/opt/tools/kvserve/server/generate_main.cc"),
            "server/generate_main.cc");
  EXPECT_EQ(RepositoryRelativePath("/server/x/tools/kvserve_client_main.cc"),
            "tools/kvserve_client_main.cc");
}

TEST(RepositoryRelativePathTest, RelativePathsStayOrLoseTheirDots) {
  EXPECT_EQ(RepositoryRelativePath("server/flags.cc"), "server/flags.cc");
  EXPECT_EQ(RepositoryRelativePath("../server/flags.cc"), "server/flags.cc");
  EXPECT_EQ(RepositoryRelativePath("./absl/flags/parse.cc"), "absl/flags/parse.cc");
  EXPECT_EQ(RepositoryRelativePath("/usr/include/absl/flags/flag.h"),
            "usr/include/absl/flags/flag.h");
}

}  // namespace
}  // namespace kvserve::common
