//===- support/UpdateScalars.h - One optimizer step's scalars --*- C++ -*-===//
//
// Everything an element of an optimizer update needs besides the element's
// own values: the update rule's options and its per-step scalars (bias
// corrections, step sizes, 1 - lr*wd), computed once per step in double
// from the float learning rate and rounded to float, as torch.optim does
// with its Python-float scalars. train::Optimizer::scalars() computes
// them; the CPU's update loops (runtime/train/Optimizer.cpp) and the
// device update's element body (runtime/cuda/UpdateBodies.h) both read
// this one struct, so the two cannot drift apart.
//
// A plain struct with no library types: CUDA kernels take it by value. It
// sits in support/ because both runtime/train and the backends' seam
// (runtime/kernel/Backend.h) use it, and neither depends on the other.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace pipec::train {

struct UpdateScalars {
  enum Kind : int32_t { Sgd = 0, Adam = 1, RmsProp = 2 }; ///< AdamW: Adam with `decoupled`
  int32_t kind = Sgd;
  int32_t states = 0; ///< state buffers per parameter (Optimizer::stateTensors())

  // Options, fixed for the run (but `first`).
  bool l2 = false;        ///< weight decay added to the gradient (sgd, adam, rmsprop)
  bool decoupled = false; ///< adamw: the parameter multiplied by 1 - lr*wd
  bool momentum = false;  ///< sgd, rmsprop: a momentum buffer
  bool first = false;     ///< sgd: step 1, the momentum buffer starts as the gradient
  bool nesterov = false;  ///< sgd
  bool amsgrad = false;   ///< adam, adamw
  bool centered = false;  ///< rmsprop
  bool lerpSmall = false; ///< |lerp weight| < 0.5: ATen's lerp formula choice

  // Scalars of the step, each rounded to float once.
  float negLr = 0;        ///< -lr (sgd, rmsprop)
  float wd = 0;           ///< weight decay
  float decay = 1;        ///< 1 - lr*wd (adamw)
  float mu = 0;           ///< momentum (sgd, rmsprop)
  float oneMinusDamp = 1; ///< 1 - dampening (sgd)
  float lerpWeight = 0;   ///< 1 - beta1 (adam), 1 - alpha (rmsprop's grad_avg)
  float beta2 = 0, oneMinusBeta2 = 0;
  float bc2Sqrt = 1;      ///< sqrt(1 - beta2^t)
  float eps = 0;
  float negStepSize = 0;  ///< -lr / (1 - beta1^t)
  float alpha = 0, oneMinusAlpha = 0; ///< rmsprop
};

} // namespace pipec::train
