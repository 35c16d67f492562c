//===- runtime/cpu/kernels/GradConv.cpp - pipec:ConvGradInput/ConvGradWeight
//
// The gradients of a 1-D, 2-D or 3-D Conv (group, strides, pads or auto_pad,
// dilations; the forward's attributes, and `shape`, the shape of the
// result):
//   ConvGradInput(dY, W) -> dX
//   ConvGradWeight(dY, X) -> dW
// f32 runs a oneDNN convolution_backward_data / convolution_backward_weights
// primitive created in the factory (as the forward Conv does, Conv.cpp), on
// the blocked layouts oneDNN picks, with reorders from and to the graph's
// plain NC[D]HW / [G]OI[D]HW layouts (measured faster, see
// DnnlConvGradPlan). f64 (the gradient checks) and a case oneDNN declines
// run direct loops:
//   dX: every (n, c) plane gathers, in a fixed order (output channel of c's
//     group, kernel tap, output position), the products dY * W of the taps
//     that read it;
//   dW: every (m, c) filter tap sums dY * X over images and output
//     positions, in order, in double.
// The loops parallelize over independent outputs only. oneDNN's
// backward-data primitive computes each element of dX in one thread; its
// backward-weights primitive splits the sum over images among its threads,
// so dW runs it single-threaded on fixed chunks of images, in parallel, and
// adds the chunks in order; each primitive sums at most 1024 terms in float
// (pieces of a chunk, added in double), so long sums keep their digits. Every path therefore gives bitwise the same
// result for any thread count (tests/unit/ConvGradKernelTest.cpp checks that
// and compares the paths). PIPEC_LINALG_NO_DNNL selects the loops for f32
// as well. 1-D and 2-D run the loops as 3-D with unit leading dimensions.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/kernels/DnnlCommon.h"
#include "runtime/cpu/kernels/LinalgHalfGemm.h"
#include "support/Parallel.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace pipec::cpu {

namespace {

/// A convolution's geometry: `dims` has one entry per spatial dimension
/// (1 to 3); `d`, `h`, `w` are the same padded in front to three.
struct ConvGradGeom {
  int64_t N = 0, C = 0, M = 0, G = 1;
  std::vector<LinalgWindowDim> dims;
  LinalgWindowDim d, h, w;
};

/// Reads the geometry from X's and W's shapes and the attributes, and checks
/// dY against it.
Status resolveConvGrad(const OpDesc &d, const Shape &xs, const Shape &ws, const Shape &ys,
                       ConvGradGeom &g) {
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size() || ys.size() != xs.size())
    return errorf(d.where(), ": X ", shapeStr(xs), ", W ", shapeStr(ws), " and dY ",
                  shapeStr(ys), " must all be 1-D, 2-D or 3-D convolution shapes");
  g.N = xs[0];
  g.C = xs[1];
  g.M = ws[0];
  g.G = attrInt(d.attrs, "group", 1);
  if (g.G < 1 || g.C % g.G != 0 || g.M % g.G != 0 || ws[1] * g.G != g.C)
    return errorf(d.where(), ": group ", g.G, " does not fit X channels ", g.C, " and W ",
                  shapeStr(ws));
  Shape in(xs.begin() + 2, xs.end());
  std::vector<int64_t> kw(ws.begin() + 2, ws.end());
  PIPEC_TRY(linalgResolveWindow(d, in, kw, false, nullptr, g.dims));
  Shape want = {g.N, g.M};
  for (const LinalgWindowDim &w : g.dims)
    want.push_back(w.out);
  if (ys != want)
    return errorf(d.where(), ": dY ", shapeStr(ys), " is not the convolution output ",
                  shapeStr(want));
  std::vector<LinalgWindowDim> three = g.dims;
  while (three.size() < 3)
    three.insert(three.begin(), LinalgWindowDim{1, 1, 1, 1, 1, 0, 0});
  g.d = three[0];
  g.h = three[1];
  g.w = three[2];
  return Status::ok();
}

