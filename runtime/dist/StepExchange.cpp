//===- runtime/dist/StepExchange.cpp - What devices exchange besides tensors -===//
#include "runtime/dist/StepExchange.h"

#include <algorithm>

namespace pipec::runtime {

Status StepExchange::reduceReplicaGradients(int d) {
  if (D_ < 2)
    return Status::ok();
  const int replica = d / K_, stage = d % K_;
  const uint32_t kind = static_cast<uint32_t>(SessionMessage::ReplicaGradient);
  // Each parameter's updater (replica 0's device of the stage, or the
  // device of its shard's replica) takes the other replicas' gradient
  // sums. Sends first: a send never waits for its receive.
  for (size_t i = 0; i < params_.size(); ++i) {
    train::ParamState &ps = params_[i];
    if (ps.device == stage && ps.updater != d)
      PIPEC_TRY(tr_->send(d, ps.updater, sessionTag(kind, static_cast<uint32_t>(i)), ps.accumOf(replica),
                          static_cast<size_t>(ps.n) * sizeof(float)));
  }
  // The sum in replica order, whichever replica updates: ((g0 + g1) + g2)
  // ..., so that a sharded optimizer gives bitwise the unsharded result.
  std::vector<float> part, sum;
  for (size_t i = 0; i < params_.size(); ++i) {
    train::ParamState &ps = params_[i];
    if (ps.updater != d)
      continue;
    const uint64_t tag = sessionTag(kind, static_cast<uint32_t>(i));
    const size_t bytes = static_cast<size_t>(ps.n) * sizeof(float);
    float *mine = ps.accumOf(replica);
    part.resize(static_cast<size_t>(ps.n));
    float *acc = mine;
    if (replica > 0) {
      sum.resize(static_cast<size_t>(ps.n));
      acc = sum.data();
      PIPEC_TRY(tr_->recv(d, stage, tag, acc, bytes));
    }
    for (int r = 1; r < D_; ++r) {
      const float *add = mine;
      if (r != replica) {
        PIPEC_TRY(tr_->recv(d, r * K_ + stage, tag, part.data(), bytes));
        add = part.data();
      }
      for (int64_t k = 0; k < ps.n; ++k)
        acc[k] += add[k];
    }
    if (acc != mine)
      std::copy(sum.begin(), sum.end(), mine);
  }
  return Status::ok();
}

Status StepExchange::syncSharedWeights(int d) {
  if (!syncWeights_)
    return Status::ok();
  const uint32_t kind = static_cast<uint32_t>(SessionMessage::SharedWeight);
  for (size_t i = 0; i < params_.size(); ++i) {
    train::ParamState &ps = params_[i];
    const size_t bytes = static_cast<size_t>(ps.n) * sizeof(float);
    if (ps.updater == d)
      for (int h : otherHolders_[i])
        PIPEC_TRY(tr_->send(d, h, sessionTag(kind, static_cast<uint32_t>(i)), ps.data, bytes));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    train::ParamState &ps = params_[i];
    const auto &others = otherHolders_[i];
    if (ps.updater != d && std::find(others.begin(), others.end(), d) != others.end())
      PIPEC_TRY(tr_->recv(d, ps.updater, sessionTag(kind, static_cast<uint32_t>(i)), ps.data,
                          static_cast<size_t>(ps.n) * sizeof(float)));
  }
  return Status::ok();
}

Status exchangeStepResults(Transport &tr, int me, const StepResults &how, std::vector<Tensor> &outputs,
                           std::vector<char> &collected, std::vector<double> &sq,
                           std::vector<double> &replicaLoss) {
  const unsigned MT = how.stepMicroBatches;
  const int K = how.stages, D = how.replicas;
  if (how.training) {
    // Each gradient's squared sum comes from the one device that updates
    // it, each replica's loss from the one device that computes it, every
    // other slot is 0: the sums are exact, the same bits on every process
    // and as on threads.
    std::vector<double> v(sq.size() + replicaLoss.size(), 0.0);
    if (!how.collective)
      std::copy(sq.begin(), sq.end(), v.begin());
    std::copy(replicaLoss.begin(), replicaLoss.end(), v.begin() + static_cast<ptrdiff_t>(sq.size()));
    PIPEC_TRY(tr.allReduceSum(me, v.data(), v.size()));
    if (!how.collective)
      std::copy(v.begin(), v.begin() + static_cast<ptrdiff_t>(sq.size()), sq.begin());
    std::copy(v.begin() + static_cast<ptrdiff_t>(sq.size()), v.end(), replicaLoss.begin());
  }
  const uint32_t kind = static_cast<uint32_t>(SessionMessage::Output);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const int stage = (*how.outputProducer)[i];
    if (stage < 0)
      continue;
    // A training step's outputs stay where they are computed (the loss
    // came with the all-reduce); an inference step's come to the leader,
    // each replica's M micro-batches from the device of its replica.
    if (!how.training) {
      const size_t part = outputs[i].bytes() / D;
      for (int r = 0; r < D; ++r) {
        const int from = r * K + stage;
        if (from == 0)
          continue;
        char *at = static_cast<char *>(outputs[i].raw()) + part * static_cast<size_t>(r);
        const uint64_t tag = sessionTag(kind, static_cast<uint32_t>(static_cast<int>(i) * D + r));
        if (me == from)
          PIPEC_TRY(tr.send(me, 0, tag, at, part));
        else if (me == 0)
          PIPEC_TRY(tr.recv(0, from, tag, at, part));
      }
    }
    if (me == 0)
      std::fill_n(collected.begin() + static_cast<ptrdiff_t>(i) * MT, MT, char{1});
  }
  return Status::ok();
}

Status agreeAcrossRanks(Transport &tr, int rank, int ranks, const Status &mine, const std::string &what) {
  // Every process learns which failed, so all stop together (or none).
  std::vector<double> failed(static_cast<size_t>(ranks), 0.0);
  failed[static_cast<size_t>(rank)] = mine.isOk() ? 0.0 : 1.0;
  PIPEC_TRY(tr.allReduceSum(rank, failed.data(), failed.size()));
  if (!mine.isOk())
    return mine;
  for (int r = 0; r < ranks; ++r)
    if (failed[static_cast<size_t>(r)] != 0.0)
      return errorf(what, ": rank ", r, " failed (it prints its own error)");
  return Status::ok();
}

} // namespace pipec::runtime
