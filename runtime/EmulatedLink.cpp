//===- runtime/EmulatedLink.cpp - The NCCL link on emulated GPUs ----------===//
#include "runtime/EmulatedLink.h"

#include "runtime/EmulatedGpu.h"
#include "runtime/dist/LinkSetup.h"
#include "runtime/plan/Rendezvous.h"
#include "support/Format.h"

#include <cstring>

namespace pipec::runtime {

namespace {

class EmulatedLink final : public DeviceLink {
public:
  EmulatedLink(const plan::Plan &p, int rank, Transport &tr)
      : p_(p), rank_(rank), tr_(tr), links_(plan::rankLinks(p, rank)), posted_(links_.channels.size(), 0) {}

  Status setUp() {
    GpuIdentity mine{};
    std::memcpy(mine.data(), &rank_, sizeof rank_); // a GPU per rank
    uint32_t made = 0;
    LinkEnds ends;
    ends.makeToken = [&]() -> Expected<LinkToken> {
      LinkToken t{};
      std::memcpy(t.data(), &rank_, sizeof rank_);
      ++made;
      std::memcpy(t.data() + sizeof rank_, &made, sizeof made);
      return t;
    };
    ends.join = [](size_t, const LinkToken &, int) { return Status::ok(); };
    return setUpChannels(links_, rank_, tr_, mine, rank_, ends);
  }

  // NCCL's channel stream waits for the device's stream before a send
  // reads the device's memory or a receive writes it; here the host waits
  // for the emulated GPU's stream (runtime/EmulatedGpu.h).
  Status send(int instruction, const void *src, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t k, ofInstruction(instruction, true));
    PIPEC_TRY(drainEmulatedStream(stream));
    return post(k, headerOf(instruction, bytes), src);
  }
  Status recv(int instruction, void *dst, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t k, ofInstruction(instruction, false));
    PIPEC_TRY(drainEmulatedStream(stream));
    return take(k, headerOf(instruction, bytes), dst);
  }
  Status sendTo(int peer, uint64_t tag, const void *src, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t k, ofPeer(peer, true));
    PIPEC_TRY(drainEmulatedStream(stream));
    return post(k, Header{tag, bytes, 0}, src);
  }
  Status recvFrom(int peer, uint64_t tag, void *dst, uint64_t bytes, void *stream) override {
    PIPEC_ASSIGN(size_t k, ofPeer(peer, false));
    PIPEC_TRY(drainEmulatedStream(stream));
    return take(k, Header{tag, bytes, 0}, dst);
  }
  Status finishStep() override {
    if (!failed_.isOk())
      return failed_;
    for (size_t k = 0; k < links_.channels.size(); ++k) {
      const plan::RankChannel &c = links_.channels[k];
      if (!c.replica && posted_[k] != c.messages)
        return errorf("rank ", rank_, ": the NCCL channel ", c.id, c.sender ? " to" : " from", " rank ", c.peer,
                      " (stage ", c.stage, ") carried ", posted_[k], " message(s) in a step; the plan gives it ",
                      c.messages);
    }
    std::fill(posted_.begin(), posted_.end(), 0);
    return Status::ok();
  }
  void abort(const Status &why) override {
    if (failed_.isOk())
      failed_ = why;
  }

private:
  /// What a message holds, as its sender posted it.
  struct Header {
    uint64_t tag; ///< messageTag (a plan message) or sessionTag (a replica exchange)
    uint64_t bytes;
    uint64_t place; ///< on its channel, in the step
  };

  Header headerOf(int instruction, uint64_t bytes) const {
    const plan::Instruction &ins = p_.devices(rank_ % p_.devices_size()).program(instruction);
    return Header{messageTag(ins.tensor(), ins.micro_batch()), bytes, 0};
  }
  std::string describe(const Header &h) const {
    const uint32_t high = static_cast<uint32_t>((h.tag >> 32) & 0x7fffffffu), low = static_cast<uint32_t>(h.tag);
    if (h.tag >> 63) {
      const char *what = high == static_cast<uint32_t>(SessionMessage::ReplicaGradient) ? "the gradient sum"
                         : high == static_cast<uint32_t>(SessionMessage::SharedWeight) ? "the updated weight"
                                                                                        : "session message";
      const std::string name = low < static_cast<uint32_t>(p_.training().params_size())
                                   ? p_.tensors(p_.training().params(static_cast<int>(low)).weight()).name()
                                   : cat(low);
      return cat(what, " of '", name, "' (", h.bytes, " bytes)");
    }
    const std::string name = high < static_cast<uint32_t>(p_.tensors_size()) ? p_.tensors(static_cast<int>(high)).name()
                                                                            : cat("tensor ", high);
    return cat("'", name, "' of micro-batch ", low, " (", h.bytes, " bytes)");
  }
  Expected<size_t> ofInstruction(int instruction, bool sending) const {
    return plan::channelOfInstruction(links_, rank_, instruction, sending);
  }
  Expected<size_t> ofPeer(int peer, bool sending) const { return plan::channelOfPeer(links_, rank_, peer, sending); }
  uint64_t tagOf(size_t k) const {
    return sessionTag(static_cast<uint32_t>(SessionMessage::LinkMessage),
                      static_cast<uint32_t>(links_.channels[k].id));
  }
  Status post(size_t k, Header h, const void *src) {
    if (!failed_.isOk())
      return failed_;
    h.place = posted_[k]++;
    const plan::RankChannel &c = links_.channels[k];
    // One tag per channel: MPI keeps the order of messages with one tag.
    PIPEC_TRY(tr_.send(rank_, c.peer, tagOf(k), &h, sizeof h));
    return tr_.send(rank_, c.peer, tagOf(k), src, h.bytes);
  }
  Status take(size_t k, Header want, void *dst) {
    if (!failed_.isOk())
      return failed_;
    want.place = posted_[k]++;
    const plan::RankChannel &c = links_.channels[k];
    Header got{};
    PIPEC_TRY(tr_.recv(rank_, c.peer, tagOf(k), &got, sizeof got));
    if (got.tag != want.tag || got.bytes != want.bytes || got.place != want.place)
      return errorf("message ", want.place, " of the step on the NCCL channel ", c.id,
                    " from rank ", c.peer, " (stage ", c.stage, ") is ", describe(got), ", message ", got.place,
                    " there, but this rank receives ", describe(want),
                    " with it: NCCL would deliver the wrong bytes");
    return tr_.recv(rank_, c.peer, tagOf(k), dst, want.bytes);
  }

  const plan::Plan &p_;
  const int rank_;
  Transport &tr_;
  const plan::RankLinks links_;
  std::vector<size_t> posted_; ///< per channel, in the step
  Status failed_;
};

} // namespace

Expected<std::unique_ptr<DeviceLink>> makeEmulatedLink(const plan::Plan &p, int rank, Transport &transport) {
  auto link = std::make_unique<EmulatedLink>(p, rank, transport);
  PIPEC_TRY(link->setUp());
  return std::unique_ptr<DeviceLink>(std::move(link));
}

} // namespace pipec::runtime