template <typename T> class ConvGradInputKernel final : public Kernel {
public:
  explicit ConvGradInputKernel(ConvGradGeom g) : g_(std::move(g)) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *w = static_cast<const T *>(in[1]);
    T *dx = static_cast<T *>(out[0]);
    const LinalgWindowDim &D = g_.d, &H = g_.h, &W = g_.w;
    const int64_t cg = g_.C / g_.G, mg = g_.M / g_.G;
    const int64_t inSp = D.in * H.in * W.in, outSp = D.out * H.out * W.out;
    const int64_t ks = D.kernel * H.kernel * W.kernel;
    const int64_t planes = g_.N * g_.C;
    parallelFor(planes, planes * inSp * mg * ks > 32768, [&](int64_t p) {
      const int64_t n = p / g_.C, c = p % g_.C, grp = c / cg, cl = c % cg;
      std::vector<LinalgAcc<T>> acc(static_cast<size_t>(inSp), 0);
      for (int64_t m = grp * mg; m < (grp + 1) * mg; ++m) {
        const T *dym = dy + (n * g_.M + m) * outSp;
        const T *wm = w + (m * cg + cl) * ks;
        for (int64_t kd = 0; kd < D.kernel; ++kd)
          for (int64_t kh = 0; kh < H.kernel; ++kh)
            for (int64_t kw = 0; kw < W.kernel; ++kw) {
              const LinalgAcc<T> wv = wm[(kd * H.kernel + kh) * W.kernel + kw];
              for (int64_t od = 0; od < D.out; ++od) {
                const int64_t id = od * D.stride - D.padBegin + kd * D.dilation;
                if (id < 0 || id >= D.in)
                  continue;
                for (int64_t oh = 0; oh < H.out; ++oh) {
                  const int64_t ih = oh * H.stride - H.padBegin + kh * H.dilation;
                  if (ih < 0 || ih >= H.in)
                    continue;
                  const T *dyr = dym + (od * H.out + oh) * W.out;
                  LinalgAcc<T> *ar = acc.data() + (id * H.in + ih) * W.in;
                  for (int64_t ow = 0; ow < W.out; ++ow) {
                    const int64_t iw = ow * W.stride - W.padBegin + kw * W.dilation;
                    if (iw >= 0 && iw < W.in)
                      ar[iw] += dyr[ow] * wv;
                  }
                }
              }
            }
      }
      T *o = dx + p * inSp;
      for (int64_t i = 0; i < inSp; ++i)
        o[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    });
    return Status::ok();
  }

private:
  ConvGradGeom g_;
};

template <typename T> class ConvGradWeightKernel final : public Kernel {
public:
  explicit ConvGradWeightKernel(ConvGradGeom g) : g_(std::move(g)) {}
  Status run(ExecContext &, const void *const *in, void *const *out) override {
    const T *dy = static_cast<const T *>(in[0]);
    const T *x = static_cast<const T *>(in[1]);
    T *dw = static_cast<T *>(out[0]);
    const LinalgWindowDim &D = g_.d, &H = g_.h, &W = g_.w;
    const int64_t cg = g_.C / g_.G, mg = g_.M / g_.G;
    const int64_t inSp = D.in * H.in * W.in, outSp = D.out * H.out * W.out;
    const int64_t ks = D.kernel * H.kernel * W.kernel;
    const int64_t filters = g_.M * cg;
    parallelFor(filters, filters * ks * g_.N * outSp > 32768, [&](int64_t f) {
      const int64_t m = f / cg, cl = f % cg, c = (m / mg) * cg + cl;
      for (int64_t kd = 0; kd < D.kernel; ++kd)
        for (int64_t kh = 0; kh < H.kernel; ++kh)
          for (int64_t kw = 0; kw < W.kernel; ++kw) {
            LinalgAcc<T> s = 0;
            for (int64_t n = 0; n < g_.N; ++n) {
              const T *dym = dy + (n * g_.M + m) * outSp;
              const T *xc = x + (n * g_.C + c) * inSp;
              for (int64_t od = 0; od < D.out; ++od) {
                const int64_t id = od * D.stride - D.padBegin + kd * D.dilation;
                if (id < 0 || id >= D.in)
                  continue;
                for (int64_t oh = 0; oh < H.out; ++oh) {
                  const int64_t ih = oh * H.stride - H.padBegin + kh * H.dilation;
                  if (ih < 0 || ih >= H.in)
                    continue;
                  const T *dyr = dym + (od * H.out + oh) * W.out;
                  const T *xr = xc + (id * H.in + ih) * W.in;
                  for (int64_t ow = 0; ow < W.out; ++ow) {
                    const int64_t iw = ow * W.stride - W.padBegin + kw * W.dilation;
                    if (iw >= 0 && iw < W.in)
                      s += static_cast<LinalgAcc<T>>(dyr[ow]) * xr[iw];
                  }
                }
              }
            }
            dw[f * ks + (kd * H.kernel + kh) * W.kernel + kw] = static_cast<T>(s);
          }
    });
    return Status::ok();
  }

private:
  ConvGradGeom g_;
};

/// A backward convolution on blocked layouts (LinalgDnnlBlocked), arguments
/// (dY, W or X, dX or dW).
using DnnlConvGradPlan = LinalgDnnlBlocked;

