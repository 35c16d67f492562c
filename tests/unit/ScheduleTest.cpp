//===- tests/unit/ScheduleTest.cpp - Pipeline schedules and their timing --===//
//
// The pipeline schedules of pipeline/Schedule.h: their shapes (slot lists
// for small K and M, written out), the invariants every schedule keeps
// (each stage's F, B and W once per micro-batch, in ascending order; no
// deadlock under any stage times), the micro-batches each stage keeps in
// flight, and the simulator's bubble on equal stages against each
// schedule's published formula; 2bw's steps back to back.
//
//===----------------------------------------------------------------------===//
#include "partitioner/PipelineSim.h"
#include "pipeline/Schedule.h"
#include "support/Format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace pipec;
using namespace pipec::pipeline;
using partitioner::idealSchedule;
using pipeline::simulate;
using partitioner::StageTimes;

namespace {

Schedule named(const std::string &name, unsigned v = 0) {
  auto s = Schedule::parse(name, v);
  EXPECT_TRUE(s.isOk()) << s.status().message();
  return s.isOk() ? *s : Schedule{};
}

/// "F0 B0 W0 ... O" of one device (recompute slots left out); with
/// `stages`, each slot's stage after a dot ("F0.2").
std::string str(const std::vector<Slot> &v, bool stages = false) {
  std::string out;
  for (const Slot &s : v) {
    if (s.work == Work::Recompute)
      continue;
    out += cat(out.empty() ? "" : " ", s.work == Work::Optimizer ? "O" : workName(s.work));
    if (s.work != Work::Optimizer)
      out += cat(s.microBatch, stages ? cat(".", s.stage) : "");
    if (s.previousStep)
      out += "'"; // 2bw: the step before's
  }
  return out;
}

/// Equal stages: F, B and W take f, b and w on every stage, no transfers.
std::vector<StageTimes> equalStages(unsigned stages, double f, double b, double w) {
  StageTimes t;
  t.forward = f;
  t.backward = b;
  t.weightGrad = w;
  return std::vector<StageTimes>(stages, t);
}

double makespan(const Schedule &s, unsigned K, unsigned M, double f, double b, double w) {
  auto progs = idealSchedule(s, static_cast<int>(M), true, equalStages(s.numStages(K), f, b, w));
  EXPECT_TRUE(progs.isOk()) << progs.status().message();
  if (!progs.isOk())
    return 0;
  auto r = simulate(*progs);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? r->makespan : 0;
}

struct Shape {
  const char *name;
  unsigned v;
};
const Shape kAll[] = {{"gpipe", 0}, {"1f1b", 0}, {"zbh1", 0}, {"zbh2", 0},
                      {"interleaved", 2}, {"interleaved", 3}, {"zbv", 0}};

} // namespace

