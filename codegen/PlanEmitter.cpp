// codegen/PlanEmitter.cpp (in progress)