/// Strides of dY and X when the plan reads views of larger tensors (a
/// channel slice of ConvGradWeight's chunks); empty for contiguous ones.
struct ConvGradViews {
  std::vector<int64_t> dy, x;
};

/// A row-major descriptor of shape `s` and type `t`, or of a view with
/// `strides`.
dnnl::memory::desc viewDesc(const std::vector<int64_t> &s, const std::vector<int64_t> &strides,
                            dnnl::memory::data_type t) {
  if (strides.empty())
    return linalgDnnlPlain(s, t);
  return dnnl::memory::desc(linalgDnnlDims(s), t, linalgDnnlDims(strides));
}

/// The plan of ConvGradWeight (`weight`) or ConvGradInput over `images`
/// images; an invalid plan when oneDNN declines the case. `operands`: the
/// type the primitive reads dY and X or W in (f32, or bf16/f16 under
/// output_dtype, taken only where linalgDnnlNativeHalf); the result is
/// f32. `otherF32`: X or W is given in f32 all the same (a weight under
/// output_dtype), rounded to `operands` by its reorder.
DnnlConvGradPlan makeDnnlConvGrad(const ConvGradGeom &g, bool weight, int64_t images,
                                  const ConvGradViews &views = {},
                                  dnnl::memory::data_type operands = dnnl::memory::data_type::f32,
                                  bool otherF32 = false) {
  DnnlConvGradPlan plan;
  if (g.dims.empty() || g.dims.size() > 3 || images < 1)
    return plan;
  try {
    using namespace dnnl;
    const LinalgDnnlConvShape cs = linalgDnnlConvShape(images, g.C, g.M, g.G, g.dims);
    const std::vector<int64_t> &xs = cs.src, &ys = cs.dst, &ws = cs.weights, &strides = cs.strides,
                               &dil = cs.dilations, &pl = cs.padBegin, &pr = cs.padEnd;
    const memory::data_type f32 = memory::data_type::f32;
    auto any = [](const std::vector<int64_t> &d, memory::data_type t) {
      return memory::desc(linalgDnnlDims(d), t, memory::format_tag::any);
    };
    // The result f32, the operands of `operands`.
    const memory::desc xany = any(xs, weight ? operands : f32), yany = any(ys, operands),
                       wany = any(ws, weight ? f32 : operands);
    const memory::dims st = linalgDnnlDims(strides), dl = linalgDnnlDims(dil),
                       pad0 = linalgDnnlDims(pl), pad1 = linalgDnnlDims(pr);
    // The backward primitives take the forward's descriptor as a hint.
    convolution_forward::desc fd(prop_kind::forward_training, algorithm::convolution_direct, any(xs, operands),
                                 any(ws, operands), yany, st, dl, pad0, pad1);
    convolution_forward::primitive_desc fpd(fd, linalgDnnlEngine());
    const memory::data_type other = otherF32 ? f32 : operands;
    const memory::desc plain[3] = {viewDesc(ys, views.dy, operands),
                                   weight ? viewDesc(xs, views.x, other) : linalgDnnlPlain(ws, other),
                                   linalgDnnlPlain(weight ? ws : xs)};
    memory::desc chosen[3];
    if (weight) {
      convolution_backward_weights::desc bd(algorithm::convolution_direct, xany, wany, yany, st,
                                            dl, pad0, pad1);
      convolution_backward_weights::primitive_desc pd(bd, linalgDnnlAttr(), linalgDnnlEngine(),
                                                      fpd);
      if (linalgDnnlIsReference(pd.impl_info_str()) || (operands != f32 && !linalgDnnlNativeHalf(pd.impl_info_str())))
        return DnnlConvGradPlan();
      plan.main.init<convolution_backward_weights>(pd);
      chosen[0] = pd.diff_dst_desc();
      chosen[1] = pd.src_desc();
      chosen[2] = pd.diff_weights_desc();
      plan.main.args = {{DNNL_ARG_DIFF_DST, chosen[0]},
                        {DNNL_ARG_SRC, chosen[1]},
                        {DNNL_ARG_DIFF_WEIGHTS, chosen[2]}};
    } else {
      convolution_backward_data::desc bd(algorithm::convolution_direct, xany, wany, yany, st, dl,
                                         pad0, pad1);
      convolution_backward_data::primitive_desc pd(bd, linalgDnnlAttr(), linalgDnnlEngine(), fpd);
      if (linalgDnnlIsReference(pd.impl_info_str()) || (operands != f32 && !linalgDnnlNativeHalf(pd.impl_info_str())))
        return DnnlConvGradPlan();
      plan.main.init<convolution_backward_data>(pd);
      chosen[0] = pd.diff_dst_desc();
      chosen[1] = pd.weights_desc();
      chosen[2] = pd.diff_src_desc();
      plan.main.args = {{DNNL_ARG_DIFF_DST, chosen[0]},
                        {DNNL_ARG_WEIGHTS, chosen[1]},
                        {DNNL_ARG_DIFF_SRC, chosen[2]}};
    }
    plan.addReorders({plain[0], plain[1], plain[2]}, {false, false, true});
  } catch (const dnnl::error &) {
    return DnnlConvGradPlan();
  }
  return plan;
}