TEST(Schedule, NamesParseAndBadOnesAreRefused) {
  for (const std::string &n : Schedule::names())
    EXPECT_EQ(named(n).name(), n);
  EXPECT_EQ(Schedule{}.name(), "1f1b");
  auto bad = Schedule::parse("2f2b");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("unknown pipeline schedule '2f2b' (known: gpipe, 1f1b, "
                                        "interleaved, zbh1, zbh2, zbv or 2bw)"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(Schedule::parse("1f1b", 2).isOk());
  EXPECT_FALSE(Schedule::parse("interleaved", 1).isOk());
  EXPECT_EQ(named("interleaved").stagesPerDevice(), 2u);
  EXPECT_EQ(named("interleaved", 4).stagesPerDevice(), 4u);
  EXPECT_EQ(named("zbv").stagesPerDevice(), 2u);
  // Interleaved needs M a multiple of K; both need two devices.
  EXPECT_FALSE(named("interleaved").check(2, 3).isOk());
  EXPECT_TRUE(named("interleaved").check(2, 4).isOk());
  EXPECT_FALSE(named("zbv").check(1, 4).isOk());
  // Placement: round robin, and a V.
  EXPECT_EQ(named("interleaved", 3).deviceOf(7, 4), 3u);
  EXPECT_EQ(named("zbv").deviceOf(2, 4), 2u);
  EXPECT_EQ(named("zbv").deviceOf(5, 4), 2u);
  EXPECT_EQ(named("zbv").deviceOf(7, 4), 0u);
}

// ZB-H1: stage i runs W(mb) after B(mb + i); stage 0 is 1F1B; every stage
// runs B and W in ascending micro-batch order.
TEST(Schedule, ZeroBubbleH1AndH2Shapes) {
  auto zb = named("zbh1").build(3, 4, true);
  auto one = named("1f1b").build(3, 4, true);
  ASSERT_TRUE(zb.isOk()) << zb.status().message();
  ASSERT_TRUE(one.isOk()) << one.status().message();
  EXPECT_EQ(str((*zb)[0]), str((*one)[0]));
  EXPECT_EQ(str((*zb)[1]), "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3 O");
  EXPECT_EQ(str((*zb)[2]), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 O");
  auto inZb = named("zbh1").microBatchesInFlight(3, 4, true);
  auto inOne = named("1f1b").microBatchesInFlight(3, 4, true);
  ASSERT_TRUE(inZb.isOk()) << inZb.status().message();
  ASSERT_TRUE(inOne.isOk()) << inOne.status().message();
  EXPECT_EQ((*inZb)[2], 3u);
  EXPECT_EQ((*inOne)[2], 1u);
  // ZB-H2's warm-up: stage i runs 2(K-i)-2 forwards before its first
  // backward (4, 2, 0 for K=3), weight gradients deferred as in ZB-H1.
  auto h2 = named("zbh2").build(3, 6, true);
  ASSERT_TRUE(h2.isOk());
  EXPECT_EQ(str((*h2)[0]), "F0 F1 F2 F3 F4 B0 W0 F5 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5 O");
  EXPECT_EQ(str((*h2)[1]), "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 B4 W3 B5 W4 W5 O");
  EXPECT_EQ(str((*h2)[2]), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 F4 B4 W2 F5 B5 W3 W4 W5 O");
  auto inH2 = named("zbh2").microBatchesInFlight(3, 6, true);
  ASSERT_TRUE(inH2.isOk()) << inH2.status().message();
  EXPECT_EQ(*inH2, (std::vector<unsigned>{5, 4, 3}));
  auto fewer = named("zbh2").microBatchesInFlight(3, 2, true);
  ASSERT_TRUE(fewer.isOk()) << fewer.status().message();
  EXPECT_EQ((*fewer)[0], 2u);
}

// Megatron-LM's interleaved order, K=2, v=2, M=4: device 0 holds stages 0
// and 2, device 1 stages 1 and 3; micro-batches go through a device's
// stages in groups of K.
TEST(Schedule, InterleavedShape) {
  // Device d warms up with 2(K-d-1) + (v-1)K forwards: 4 and 2.
  auto s = named("interleaved").build(2, 4, true);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(str((*s)[0], true), "F0.0 F1.0 F0.2 F1.2 F2.0 B0.2 W0.2 F3.0 B1.2 W1.2 F2.2 B0.0 "
                                "W0.0 F3.2 B1.0 W1.0 B2.2 W2.2 B3.2 W3.2 B2.0 W2.0 B3.0 W3.0 O");
  EXPECT_EQ(str((*s)[1], true), "F0.1 F1.1 F0.3 B0.3 W0.3 F1.3 B1.3 W1.3 F2.1 B0.1 W0.1 F3.1 B1.1 "
                                "W1.1 F2.3 B2.3 W2.3 F3.3 B3.3 W3.3 B2.1 W2.1 B3.1 W3.1 O");
  // Inference: the forwards in the same order.
  auto inf = named("interleaved").build(2, 4, false);
  ASSERT_TRUE(inf.isOk()) << inf.status().message();
  EXPECT_EQ(str((*inf)[0], true), "F0.0 F1.0 F0.2 F1.2 F2.0 F3.0 F2.2 F3.2");
}

// The in-flight counts the memory model reads from the slots are the
// closed forms of the one-stage-per-device schedules.
TEST(Schedule, InFlightMatchesTheClosedForms) {
  for (unsigned K = 1; K <= 8; ++K)
    for (unsigned M = 1; M <= 12; ++M)
      for (const char *n : {"gpipe", "1f1b", "zbh1", "zbh2"}) {
        auto f = named(n).microBatchesInFlight(K, M, true);
        ASSERT_TRUE(f.isOk());
        for (unsigned s = 0; s < K; ++s) {
          const std::string sn = n;
          unsigned warm = sn == "gpipe"  ? M
                          : sn == "zbh2" ? std::min(2 * (K - s) - 2, M)
                                         : std::min(K - s - 1, M);
          unsigned defer = sn == "zbh1" || sn == "zbh2" ? s : 0;
          unsigned expect = sn == "gpipe" ? M : std::min(warm + 1 + defer, M);
          EXPECT_EQ((*f)[s], expect) << n << " K=" << K << " M=" << M << " stage " << s;
        }
      }
}

// Every schedule, any K and M it accepts: each stage runs F, R, B and W
// once per micro-batch, on the stage's device, F and B and W in ascending
// micro-batch order (what makes training independent of the schedule), B
// after its F and W after its B; the optimizer last. Under random stage
// and transfer times the programs never deadlock.
TEST(Schedule, EveryScheduleKeepsTheInvariants) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  for (const Shape &sh : kAll)
    for (unsigned K = 1; K <= 6; ++K)
      for (unsigned M = 1; M <= 13; ++M) {
        const Schedule s = named(sh.name, sh.v);
        if (!s.check(K, M).isOk())
          continue;
        const std::string what = cat(sh.name, " v=", sh.v, " K=", K, " M=", M);
        auto slots = s.build(K, M, true);
        ASSERT_TRUE(slots.isOk()) << what << ": " << slots.status().message();
        const unsigned S = s.numStages(K);
        // next[work][stage]: the micro-batch expected next.
        std::vector<std::vector<unsigned>> next(4, std::vector<unsigned>(S, 0));
        for (unsigned d = 0; d < K; ++d) {
          const std::vector<Slot> &prog = (*slots)[d];
          ASSERT_FALSE(prog.empty()) << what;
          EXPECT_EQ(prog.back().work, Work::Optimizer) << what;
          for (size_t i = 0; i + 1 < prog.size(); ++i) {
            const Slot &sl = prog[i];
            ASSERT_LT(sl.stage, S) << what;
            EXPECT_EQ(s.deviceOf(sl.stage, K), d) << what;
            ASSERT_NE(sl.work, Work::Optimizer) << what;
            const int w = static_cast<int>(sl.work);
            EXPECT_EQ(sl.microBatch, next[w][sl.stage]++) << what << " device " << d << " slot " << i;
            if (sl.work == Work::Backward) {
              EXPECT_GT(next[0][sl.stage], sl.microBatch) << what << ": B before its F";
            }
            if (sl.work == Work::WeightGrad) {
              EXPECT_GT(next[2][sl.stage], sl.microBatch) << what << ": W before its B";
            }
          }
        }
        for (const auto &perWork : next)
          for (unsigned st = 0; st < S; ++st)
            EXPECT_EQ(perWork[st], M) << what << " stage " << st;
        for (int trial = 0; trial < 3; ++trial) {
          std::vector<StageTimes> t(S);
          for (StageTimes &x : t)
            x = {u(rng), u(rng), u(rng), trial == 2 ? u(rng) : 0, u(rng) / 4, u(rng) / 4, u(rng)};
          auto progs = idealSchedule(s, static_cast<int>(M), true, t);
          ASSERT_TRUE(progs.isOk()) << what;
          auto r = simulate(*progs);
          EXPECT_TRUE(r.isOk()) << what << ": " << r.status().message();
        }
      }
}

// The bubble on equal stages (F, B, W of every stage equal, no transfers)
// against each schedule's published formula, as the step's excess over the
// ideal M (F + B + W) of one device:
//   gpipe, 1f1b          (K - 1)(F + B)                (GPipe; PipeDream-Flush)
//   interleaved          (K - 1)(F + B) / v            (Narayanan et al. 2021)
//   zbh1                 (K - 1)(F + B - W)            (Qi et al. 2023, ZB-H1)
// with the stage times of interleaved one v-th of a one-stage device's.
// The papers' B of gpipe, 1f1b and interleaved is the whole backward; here
// a stage sends its input gradients before it computes W, so W is off the
// critical path and the formulas take B alone (with W = 0 they are the
// papers' exactly).
TEST(Schedule, BubbleMatchesThePublishedFormulas) {
  for (unsigned K : {2u, 4u, 8u})
    for (unsigned M : {8u, 16u, 32u}) {
      const double F = 1, B = 1.5, W = 0.5;
      const double ideal = M * (F + B + W);
      for (const char *n : {"gpipe", "1f1b"}) {
        EXPECT_NEAR(makespan(named(n), K, M, F, B, W) - ideal, (K - 1) * (F + B), 1e-9)
            << n << " K=" << K << " M=" << M;
        EXPECT_NEAR(makespan(named(n), K, M, F, B + W, 0) - ideal, (K - 1) * (F + B + W), 1e-9)
            << n << " K=" << K << " M=" << M << ", W in B";
      }
      EXPECT_NEAR(makespan(named("zbh1"), K, M, F, B, W) - ideal, (K - 1) * (F + B - W), 1e-9)
          << "zbh1 K=" << K << " M=" << M;
      for (unsigned v : {2u, 4u}) {
        if (M % K != 0)
          continue;
        EXPECT_NEAR(makespan(named("interleaved", v), K, M, F / v, B / v, W / v) - ideal,
                    (K - 1) * (F + B) / v, 1e-9)
            << "interleaved v=" << v << " K=" << K << " M=" << M;
        EXPECT_NEAR(makespan(named("interleaved", v), K, M, F / v, (B + W) / v, 0) - ideal,
                    (K - 1) * (F + B + W) / v, 1e-9)
            << "interleaved v=" << v << " K=" << K << " M=" << M << ", W in B";
      }
    }
}

// ZB-V against 1F1B and ZB-H1 on equal stages, F = B = W (the paper's
// setting): a smaller bubble than both, with no device holding more than
// 1F1B's peak, K micro-batches of a one-stage device's activations (2K of
// its half-size stages).
TEST(Schedule, ZeroBubbleVBeatsOneFOneBAtItsMemory) {
  for (unsigned K : {2u, 4u, 8u, 16u})
    for (unsigned M : {K, 2 * K, 4 * K}) {
      const double ideal = M * 3.0;
      const double zbv = makespan(named("zbv"), K, M, 0.5, 0.5, 0.5) - ideal;
      const double h1 = makespan(named("zbh1"), K, M, 1, 1, 1) - ideal;
      const double onef = makespan(named("1f1b"), K, M, 1, 1, 1) - ideal;
      EXPECT_LT(zbv, h1) << "K=" << K << " M=" << M;
      EXPECT_LT(zbv, onef) << "K=" << K << " M=" << M;
      std::printf("K=%u M=%u bubble over the ideal %g: 1f1b %g, zbh1 %g, zbv %g\n", K, M, ideal,
                  onef, h1, zbv);
      auto slots = named("zbv").build(K, M, true);
      ASSERT_TRUE(slots.isOk());
      for (unsigned d = 0; d < K; ++d) {
        unsigned live = 0, peak = 0;
        for (const Slot &s : (*slots)[d]) {
          if (s.work == Work::Forward)
            peak = std::max(peak, ++live);
          else if (s.work == Work::WeightGrad)
            --live;
        }
        EXPECT_LE(peak, 2 * K) << "device " << d << " K=" << K << " M=" << M;
      }
    }
}

// PipeDream-2BW, K=3, M=4: device d pairs each forward with the backward
// 1F1B's steady state runs next; the w = K-d-1 backward passes a step
// leaves (primed: the step before's) open the next step's program, and the
// device's optimizer step follows its last backward of a step.
TEST(Schedule, TwoBWShape) {
  auto s = named("2bw").build(3, 4, true);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(str((*s)[0]), "F0 B2' W2' F1 B3' W3' O' F2 B0 W0 F3 B1 W1");
  EXPECT_EQ(str((*s)[1]), "F0 B3' W3' O' F1 B0 W0 F2 B1 W1 F3 B2 W2");
  EXPECT_EQ(str((*s)[2]), "F0 B0 W0 F1 B1 W1 F2 B2 W2 F3 B3 W3 O");
  // 1F1B's activation memory: min(K - s, M) micro-batches on stage s.
  for (unsigned K = 1; K <= 8; ++K)
    for (unsigned M = K; M <= 12; ++M) {
      auto f = named("2bw").microBatchesInFlight(K, M, true);
      ASSERT_TRUE(f.isOk());
      for (unsigned st = 0; st < K; ++st)
        EXPECT_EQ((*f)[st], K - st) << "K=" << K << " M=" << M << " stage " << st;
    }
  EXPECT_EQ(named("2bw").weightVersions(), 2u);
  EXPECT_EQ(named("1f1b").weightVersions(), 1u);
  auto few = named("2bw").build(4, 3, true);
  ASSERT_FALSE(few.isOk());
  EXPECT_NE(few.status().message().find("at least as many micro-batches as devices (got M=3, K=4)"),
            std::string::npos)
      << few.status().message();
  auto inference = named("2bw").build(2, 4, false);
  ASSERT_FALSE(inference.isOk());
  EXPECT_NE(inference.status().message().find("for training"), std::string::npos);
}

// 2bw's programs over three steps back to back (the first without its
// previous-step slots, a drain of those alone after the last): each stage
// runs F, B and W once per micro-batch of every step in ascending order, B
// after its F, W after its B, one optimizer step per step after the step's
// last W; under random times they never deadlock. On equal stages with no
// transfers the steady state has no bubble: a step takes M (F + B + W).
TEST(Schedule, TwoBWStepsRunBackToBack) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  const Schedule s = named("2bw");
  const unsigned steps = 3;
  for (unsigned K = 1; K <= 6; ++K)
    for (unsigned M = K; M <= 13; ++M) {
      const std::string what = cat("2bw K=", K, " M=", M);
      auto slots = s.build(K, M, true);
      ASSERT_TRUE(slots.isOk()) << what;
      for (unsigned d = 0; d < K; ++d) {
        std::vector<unsigned> next(4, 0);
        unsigned updates = 0;
        for (unsigned call = 0; call <= steps; ++call)
          for (const Slot &sl : (*slots)[d]) {
            if (sl.previousStep ? call == 0 : call == steps)
              continue;
            const unsigned step = call - (sl.previousStep ? 1 : 0);
            if (sl.work == Work::Optimizer) {
              EXPECT_EQ(updates++, step) << what;
              EXPECT_EQ(next[3], (step + 1) * M) << what << ": the update before the step's last W";
              continue;
            }
            const unsigned mb = step * M + sl.microBatch;
            const int w = static_cast<int>(sl.work);
            EXPECT_EQ(mb, next[w]++) << what << " device " << d;
            if (sl.work == Work::Backward) {
              EXPECT_GT(next[0], mb) << what << ": B before its F";
            }
            if (sl.work == Work::WeightGrad) {
              EXPECT_GT(next[2], mb) << what << ": W before its B";
            }
          }
        EXPECT_EQ(updates, steps) << what;
        for (unsigned n : next)
          EXPECT_EQ(n, steps * M) << what << " device " << d;
      }
      std::vector<StageTimes> t(K);
      for (StageTimes &x : t)
        x = {u(rng), u(rng), u(rng), 0, u(rng) / 4, u(rng) / 4, u(rng)};
      auto progs = idealSchedule(s, static_cast<int>(M), true, t);
      ASSERT_TRUE(progs.isOk()) << what;
      auto r = simulate(*progs);
      ASSERT_TRUE(r.isOk()) << what << ": " << r.status().message();
      EXPECT_GT(r->makespan, 0) << what;
      if (K > 1) {
        const double F = 1, B = 1.5, W = 0.5;
        EXPECT_NEAR(makespan(s, K, M, F, B, W), M * (F + B + W), 1e-9) << what;
        // 1F1B pays (K - 1)(F + B) on top every step.
        EXPECT_NEAR(makespan(named("1f1b"), K, M, F, B, W) - makespan(s, K, M, F, B, W),
                    (K - 1) * (F + B), 1e-9)
            << what;
      }
    }
}
