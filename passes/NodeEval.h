//===- passes/NodeEval.h - Evaluate an IR node on constants ----*- C++ -*-===//
//
// Bridges the IR and the CPU kernels for compile-time evaluation: builds the
// kernel's OpDesc from a typed node and runs it on the node's constant
// inputs. Used by shape inference (folding shape subgraphs) and constant
// folding.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/IR.h"
#include "runtime/cpu/Kernel.h"

namespace pipec::passes {

/// The kernel description of a node whose inputs and outputs are typed.
cpu::OpDesc opDescForNode(const ir::Node &n, int64_t opset);
/// True if every present input is a constant, none is a trainable
/// parameter (training must see it), and the CPU has a kernel.
bool canEvaluate(const ir::Node &n);
/// Evaluates a node whose present inputs are all constants.
Expected<std::vector<Tensor>> evaluateNode(const ir::Node &n, int64_t opset);
/// Replaces the node's outputs by constants holding `values` and erases it.
void replaceWithConstants(ir::Graph &g, ir::Node *n, std::vector<Tensor> values);

} // namespace pipec::passes