/// ConvGradInput on oneDNN: every element of dX is computed by one thread,
/// so the result does not depend on the thread count.
class ConvGradInputDnnlKernel final : public Kernel {
public:
  explicit ConvGradInputDnnlKernel(DnnlConvGradPlan p) : p_(std::move(p)) {}
  size_t workspaceBytes() const override { return p_.bytes; }
  size_t heldBytes() const override { return p_.heldBytes(); }
  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const void *ptrs[3] = {in[0], in[1], out[0]};
    return p_.run(ptrs, linalgAlign(ctx.workspace), 0, ctx.step);
  }

private:
  DnnlConvGradPlan p_;
};

/// Sets the calling thread's OpenMP thread count for its lifetime, then
/// restores it.
class OmpThreadsScope {
public:
  explicit OmpThreadsScope(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreadsScope() { omp_set_num_threads(saved_); }
  OmpThreadsScope(const OmpThreadsScope &) = delete;
  OmpThreadsScope &operator=(const OmpThreadsScope &) = delete;

private:
  int saved_;
};

/// ConvGradWeight on oneDNN with a result independent of the thread count
/// and digits kept over long sums.
///
/// Thread count: left to itself, oneDNN splits the reduction over images by
/// its thread count, so 1 and 2 threads gave different bits. Instead the
/// work is cut, by the shape alone, into tasks of images x blocks of output
/// channels (whole groups when grouped); each task runs single-threaded
/// primitives (created with one thread and run inside our parallel loop,
/// where oneDNN runs sequentially) over views of dY and X. A channel
/// block's dW is disjoint from the others', so only the image chunks leave
/// partial sums, added in chunk order in double.
///
/// Digits: a primitive accumulates its whole sum over images and output
/// positions in float, one output row after another into the same
/// accumulators, so its rounding error grows with the length of the sum;
/// where the terms cancel (dY of zero mean per channel behind a training
/// BatchNorm, X of positive mean) that error is large next to dW. So a
/// task's images are cut further into pieces of at most kMaxTerms terms
/// (images x output positions): several images when they are small, else
/// one image cut into bands of output rows (the outermost spatial
/// dimension; a band reads the input rows its windows cover, with its own
/// pads). Where a task has several pieces, each piece's float dW is added
/// into the task's double accumulator, in piece order, and dW is rounded to
/// float once; where it has one (every chunk short: the zoo's 64 px
/// models), the piece writes its chunk's float partial itself, as before.
///
/// Which cut into tasks: image chunks cost a partial dW each, channel blocks
/// cost a reorder of X each. Early layers (large activations, small dW) cut
/// images; late ones (dW larger than the activations: ResNet's 3x3
/// convolutions on 4x4 and 2x2 maps) cut channels, with channel blocks
/// instead of 8 image chunks (bench/results/log.md has ResNet-18's layer4 dW
/// before and after).
class ConvGradWeightDnnlKernel final : public Kernel {
public:
  /// Tasks per call: enough for the threads of a device to share.
  static constexpr int64_t kChunks = 8;
  /// Output channels per block are a multiple of this (oneDNN's blocking).
  static constexpr int64_t kChannelBlock = 16;
  /// The most terms (images x output positions) one primitive sums in
  /// float (docs/cpu-linalg-kernels.md has the measurements behind it).
  static constexpr int64_t kMaxTerms = 1024;

