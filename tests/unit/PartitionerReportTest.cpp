//===- tests/unit/PartitionerReportTest.cpp - The partition report --------===//
//
// The report of real compiles: every figure present and consistent with the
// partition's estimate, and report.html rendering in a headless browser
// (Debian's chromium; without it that test fails, unless the build allows
// skips: tests/unit/TestDependency.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/Report.h"
#include "driver/Driver.h"
#include "frontend/OnnxImporter.h"
#include "support/FileIO.h"
#include "tests/unit/TestDependency.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

using namespace pipec;

namespace {
Expected<driver::Compiled> compileSample(const std::string &model, int K, int M, bool train,
                                          const std::string &profile) {
  frontend::ImportOptions io;
  io.batch = 4;
  PIPEC_ASSIGN(auto g, frontend::importOnnxFile(joinPath(PIPEC_BINARY_DIR, "samples/" + model), io));
  driver::CompileOptions co;
  co.partition.numStages = K;
  PIPEC_ASSIGN(pipeline::Schedule gpipe, pipeline::Schedule::parse("gpipe"));
  co.partition.schedule = gpipe;
  co.partition.profile = profile;
  co.emit.schedule = gpipe;
  co.emit.microBatches = M;
  co.emit.training = train;
  auto c = driver::compileGraph(*g, co);
  if (!c)
    return c.status();
  return c;
}

std::string runCommand(const std::string &cmd) {
  std::string out;
  FILE *f = popen(cmd.c_str(), "r");
  if (!f)
    return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, n);
  pclose(f);
  return out;
}
} // namespace

TEST(Report, FiguresAreComputedAndConsistent) {
  auto c = compileSample("gpt-train.onnx", 2, 4, true, "v100-sxm2-16gb");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  const nlohmann::json &r = c->report;
  EXPECT_EQ(r["stages"], 2);
  EXPECT_EQ(r["device_profile"]["name"], "v100-sxm2-16gb");
  ASSERT_EQ(r["stage_list"].size(), 2u);
  double params = 0;
  for (const auto &s : r["stage_list"]) {
    EXPECT_GT(s["forward_seconds"].get<double>(), 0);
    EXPECT_GT(s["backward_seconds"].get<double>(), 0);
    EXPECT_GT(s["predicted_memory"]["total"].get<double>(), 0);
    EXPECT_TRUE(s["fits_budget"].get<bool>());
    params += s["parameters"].get<double>();
  }
  EXPECT_DOUBLE_EQ(params, r["total_parameters"].get<double>());
  // Something crosses the cut each way.
  EXPECT_GT(r["stage_list"][0]["bytes_sent_per_micro_batch"].get<double>(), 0);
  EXPECT_GT(r["stage_list"][1]["gradient_bytes_sent_per_micro_batch"].get<double>(), 0);
  double step = r["predicted_step_seconds"].get<double>();
  EXPECT_GT(step, 0);
  EXPECT_GT(r["predicted_speedup"].get<double>(), 1.0);
  EXPECT_NEAR(r["predicted_samples_per_second"].get<double>(), 4 * 4 / step, 1e-6 * 16 / step);
  double bubble = r["predicted_bubble_fraction"].get<double>();
  EXPECT_GT(bubble, 0);
  EXPECT_LT(bubble, 1);
  ASSERT_EQ(r["timeline"].size(), 2u);
  std::string text = codegen::renderReportText(r);
  EXPECT_NE(text.find("predicted: step"), std::string::npos) << text;
}

TEST(Report, HtmlRendersInAHeadlessBrowser) {
  auto c = compileSample("gpt-train.onnx", 2, 4, true, "v100-sxm2-16gb");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  std::string dir = joinPath(PIPEC_BINARY_DIR, "tests/report-html");
  ASSERT_TRUE(makeDirs(dir).isOk());
  ASSERT_TRUE(codegen::writeReport(dir, c->report).isOk());
  std::string browser;
  for (const char *b : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fileExists(b))
      browser = b;
  PIPEC_REQUIRE_TEST_DEPENDENCY(!browser.empty(), "chromium",
                                "a headless browser to render report.html (/usr/bin/chromium)");
  std::string dom = runCommand(browser + " --headless --no-sandbox --disable-gpu --dump-dom file://" +
                               joinPath(dir, "report.html") + " 2>/dev/null");
  ASSERT_FALSE(dom.empty()) << "chromium printed no DOM";
  for (const char *id : {"stage-balance", "pipeline-timeline"}) {
    size_t at = dom.find(std::string("<svg id=\"") + id + "\"");
    ASSERT_NE(at, std::string::npos) << id;
    size_t end = dom.find("</svg>", at);
    ASSERT_NE(end, std::string::npos);
    std::string svg = dom.substr(at, end - at);
    EXPECT_NE(svg.find("<rect"), std::string::npos) << id << " has no boxes";
  }
  // A screenshot: the page lays out without errors.
  std::string png = joinPath(dir, "report.png");
  std::remove(png.c_str());
  runCommand(browser + " --headless --no-sandbox --disable-gpu --window-size=1000,800 "
                       "--screenshot=" + png + " file://" + joinPath(dir, "report.html") +
             " >/dev/null 2>&1");
  auto bytes = readFile(png);
  ASSERT_TRUE(bytes.isOk()) << "no screenshot written";
  EXPECT_GT(bytes->size(), 1000u);
}
