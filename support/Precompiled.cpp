//===- support/Precompiled.cpp - The target that compiles support/Precompiled.h ===//
//
// pipec_pch (top-level CMakeLists.txt) compiles the precompiled header the
// libraries reuse; a target needs a source of its own for that.
//
//===----------------------------------------------------------------------===//