  /// Null when oneDNN declines the case. `maxTerms` bounds the pieces.
  static std::unique_ptr<ConvGradWeightDnnlKernel> make(const ConvGradGeom &g,
                                                        int64_t maxTerms = kMaxTerms) {
    if (g.N < 1 || g.M < 1 || g.dims.empty())
      return nullptr;
    auto k = std::unique_ptr<ConvGradWeightDnnlKernel>(new ConvGradWeightDnnlKernel());
    int64_t inSp = 1, outSp = 1, ks = 1;
    for (const LinalgWindowDim &w : g.dims) {
      inSp *= w.in;
      outSp *= w.out;
      ks *= w.kernel;
    }
    const int64_t cg = g.C / g.G, mg = g.M / g.G;
    k->xImage_ = g.C * inSp;
    k->dyImage_ = g.M * outSp;
    k->wElems_ = g.M * cg * ks;
    k->inSp_ = inSp;
    k->outSp_ = outSp;
    k->filter_ = cg * ks;

    // The cut, from the shape only.
    const double wBytes = static_cast<double>(k->wElems_),
                 aBytes = static_cast<double>(g.N) * static_cast<double>(g.C * inSp + g.M * outSp);
    int64_t imageChunks = std::clamp<int64_t>(static_cast<int64_t>(aBytes / (2 * wBytes)), 1,
                                              std::min(g.N, kChunks));
    const int64_t per = (g.N + imageChunks - 1) / imageChunks;
    imageChunks = (g.N + per - 1) / per;
    // Channel blocks: whole groups, or multiples of kChannelBlock channels.
    const int64_t units = g.G > 1 ? g.G : std::max<int64_t>(1, g.M / kChannelBlock);
    int64_t blocks = std::clamp<int64_t>((kChunks + imageChunks - 1) / imageChunks, 1, units);
    const int64_t unitsPer = (units + blocks - 1) / blocks;
    blocks = (units + unitsPer - 1) / unitsPer;
    const int64_t unitOut = g.G > 1 ? mg : (blocks > 1 ? kChannelBlock : g.M);

    std::vector<int64_t> dyStrides = {g.M * outSp, outSp}, xStrides = {g.C * inSp, inSp};
    for (size_t i = 0; i < g.dims.size(); ++i) {
      int64_t so = 1, si = 1;
      for (size_t j = i + 1; j < g.dims.size(); ++j) {
        so *= g.dims[j].out;
        si *= g.dims[j].in;
      }
      dyStrides.push_back(so);
      xStrides.push_back(si);
    }
    // Pieces: several images, or bands of one image's outermost output
    // dimension (`rows` of its `rowOut` positions each).
    const LinalgWindowDim &outer = g.dims[0];
    const int64_t rowOut = outSp / outer.out, rowIn = inSp / outer.in;
    const int64_t imagesPer = std::max<int64_t>(1, maxTerms / outSp);
    const int64_t rows = outSp <= maxTerms ? outer.out : std::max<int64_t>(1, maxTerms / rowOut);
    // Plans by piece shape, created once and copied into each task.
    struct Proto {
      int64_t images, mCount, out0, out1;
      DnnlConvGradPlan plan;
    };
    std::vector<Proto> protos;
    size_t planBytes = 0;
    int64_t pieces = 0, minPieces = INT64_MAX;
    {
      OmpThreadsScope one(1);
      for (int64_t i = 0; i < imageChunks; ++i)
        for (int64_t b = 0; b < blocks; ++b) {
          Task t;
          t.part = i;
          const int64_t n0 = i * per, images = std::min(per, g.N - n0);
          const int64_t u0 = b * unitsPer, u1 = std::min(units, u0 + unitsPer);
          ConvGradGeom cg2 = g;
          if (g.G > 1) {
            t.m0 = u0 * mg;
            t.mCount = (u1 - u0) * mg;
            t.c0 = u0 * cg;
            cg2.G = u1 - u0;
            cg2.C = (u1 - u0) * cg;
          } else {
            t.m0 = u0 * unitOut;
            t.mCount = b + 1 == blocks ? g.M - t.m0 : (u1 - u0) * unitOut;
          }
          cg2.M = t.mCount;
          for (int64_t n = n0; n < n0 + images; n += imagesPer)
            for (int64_t o0 = 0; o0 < outer.out; o0 += rows) {
              Piece p;
              p.images = std::min(imagesPer, n0 + images - n);
              const int64_t o1 = std::min(outer.out, o0 + rows);
              // The input rows the band's windows cover, and its pads. All
              // rows keep the convolution's own geometry: X whole, so that
              // the channel blocks can share its reorder (sharedX_).
              const bool all = o0 == 0 && o1 == outer.out;
              const int64_t a = o0 * outer.stride - outer.padBegin,
                            e = (o1 - 1) * outer.stride - outer.padBegin + outer.extent();
              const int64_t in0 = all ? 0 : std::max<int64_t>(0, a),
                            in1 = all ? outer.in : std::min(outer.in, e);
              if (in1 <= in0)
                continue; // the band reads only padding: it adds nothing
              ConvGradGeom pg = cg2;
              pg.N = p.images;
              if (!all) {
                pg.dims[0].in = in1 - in0;
                pg.dims[0].out = o1 - o0;
                pg.dims[0].padBegin = in0 - a;
                pg.dims[0].padEnd = e - in1;
              }
              p.dy = n * k->dyImage_ + t.m0 * outSp + o0 * rowOut;
              p.x = n * k->xImage_ + t.c0 * inSp + in0 * rowIn;
              auto same = [&](const Proto &q) {
                return q.images == p.images && q.mCount == t.mCount && q.out0 == o0 &&
                       q.out1 == o1;
              };
              auto it = std::find_if(protos.begin(), protos.end(), same);
              if (it == protos.end()) {
                protos.push_back({p.images, t.mCount, o0, o1,
                                  makeDnnlConvGrad(pg, true, p.images, {dyStrides, xStrides})});
                if (!protos.back().plan.valid())
                  return nullptr;
                planBytes = std::max(planBytes, protos.back().plan.bytes);
                it = protos.end() - 1;
              }
              // A prepared primitive binds its buffers in place
              // (LinalgDnnlPrim) and tasks run at once: a copy per task.
              const size_t proto = static_cast<size_t>(it - protos.begin());
              auto have = std::find(t.protoOf.begin(), t.protoOf.end(), proto);
              if (have == t.protoOf.end()) {
                t.protoOf.push_back(proto);
                t.plans.push_back(it->plan);
                have = t.protoOf.end() - 1;
              }
              p.plan = static_cast<size_t>(have - t.protoOf.begin());
              t.pieces.push_back(p);
            }
          pieces = std::max<int64_t>(pieces, static_cast<int64_t>(t.pieces.size()));
          minPieces = std::min<int64_t>(minPieces, static_cast<int64_t>(t.pieces.size()));
          k->blockElems_ = std::max(k->blockElems_, t.mCount * k->filter_);
          k->tasks_.push_back(std::move(t));
        }
    }
    k->parts_ = imageChunks;
    // Direct: every task is one primitive writing its block of dW.
    k->accumulate_ = imageChunks > 1 || pieces != 1;
    // One piece per task and several image chunks: each piece writes its
    // chunk's float partial dW itself (no double accumulator to fill).
    k->floatParts_ = imageChunks > 1 && pieces == 1 && minPieces == 1;
    // With every image in each task's one piece, the channel blocks read all
    // of X (or of their groups'): reorder it once for all of them when they
    // want one layout, rather than once per block.
    if (!k->accumulate_ && blocks > 1 && g.G == 1 && k->tasks_[0].plans[0].reorders[1].valid()) {
      const dnnl::memory::desc &want = k->tasks_[0].plans[0].main.args[1].second;
      bool same = true;
      for (const Task &t : k->tasks_)
        same = same && t.plans[0].reorders[1].valid() && t.plans[0].main.args[1].second == want;
      if (same) {
        try {
          dnnl::engine &eng = linalgDnnlEngine();
          const LinalgDnnlConvShape cs = linalgDnnlConvShape(g.N, g.C, g.M, 1, g.dims);
          const dnnl::memory::desc plain = linalgDnnlPlain(cs.src);
          dnnl::reorder::primitive_desc rpd(eng, plain, eng, want, linalgDnnlAttr());
          k->sharedX_.init<dnnl::reorder>(rpd);
          k->sharedX_.args = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, want}};
          k->sharedXBytes_ = linalgRoundUp(want.get_size());
          k->sharedXScratch_ = linalgRoundUp(k->sharedX_.scratchBytes);
        } catch (const dnnl::error &) {
          k->sharedX_ = LinalgDnnlPrim();
        }
      }
    }
    k->accBytes_ = k->accumulate_ ? linalgRoundUp(static_cast<size_t>(k->wElems_) *
                                                  (k->floatParts_ ? sizeof(float) : sizeof(double)))
                                  : 0;
    k->bufBytes_ = k->accumulate_ && !k->floatParts_
                       ? linalgRoundUp(static_cast<size_t>(k->blockElems_) * sizeof(float))
                       : 0;
    k->taskBytes_ = linalgRoundUp(planBytes) + k->bufBytes_;
    return k;
  }

  size_t workspaceBytes() const override {
    return static_cast<size_t>(parts_) * accBytes_ + tasks_.size() * taskBytes_ +
           (sharedX_.valid() ? sharedXBytes_ + sharedXScratch_ : 0);
  }

  Status run(ExecContext &ctx, const void *const *in, void *const *out) override {
    const float *dy = static_cast<const float *>(in[0]);
    const float *x = static_cast<const float *>(in[1]);
    float *dw = static_cast<float *>(out[0]);
    unsigned char *base = linalgAlign(ctx.workspace);
    unsigned char *accs = base, *taskWs = base + parts_ * accBytes_;
    const int64_t n = static_cast<int64_t>(tasks_.size());
    unsigned char *xChosen = taskWs + n * taskBytes_;
    if (sharedX_.valid()) {
      const void *r[2] = {x, xChosen};
      PIPEC_TRY(sharedX_.run(r, xChosen + sharedXBytes_));
    }
    const size_t planBytes = taskBytes_ - bufBytes_;
    std::vector<Status> st(tasks_.size(), Status::ok());
    // No `if` clause: a piece must always run inside a parallel region (or on
    // a one-thread team), where oneDNN does not split it further.
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; ++k) {
      const Task &t = tasks_[static_cast<size_t>(k)];
      unsigned char *ws = taskWs + k * taskBytes_;
      // Where the pieces write: dW itself, the chunk's float partial, or a
      // buffer added into the chunk's double accumulator.
      float *buf = !accumulate_ ? dw + t.m0 * filter_
                   : floatParts_
                       ? reinterpret_cast<float *>(accs + t.part * accBytes_) + t.m0 * filter_
                       : reinterpret_cast<float *>(ws + planBytes);
      double *acc = accumulate_ && !floatParts_
                        ? reinterpret_cast<double *>(accs + t.part * accBytes_) + t.m0 * filter_
                        : nullptr;
      const int64_t len = t.mCount * filter_;
      bool first = true;
      for (const Piece &p : t.pieces) {
        const void *ptrs[3] = {dy + p.dy,
                               sharedX_.valid() ? static_cast<const void *>(xChosen) : x + p.x,
                               buf};
        Status s = t.plans[p.plan].run(ptrs, ws, sharedX_.valid() ? 0b010 : 0);
        if (!s) {
          st[static_cast<size_t>(k)] = s;
          break;
        }
        if (acc) {
          if (first)
            for (int64_t i = 0; i < len; ++i)
              acc[i] = buf[i];
          else
            for (int64_t i = 0; i < len; ++i)
              acc[i] += buf[i];
        }
        first = false;
      }
      if (acc && first)
        std::fill(acc, acc + len, 0.0);
    }
    for (const Status &s : st)
      PIPEC_TRY(s);
    if (floatParts_)
      parallelFor(wElems_, wElems_ * parts_ > 65536, [&](int64_t i) {
        double s = reinterpret_cast<const float *>(accs)[i];
        for (int64_t k = 1; k < parts_; ++k)
          s += reinterpret_cast<const float *>(accs + k * accBytes_)[i];
        dw[i] = static_cast<float>(s);
      });
    else if (accumulate_)
      parallelFor(wElems_, wElems_ * parts_ > 65536, [&](int64_t i) {
        double s = reinterpret_cast<const double *>(accs)[i];
        for (int64_t k = 1; k < parts_; ++k)
          s += reinterpret_cast<const double *>(accs + k * accBytes_)[i];
        dw[i] = static_cast<float>(s);
      });
    return Status::ok();
  }

