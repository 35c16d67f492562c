// partitioner/Partitioner.cpp (in progress)
