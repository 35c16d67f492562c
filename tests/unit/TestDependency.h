//===- tests/unit/TestDependency.h - Tests that need a package installed ---===//
//
// PIPEC_REQUIRE_TEST_DEPENDENCY(present, package, what) ends a test whose
// dependency outside the repository is missing (ONNX's test data, a
// browser): a failure that names the Debian package, since a test that
// quietly skips would pass unnoticed in CI. tools/setup.sh --all installs
// every such package. A build configured with -DPIPEC_TESTS_ALLOW_SKIPS=ON
// (tests/CMakeLists.txt) skips the test with the same message instead.
//
// Only for missing dependencies: a test that cannot run on this machine
// (no GPU, no transparent huge pages) skips with GTEST_SKIP as before.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <gtest/gtest.h>

#ifndef PIPEC_TESTS_ALLOW_SKIPS
#define PIPEC_TESTS_ALLOW_SKIPS 0
#endif

#if PIPEC_TESTS_ALLOW_SKIPS
#define PIPEC_TEST_DEPENDENCY_MISSING_(package, what)                                              \
  GTEST_SKIP() << what << " is missing (apt-get install " package                                  \
               << "); skipped: this build was configured with -DPIPEC_TESTS_ALLOW_SKIPS=ON"
#else
#define PIPEC_TEST_DEPENDENCY_MISSING_(package, what)                                              \
  GTEST_FAIL() << what << " is missing: apt-get install " package                                  \
               << " (bash tools/setup.sh --all installs every test dependency; a build "           \
                  "configured with -DPIPEC_TESTS_ALLOW_SKIPS=ON skips the tests that need it)"
#endif

/// Ends the test unless `present`: `what` is missing, apt-get install
/// `package` (a string literal).
#define PIPEC_REQUIRE_TEST_DEPENDENCY(present, package, what)                                      \
  do {                                                                                             \
    if (!(present))                                                                                \
      PIPEC_TEST_DEPENDENCY_MISSING_(package, what);                                               \
  } while (0)