private:
  /// One primitive's share of a task: `images` images from dY's and X's
  /// element offsets `dy` and `x` (a band of rows when cut), run by the
  /// task's plan `plan`.
  struct Piece {
    int64_t images = 0, dy = 0, x = 0;
    size_t plan = 0;
  };
  /// A chunk of images (`part`) x output channels [m0, m0 + mCount) (input
  /// channels from c0 when grouped), its pieces in summation order.
  struct Task {
    int64_t part = 0, m0 = 0, mCount = 0, c0 = 0;
    std::vector<Piece> pieces;
    std::vector<DnnlConvGradPlan> plans; ///< this task's own copies
    std::vector<size_t> protoOf;         ///< which shape each plan has
  };

  ConvGradWeightDnnlKernel() = default;
  std::vector<Task> tasks_;
  /// X into the tasks' layout, once for all of them (or invalid).
  LinalgDnnlPrim sharedX_;
  size_t sharedXBytes_ = 0, sharedXScratch_ = 0;
  int64_t parts_ = 1, xImage_ = 0, dyImage_ = 0, wElems_ = 0, inSp_ = 1, outSp_ = 1, filter_ = 1;
  int64_t blockElems_ = 0;
  bool accumulate_ = false, floatParts_ = false;
  size_t accBytes_ = 0, bufBytes_ = 0, taskBytes_ = 0;
};

