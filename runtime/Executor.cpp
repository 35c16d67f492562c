// runtime/Executor.cpp (in progress)
