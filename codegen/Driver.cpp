//===- codegen/Driver.cpp - The compile pipeline as one call --------------===//
#include "codegen/Driver.h"

#include "codegen/Report.h"
#include "ir/Verifier.h"

namespace pipec::codegen {

Status runPasses(ir::Graph &g, const CompileOptions &opts) {
  passes::PassManager pm(opts.passManager);
  if (!opts.noPasses)
    for (const std::string &p : opts.passes.empty() ? passes::defaultPipeline() : opts.passes)
      PIPEC_TRY(pm.add(p));
  return pm.run(g);
}

Expected<Compiled> compileGraph(ir::Graph &g, const CompileOptions &opts) {
  PIPEC_TRY(runPasses(g, opts));
  PIPEC_TRY(ir::verifyGraph(g).withContext("the graph is not ready for code generation"));
  Compiled c;
  partitioner::PartitionOptions po = opts.partition;
  po.microBatches = opts.emit.microBatches;
  PIPEC_ASSIGN(c.partition, partitioner::partitionGraph(g, po));
  PIPEC_ASSIGN(c.plan, emitPlan(g, c.partition, opts.emit));
  c.report = buildReport(g, c.partition, c.plan);
  return c;
}

} // namespace pipec::codegen