/// Shared factory: `weight` selects ConvGradWeight (dY, X) over
/// ConvGradInput (dY, W).
Expected<KernelPtr> makeConvGrad(const OpDesc &d, bool weight) {
  if (d.inputs.size() != 2 || !d.hasInput(0) || !d.hasInput(1) || d.outputs.size() != 1)
    return errorf(d.where(), ": expects 2 inputs and 1 output, got ", d.inputs.size(), " and ",
                  d.outputs.size());
  const TensorDesc &dy = d.inputs[0], &other = d.inputs[1];
  if (other.dtype != dy.dtype)
    return errorf(d.where(), ": ", other.str(), " and dY ", dy.str(), " differ in type");
  if (!attrHas(d.attrs, "shape"))
    return errorf(d.where(), ": attribute 'shape' is missing");
  Shape result = attrInts(d.attrs, "shape");
  if (d.outputs[0].shape != result || d.outputs[0].dtype != dy.dtype)
    return errorf(d.where(), ": output ", d.outputs[0].str(), " is not ", dtypeName(dy.dtype),
                  shapeStr(result));
  ConvGradGeom g;
  PIPEC_TRY(weight ? resolveConvGrad(d, other.shape, result, dy.shape, g)
                   : resolveConvGrad(d, result, other.shape, dy.shape, g));
  return linalgDispatchFloat(d, dy.dtype, [&](auto tag) -> Expected<KernelPtr> {
    using T = decltype(tag);
    if constexpr (linalgDnnlSupports<T>()) {
      if (oneDnnEnabled() && weight) {
        // Pieces of kMaxTerms terms; where oneDNN declines a piece's shape,
        // whole image chunks as before.
        if (auto k = ConvGradWeightDnnlKernel::make(g))
          return KernelPtr(std::move(k));
        if (auto k = ConvGradWeightDnnlKernel::make(g, INT64_MAX))
          return KernelPtr(std::move(k));
      } else if (oneDnnEnabled()) {
        DnnlConvGradPlan p = makeDnnlConvGrad(g, false, g.N);
        if (d.isStepInvariant(1))
          p.keepReordered(1); // W, reordered once a step
        if (p.valid())
          return KernelPtr(new ConvGradInputDnnlKernel(std::move(p)));
      }
    }
    if (weight)
      return KernelPtr(new ConvGradWeightKernel<T>(std::move(g)));
    return KernelPtr(new ConvGradInputKernel<T>(std::move(g)));
  });
}

} // namespace

