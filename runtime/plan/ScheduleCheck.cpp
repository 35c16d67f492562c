//===- runtime/plan/ScheduleCheck.cpp - Proving a plan's programs ---------===//
#include "runtime/plan/ScheduleCheck.h"

#include "pipeline/Schedule.h"

#include "support/DenseIds.h"
#include "support/DisjointSets.h"
#include "support/Parallel.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <map>
#include <memory_resource>
#include <queue>
#include <set>
#include <tuple>

namespace pipec::plan {

namespace {

std::string instructionText(const Plan &p, int d, int i) {
  const Instruction &ins = p.devices(d).program(i);
  std::string s = cat(Instruction::Kind_Name(ins.kind()), "(mb ", ins.micro_batch());
  if (ins.kind() == Instruction::SEND || ins.kind() == Instruction::RECV)
    s += cat(", '", p.tensors(ins.tensor()).name(), "' ",
             ins.kind() == Instruction::SEND ? "to" : "from", " device ", ins.peer());
  return s + ")";
}

using Key = std::tuple<int, int, int32_t, uint32_t>; // from, to, tensor, mb

Status checkPairing(const Plan &p) {
  std::map<Key, int> sends, recvs;
  for (int d = 0; d < p.devices_size(); ++d)
    for (const Instruction &ins : p.devices(d).program()) {
      if (ins.kind() == Instruction::SEND)
        ++sends[{d, ins.peer(), ins.tensor(), ins.micro_batch()}];
      else if (ins.kind() == Instruction::RECV)
        ++recvs[{ins.peer(), d, ins.tensor(), ins.micro_batch()}];
    }
  auto describe = [&](const Key &k) {
    return cat("'", p.tensors(std::get<2>(k)).name(), "' of micro-batch ", std::get<3>(k),
               " from device ", std::get<0>(k), " to device ", std::get<1>(k));
  };
  for (const auto &[k, n] : sends) {
    if (n > 1)
      return errorf("schedule: ", describe(k), " is sent ", n, " times");
    if (!recvs.count(k))
      return errorf("schedule: ", describe(k), " is sent but never received");
  }
  for (const auto &[k, n] : recvs) {
    if (n > 1)
      return errorf("schedule: ", describe(k), " is received ", n, " times");
    if (!sends.count(k))
      return errorf("schedule: ", describe(k), " is received but never sent");
  }
  return Status::ok();
}

/// `optimizerIsCollective`: OPTIMIZER waits for every device (flush
/// schedules; a no-flush schedule's optimizer steps are each device's own).
Status checkProgress(const Plan &p, bool optimizerIsCollective) {
  const int K = p.devices_size();
  std::vector<int> pc(K, 0);
  std::set<Key> inFlight;
  for (;;) {
    bool moved = false, done = true;
    for (int d = 0; d < K; ++d) {
      const Device &dev = p.devices(d);
      while (pc[d] < dev.program_size()) {
        const Instruction &ins = dev.program(pc[d]);
        if (ins.kind() == Instruction::RECV) {
          auto it = inFlight.find({ins.peer(), d, ins.tensor(), ins.micro_batch()});
          if (it == inFlight.end())
            break;
          inFlight.erase(it);
        } else if (ins.kind() == Instruction::SEND) {
          inFlight.insert({d, ins.peer(), ins.tensor(), ins.micro_batch()});
        } else if (ins.kind() == Instruction::OPTIMIZER && optimizerIsCollective) {
          // A collective: every device must be at an OPTIMIZER.
          bool all = true;
          for (int e = 0; e < K; ++e)
            all = all && pc[e] < p.devices(e).program_size() &&
                  p.devices(e).program(pc[e]).kind() == Instruction::OPTIMIZER;
          if (!all)
            break;
          for (int e = 0; e < K; ++e)
            ++pc[e];
          moved = true;
          continue;
        }
        ++pc[d];
        moved = true;
      }
      if (pc[d] < dev.program_size())
        done = false;
    }
    if (done)
      return Status::ok();
    if (!moved) {
      std::string stuck;
      for (int d = 0; d < K; ++d)
        if (pc[d] < p.devices(d).program_size())
          stuck += cat(stuck.empty() ? "" : "; ", "device ", d, " waits at instruction ", pc[d],
                       " ", instructionText(p, d, pc[d]));
      return errorf("schedule: the devices deadlock: ", stuck);
    }
  }
}

Status checkDevice(const Plan &p, int d) {
  const Device &dev = p.devices(d);
  const unsigned M = p.pipeline().num_micro_batches();
  const size_t T = static_cast<size_t>(p.tensors_size());
  const std::string where = cat("schedule: device ", d);
  std::vector<char> resident(T, 0);
  for (int32_t w : dev.weights())
    resident[w] = 1;
  // The tensors the device allocates or touches, numbered densely
  // (support/DenseIds.h): the tables below are per (tensor, micro-batch).
  DenseIds ids(T);
  for (const Allocation &a : dev.allocations())
    ids.add(a.tensor());
  for (const Instruction &ins : dev.program())
    if (ins.kind() == Instruction::SEND || ins.kind() == Instruction::RECV)
      ids.add(ins.tensor());
  for (const Node &n : dev.nodes()) {
    for (int32_t t : n.inputs())
      if (t >= 0)
        ids.add(t);
    for (int32_t t : n.outputs())
      ids.add(t);
    for (const Guard &gd : n.guards())
      ids.add(gd.tensor());
  }
  ids.finish();
  const size_t L = ids.size();
  auto key = [&](int32_t t, unsigned mb) { return static_cast<size_t>(ids.local(t)) * M + mb; };
  std::vector<int64_t> offset(L * M, -1);
  for (const Allocation &a : dev.allocations())
    offset[key(a.tensor(), a.micro_batch())] = static_cast<int64_t>(a.offset());
  struct Life {
    int64_t start = -1, end = -1;
  };
  std::vector<Life> life(L * M);
  std::vector<char> written(L * M, 0);
  // Tensors the runtime takes after the instruction that writes them (graph
  // outputs, parameter gradients, running statistics): they must survive the
  // rest of that instruction.
  std::vector<char> collected(T, 0);
  for (int32_t t : p.outputs())
    collected[t] = 1;
  for (const Parameter &pp : p.training().params())
    collected[pp.grad()] = 1;
  for (const StateUpdate &u : p.training().state_updates())
    collected[u.value()] = 1;
  std::vector<size_t> writtenHere;
  // A view's output is its input's buffer: both instances live as one,
  // under the instance that came first.
  DisjointSets instances(L * M);
  auto find = [&](size_t k) { return instances.find(k); };
  int64_t time = 0;
  // `node` is the reader (null for a SEND); its text is built only for an
  // error: formatting it for every read showed in a large check's time.
  auto read = [&](int32_t t, unsigned mb, int i, const Node *node) -> Status {
    auto what = [&] { return node ? cat("node '", node->name(), "'") : std::string("SEND"); };
    const TensorInfo &ti = p.tensors(t);
    if (resident[t])
      return Status::ok();
    if (ti.kind() == TensorInfo::WEIGHT || ti.kind() == TensorInfo::CONSTANT)
      return errorf(where, " ", what(), " at instruction ", i, " reads weight '", ti.name(),
                    "' that the device does not load");
    size_t k = key(t, mb);
    if (ti.kind() == TensorInfo::INPUT && !written[k]) {
      written[k] = 1; // fed just before the instruction
      life[k].start = time;
    }
    if (!written[k])
      return errorf(where, " ", what(), " at instruction ", i, " ", instructionText(p, d, i),
                    " reads '", ti.name(), "' of micro-batch ", mb, " before it is written");
    if (offset[k] < 0)
      return errorf(where, ": '", ti.name(), "' of micro-batch ", mb, " has no arena allocation");
    Life &l = life[find(k)];
    l.end = std::max(l.end, time);
    return Status::ok();
  };
  auto write = [&](int32_t t, unsigned mb, int i) -> Status {
    size_t k = key(t, mb);
    const TensorInfo &ti = p.tensors(t);
    if (ti.kind() != TensorInfo::ACTIVATION)
      return errorf(where, " instruction ", i, " writes '", ti.name(), "', which is not an activation");
    if (offset[k] < 0)
      return errorf(where, ": '", ti.name(), "' of micro-batch ", mb, " has no arena allocation");
    if (!written[k])
      life[k].start = time;
    written[k] = 1;
    Life &l = life[find(k)];
    l.end = std::max(l.end, time);
    if (collected[t])
      writtenHere.push_back(k);
    return Status::ok();
  };
  // A view node: its input must be an arena instance at the same offset,
  // of the same size as the output, which then joins the input's lifetime.
  auto view = [&](const Node &n, unsigned mb, int i) -> Status {
    if (n.inputs_size() < 1 || n.outputs_size() != 1 || n.inputs(0) < 0)
      return errorf(where, ": view node '", n.name(), "' needs an input 0 and one output");
    const int32_t in = n.inputs(0), out = n.outputs(0);
    const size_t ki = key(in, mb), ko = key(out, mb);
    if (resident[in] || p.tensors(in).bytes() != p.tensors(out).bytes() || offset[ki] != offset[ko])
      return errorf(where, ": view node '", n.name(), "' must map '", p.tensors(in).name(),
                    "' of micro-batch ", mb, " (", p.tensors(in).bytes(), " bytes in the arena at ",
                    offset[ki], ") onto '", p.tensors(out).name(), "' (", p.tensors(out).bytes(),
                    " bytes at ", offset[ko], ")");
    PIPEC_TRY(write(out, mb, i));
    size_t ri = find(ki), ro = find(ko);
    if (ri != ro) {
      instances.join(ri, ro);
      life[ri].end = std::max(life[ri].end, life[ro].end);
    }
    return Status::ok();
  };
  for (int i = 0; i < dev.program_size(); ++i) {
    const Instruction &ins = dev.program(i);
    const unsigned mb = ins.micro_batch();
    writtenHere.clear();
    switch (ins.kind()) {
    case Instruction::SEND:
      PIPEC_TRY(read(ins.tensor(), mb, i, nullptr));
      ++time;
      break;
    case Instruction::RECV:
      PIPEC_TRY(write(ins.tensor(), mb, i));
      ++time;
      break;
    case Instruction::OPTIMIZER: break;
    default:
      for (int32_t ni : ins.nodes()) {
        const Node &n = dev.nodes(ni);
        for (int32_t t : n.inputs())
          if (t >= 0)
            PIPEC_TRY(read(t, mb, i, &n));
        for (const Guard &gd : n.guards())
          PIPEC_TRY(read(gd.tensor(), mb, i, &n));
        if (n.view())
          PIPEC_TRY(view(n, mb, i));
        else
          for (int32_t t : n.outputs())
            PIPEC_TRY(write(t, mb, i));
        ++time;
      }
    }
    // Collected after the instruction's last node (time - 1): live until
    // then.
    for (size_t k : writtenHere) {
      Life &l = life[find(k)];
      l.end = std::max(l.end, time - 1);
    }
  }
  // Instances whose lifetimes overlap must not share bytes: sweep the
  // instances by start time. The live ones, so far proven disjoint, sit in
  // a map by offset, so a new one can only collide with its neighbours
  // there; they leave it (a heap by end time) once dead. O(n log n): the
  // plain sweep against every live instance was quadratic in training
  // plans, where most activations live from forward to backward.
  // The instances by start time (0 .. time - 1), by a counting sort.
  std::vector<size_t> byStart(static_cast<size_t>(time) + 2, 0);
  size_t live0 = 0;
  for (size_t k = 0; k < L * M; ++k)
    if (life[k].start >= 0 && find(k) == k) {
      ++byStart[static_cast<size_t>(life[k].start) + 1];
      ++live0;
    }
  for (size_t t = 1; t < byStart.size(); ++t)
    byStart[t] += byStart[t - 1];
  std::vector<size_t> order(live0);
  for (size_t k = 0; k < L * M; ++k)
    if (life[k].start >= 0 && find(k) == k)
      order[byStart[static_cast<size_t>(life[k].start)]++] = k;
  std::pmr::unsynchronized_pool_resource pool; // the map's nodes, reused as instances die
  std::pmr::map<uint64_t, std::pair<uint64_t, size_t>> live(&pool); // offset -> (end offset, instance)
  using Death = std::pair<int64_t, uint64_t>;            // (end time, offset)
  std::priority_queue<Death, std::vector<Death>, std::greater<Death>> deaths;
  auto collide = [&](size_t k, size_t a) {
    return errorf(where, ": '", p.tensors(ids.id(k / M)).name(), "' of micro-batch ", k % M, " and '",
                  p.tensors(ids.id(a / M)).name(), "' of micro-batch ", a % M,
                  " are live at once but share arena bytes");
  };
  for (size_t k : order) {
    while (!deaths.empty() && deaths.top().first < life[k].start) {
      live.erase(deaths.top().second);
      deaths.pop();
    }
    const uint64_t lo = static_cast<uint64_t>(offset[k]), hi = lo + p.tensors(ids.id(k / M)).bytes();
    if (hi == lo)
      continue; // no bytes to share
    auto next = live.upper_bound(lo);
    if (next != live.end() && next->first < hi)
      return collide(k, next->second.second);
    if (next != live.begin()) {
      auto prev = std::prev(next);
      if (prev->second.first > lo)
        return collide(k, prev->second.second);
    }
    live.emplace(lo, std::make_pair(hi, k));
    deaths.push({life[k].end, lo});
  }
  return Status::ok();
}

/// Every parameter's gradient is computed once per micro-batch, by one
/// device, in a backward instruction: a plan that lost one would train on
/// stale or uninitialised gradients.
/// `stepMicroBatches`: the micro-batches of one step (a no-flush plan is
/// checked unrolled over several steps).
Status checkGradients(const Plan &p, unsigned stepMicroBatches) {
  if (!p.pipeline().training())
    return Status::ok();
  const unsigned M = p.pipeline().num_micro_batches();
  std::vector<int> gradOf(static_cast<size_t>(p.tensors_size()), -1);
  for (int i = 0; i < p.training().params_size(); ++i)
    gradOf[p.training().params(i).grad()] = i;
  std::vector<uint32_t> writes(static_cast<size_t>(p.training().params_size()) * M, 0);
  // The last micro-batch whose gradient each parameter got: gradients
  // accumulate in ascending micro-batch order, whatever K and the schedule.
  std::vector<int64_t> last(static_cast<size_t>(p.training().params_size()), -1);
  for (const Device &dev : p.devices())
    for (const Instruction &ins : dev.program()) {
      if (ins.kind() == Instruction::SEND || ins.kind() == Instruction::RECV ||
          ins.kind() == Instruction::OPTIMIZER)
        continue;
      for (int32_t ni : ins.nodes())
        for (int32_t t : dev.nodes(ni).outputs())
          if (gradOf[t] >= 0) {
            if (ins.kind() != Instruction::BACKWARD && ins.kind() != Instruction::WEIGHT_GRAD)
              return errorf("schedule: gradient '", p.tensors(t).name(), "' is computed by a ",
                            Instruction::Kind_Name(ins.kind()), " instruction");
            ++writes[static_cast<size_t>(gradOf[t]) * M + ins.micro_batch()];
            int64_t &prev = last[static_cast<size_t>(gradOf[t])];
            if (static_cast<int64_t>(ins.micro_batch()) < prev)
              return errorf("schedule: the gradient of '",
                            p.tensors(p.training().params(gradOf[t]).weight()).name(),
                            "' is computed for micro-batch ", ins.micro_batch(), " after micro-batch ",
                            prev, " (gradients accumulate in ascending micro-batch order)");
            prev = ins.micro_batch();
          }
    }
  // Each device's n-th OPTIMIZER updates with step n's gradients: every one
  // it computes for that step comes before it, none of the next step's.
  const unsigned SM = std::max(stepMicroBatches, 1u);
  for (const Device &dev : p.devices()) {
    std::vector<int> mine; // parameters whose gradient this device computes
    for (const Node &n : dev.nodes())
      for (int32_t t : n.outputs())
        if (t >= 0 && gradOf[t] >= 0)
          mine.push_back(gradOf[t]);
    unsigned updates = 0;
    std::vector<char> done(static_cast<size_t>(p.training().params_size()) * M, 0);
    for (const Instruction &ins : dev.program()) {
      if (ins.kind() == Instruction::OPTIMIZER) {
        for (int i : mine)
          for (unsigned mb = updates * SM; mb < (updates + 1) * SM && mb < M; ++mb)
            if (!done[static_cast<size_t>(i) * M + mb])
              return errorf("schedule: device ", dev.index(), "'s optimizer step ", updates + 1,
                            " comes before the gradient of '", p.tensors(p.training().params(i).weight()).name(),
                            "' for micro-batch ", mb % SM, " of its step");
        ++updates;
        continue;
      }
      if (ins.kind() == Instruction::SEND || ins.kind() == Instruction::RECV)
        continue;
      for (int32_t ni : ins.nodes())
        for (int32_t t : dev.nodes(ni).outputs()) {
          if (gradOf[t] < 0)
            continue;
          if (ins.micro_batch() / SM > updates)
            return errorf("schedule: device ", dev.index(), " computes the gradient of '",
                          p.tensors(p.training().params(gradOf[t]).weight()).name(), "' for step ",
                          ins.micro_batch() / SM + 1, " before its optimizer step ", updates + 1);
          done[static_cast<size_t>(gradOf[t]) * M + ins.micro_batch()] = 1;
        }
    }
  }
  // A gradient accumulated in place by its kernel: one producing node with
  // one output, read by no node, never sent or received. One walk over the
  // plan for all of them.
  std::vector<int> inPlace(static_cast<size_t>(p.tensors_size()), -1); // tensor -> param
  for (int i = 0; i < p.training().params_size(); ++i)
    if (p.training().params(i).accumulate_in_place())
      inPlace[static_cast<size_t>(p.training().params(i).grad())] = i;
  auto inPlaceError = [&](int32_t grad, const std::string &why) {
    const Parameter &pp = p.training().params(inPlace[static_cast<size_t>(grad)]);
    return errorf("schedule: the gradient of '", p.tensors(pp.weight()).name(),
                  "' is accumulated in place but ", why);
  };
  std::vector<int> producers(static_cast<size_t>(p.tensors_size()), 0);
  for (const Device &dev : p.devices()) {
    for (const Node &n : dev.nodes()) {
      for (int32_t t : n.outputs())
        if (t >= 0 && inPlace[static_cast<size_t>(t)] >= 0) {
          if (n.outputs_size() != 1)
            return inPlaceError(t, cat("its node has ", n.outputs_size(), " outputs"));
          ++producers[static_cast<size_t>(t)];
        }
      for (int32_t t : n.inputs())
        if (t >= 0 && inPlace[static_cast<size_t>(t)] >= 0)
          return inPlaceError(t, cat("node '", n.name(), "' reads it"));
    }
    for (const Instruction &ins : dev.program())
      if ((ins.kind() == Instruction::SEND || ins.kind() == Instruction::RECV) &&
          ins.tensor() >= 0 && inPlace[static_cast<size_t>(ins.tensor())] >= 0)
        return inPlaceError(ins.tensor(), "sent between devices");
  }
  for (int i = 0; i < p.training().params_size(); ++i) {
    const Parameter &pp = p.training().params(i);
    if (pp.accumulate_in_place() && producers[static_cast<size_t>(pp.grad())] != 1)
      return inPlaceError(pp.grad(), cat(producers[static_cast<size_t>(pp.grad())],
                                         " nodes compute it"));
  }
  for (int i = 0; i < p.training().params_size(); ++i)
    for (unsigned mb = 0; mb < M; ++mb)
      if (uint32_t w = writes[static_cast<size_t>(i) * M + mb]; w != 1)
        return errorf("schedule: the gradient of '", p.tensors(p.training().params(i).weight()).name(),
                      "' is computed ", w, " times for micro-batch ", mb, " (once is right)");
  return Status::ok();
}

/// A no-flush plan's programs run for `steps` steps back to back, as one
/// plan: the first step without its previous-step instructions, a drain
/// of those alone after the last; micro-batch mb of step s is s * M + mb,
/// at the allocation of mb. The checks above then prove the concatenation:
/// messages paired across steps, no deadlock, every read after its write
/// and no two live instances on the same bytes, whatever step they are of.
Status checkFlushed(const Plan &p, bool optimizerIsCollective, unsigned stepMicroBatches);

} // namespace

Plan unrolledSteps(const Plan &p, unsigned steps) {
  const unsigned M = p.pipeline().num_micro_batches();
  Plan u = p;
  u.mutable_pipeline()->set_num_micro_batches(M * steps);
  for (int d = 0; d < p.devices_size(); ++d) {
    const Device &dev = p.devices(d);
    Device *out = u.mutable_devices(d);
    out->clear_program();
    out->clear_allocations();
    for (unsigned call = 0; call <= steps; ++call)
      for (const Instruction &ins : dev.program()) {
        if (ins.previous_step() ? call == 0 : call == steps)
          continue;
        const unsigned step = call - (ins.previous_step() ? 1 : 0);
        Instruction *c = out->add_program();
        *c = ins;
        c->set_previous_step(false);
        c->set_micro_batch(step * M + ins.micro_batch());
      }
    for (unsigned step = 0; step < steps; ++step)
      for (const Allocation &a : dev.allocations()) {
        Allocation *c = out->add_allocations();
        *c = a;
        c->set_micro_batch(step * M + a.micro_batch());
      }
  }
  return u;
}

Status checkSchedule(const Plan &p) {
  // A named schedule must be one pipec knows, with its stages per device
  // (hand-written plans may leave it empty).
  bool noFlush = false;
  if (!p.pipeline().schedule().empty()) {
    const unsigned per = std::max(p.pipeline().stages_per_device(), 1u);
    PIPEC_ASSIGN(pipeline::Schedule s, pipeline::Schedule::ofPlan(p.pipeline().schedule(), per));
    if (s.stagesPerDevice() != per)
      return errorf("schedule: the ", s.name(), " schedule runs ", s.stagesPerDevice(),
                    " stage(s) per device, the plan says ", per);
    noFlush = s.noFlush();
  }
  for (const Device &dev : p.devices())
    for (const Instruction &ins : dev.program())
      if (ins.previous_step() && !noFlush)
        return errorf("schedule: device ", dev.index(), " has a previous-step instruction, but the '",
                      p.pipeline().schedule(), "' schedule flushes every step");
  if (noFlush) {
    if (!p.pipeline().training())
      return errorf("schedule: the ", p.pipeline().schedule(), " schedule is for training plans");
    // Three steps: the first, one whose both neighbours run, the last.
    return checkFlushed(unrolledSteps(p, 3), false, p.pipeline().num_micro_batches());
  }
  return checkFlushed(p, true, p.pipeline().num_micro_batches());
}

namespace {

Status checkFlushed(const Plan &p, bool optimizerIsCollective, unsigned stepMicroBatches) {
  for (int d = 0; d < p.devices_size(); ++d) {
    std::vector<char> computed(static_cast<size_t>(p.tensors_size()), 0);
    for (const Node &n : p.devices(d).nodes())
      for (int32_t t : n.outputs())
        computed[t] = 1;
    for (const Instruction &ins : p.devices(d).program())
      if (ins.kind() == Instruction::RECV && computed[ins.tensor()])
        return errorf("schedule: device ", d, " both computes and receives '",
                      p.tensors(ins.tensor()).name(), "'");
  }
  PIPEC_TRY(checkPairing(p));
  PIPEC_TRY(checkProgress(p, optimizerIsCollective));
  PIPEC_TRY(checkGradients(p, stepMicroBatches));
  // The devices' arenas are checked on the usable cores at once; the
  // error reported is the lowest device's, whatever the thread count.
  std::vector<Status> results(static_cast<size_t>(p.devices_size()));
  forEachOnCores(results.size(), [&](size_t d) { results[d] = checkDevice(p, static_cast<int>(d)); });
  for (Status &r : results)
    PIPEC_TRY(std::move(r));
  return Status::ok();
}

} // namespace

} // namespace pipec::plan
