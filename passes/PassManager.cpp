// passes/PassManager.cpp (in progress)