Expected<KernelPtr> makeConvGradInputKernel(const OpDesc &d);

namespace {
/// ConvGradInput under output_dtype: oneDNN's 16-bit backward-data
/// convolution where it runs on the CPU's 16-bit instructions (one thread
/// per element of dX, as the f32 one), else the emulation
/// (HalfProduct.cpp). ConvGradWeight takes the emulation everywhere: cut
/// into the f32 kernel's pieces (ConvGradWeightDnnlKernel), oneDNN's AMX
/// backward-weights primitives took the CNN sample's weight gradients over
/// 3 ms a step, against 1.2 ms emulated (docs/precision.md).
Expected<KernelPtr> makeHalfConvGradInput(const OpDesc &d) {
  PIPEC_ASSIGN(OpDesc w, linalgWidenedProduct(d));
  // Malformed nodes get the f32 factory's message through the emulation.
  if (oneDnnEnabled() && w.inputs.size() == 2 && attrHas(w.attrs, "shape") &&
      w.outputs[0].shape == attrInts(w.attrs, "shape")) {
    const Shape result = attrInts(w.attrs, "shape");
    ConvGradGeom g;
    PIPEC_TRY(resolveConvGrad(w, result, w.inputs[1].shape, w.inputs[0].shape, g));
    // dY 16-bit; W 16-bit, or an f32 weight the reorder rounds (once a
    // step where it is step-invariant: keepReordered).
    if (d.inputs[0].dtype == DType::F32)
      return makeLinalgWidenedProductKernel(d, makeConvGradInputKernel);
    DnnlConvGradPlan p = makeDnnlConvGrad(g, false, g.N, {}, linalgDnnlHalfType(d.inputs[0].dtype),
                                          d.inputs[1].dtype == DType::F32);
    if (d.isStepInvariant(1))
      p.keepReordered(1);
    if (p.valid())
      return KernelPtr(new ConvGradInputDnnlKernel(std::move(p)));
  }
  return makeLinalgWidenedProductKernel(d, makeConvGradInputKernel);
}
} // namespace

Expected<KernelPtr> makeConvGradInputKernel(const OpDesc &d) {
  if (linalgIsHalfProduct(d))
    return makeHalfConvGradInput(d);
  return makeConvGrad(d, false);
}
Expected<KernelPtr> makeConvGradWeightKernel(const OpDesc &d) {
  if (linalgIsHalfProduct(d)) // the emulation (HalfProduct.cpp)
    return makeLinalgWidenedProductKernel(d, makeConvGradWeightKernel);
  return makeConvGrad(d, true);
}

} // namespace pipec::cpu