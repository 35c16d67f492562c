//===- runtime/plan/Predicted.cpp - A plan's predicted timeline -----------===//
#include "runtime/plan/Predicted.h"

namespace pipec::plan {

pipeline::SimOp simOpOf(Instruction::Kind k) {
  switch (k) {
  case Instruction::FORWARD: return pipeline::SimOp::Forward;
  case Instruction::BACKWARD: return pipeline::SimOp::Backward;
  case Instruction::WEIGHT_GRAD: return pipeline::SimOp::WeightGrad;
  case Instruction::RECOMPUTE: return pipeline::SimOp::Recompute;
  case Instruction::SEND: return pipeline::SimOp::Send;
  case Instruction::RECV: return pipeline::SimOp::Recv;
  default: return pipeline::SimOp::Optimizer;
  }
}

double predictedSeconds(const Device &dev, const Instruction &ins) {
  if (ins.kind() == Instruction::RECV)
    return 0;
  double s = ins.predicted_seconds();
  if (s == 0)
    for (int32_t ni : ins.nodes())
      s += dev.nodes(ni).predicted_seconds();
  return s;
}

std::vector<pipeline::SimProgram> predictedPrograms(const Plan &p) {
  std::vector<pipeline::SimProgram> progs;
  progs.reserve(static_cast<size_t>(p.devices_size()));
  for (const Device &dev : p.devices()) {
    pipeline::SimProgram prog;
    prog.reserve(static_cast<size_t>(dev.program_size()));
    for (const Instruction &ins : dev.program()) {
      pipeline::SimInstr si;
      si.op = simOpOf(ins.kind());
      si.microBatch = static_cast<int>(ins.micro_batch());
      si.peer = ins.peer();
      si.tag = ins.tensor();
      si.duration = predictedSeconds(dev, ins);
      si.previousStep = ins.previous_step();
      prog.push_back(si);
    }
    progs.push_back(std::move(prog));
  }
  return progs;
}

} // namespace pipec::plan
