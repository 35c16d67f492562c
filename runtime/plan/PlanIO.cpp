// runtime/plan/PlanIO.cpp (in progress)
