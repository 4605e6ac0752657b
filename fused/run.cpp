// run_fused: per CP rank (one host thread each) upload → all-gather keys → indexer + top-k →
// key selection → Q~ projection → attention forward → O projection → indexer loss → attention
// backward → reduce-scatter key gradients, all-reduce weight gradients and the loss → copy back.
#include "fused/run.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "fused/api.cuh"
#include "fused/attention.hpp"
#include "fused/comm/comm.hpp"
#include "fused/cuda_check.hpp"
#include "fused/device.hpp"
#include "fused/projections.hpp"
#include "fused/rank_context.hpp"
#include "fused/rows.hpp"
#include "core/errors.hpp"
#include "core/layout.hpp"
#include "core/trace.hpp"
#include "core/bf16.hpp"

namespace dsa::fused {

CommKind parse_comm(const std::string& s, const std::string& field) {
  if (s == "auto") return CommKind::auto_;
  if (s == "nccl") return CommKind::nccl;
  if (s == "local") return CommKind::local;
  throw InvalidInput(field, "must be one of auto, nccl, local; got '" + s + "'");
}

const char* name(CommKind k) {
  switch (k) {
    case CommKind::auto_: return "auto";
    case CommKind::nccl: return "nccl";
    case CommKind::local: return "local";
  }
  return "?";
}

CommKind resolve_comm(CommKind k, int64_t cp) {
  if (k != CommKind::auto_) return k;
  return nccl_available() && device_count() >= cp ? CommKind::nccl : CommKind::local;
}

namespace {

// A device buffer of the rank, from the device's stream-ordered pool (fused/rank_context.hpp): a
// case's buffers are freed onto the stream and the next case's come from the same cached memory.
template <class T>
class DBuf {
 public:
  DBuf(size_t n, cudaStream_t s) : n_(n), s_(s) {
    if (n) DSA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), n * sizeof(T), s));
  }
  ~DBuf() {
    if (p_) cudaFreeAsync(p_, s_);
  }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  // Poison: 0xFF bytes are NaN in bf16 and fp32, so an output never written is caught.
  void poison(cudaStream_t s, int byte = 0xFF) {
    if (n_) DSA_CUDA_CHECK(cudaMemsetAsync(p_, byte, n_ * sizeof(T), s));
  }
  void zero(cudaStream_t s) { poison(s, 0); }
  template <class A>
  void upload(const std::vector<T, A>& h, cudaStream_t s) {
    if (h.size() != n_) throw std::logic_error("run_fused: upload size mismatch");
    if (n_) DSA_CUDA_CHECK(cudaMemcpyAsync(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  TensorData<T> download(cudaStream_t s) const {
    TensorData<T> h(n_);
    if (n_) DSA_CUDA_CHECK(cudaMemcpyAsync(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost, s));
    DSA_CUDA_CHECK(cudaStreamSynchronize(s));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
  cudaStream_t s_;
};

// Host conversions of this size and up run on every core (at production shapes a case converts
// hundreds of millions of values each way); smaller ones are not worth a thread team.
constexpr int64_t kParallelElements = int64_t(1) << 18;

// Rows `rows` of a [Tp, ...] tensor as bf16 bits, in the given order, in tensor memory
// (core/tensor_memory.hpp): hundreds of MB at production shapes, whose fresh pages each case would
// otherwise fault in again.
TensorData<uint16_t> rows_bf16(const TensorD& t, const std::vector<int64_t>& rows) {
  const int64_t w = t.row_size(), n = static_cast<int64_t>(rows.size());
  TensorData<uint16_t> out(n * w);
#pragma omp parallel for schedule(static) if (n * w > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const double* src = t.row(rows[i]);
    for (int64_t e = 0; e < w; ++e) out[i * w + e] = bf16_bits(static_cast<float>(src[e]));
  }
  return out;
}
TensorData<uint16_t> all_bf16(const TensorD& t) {
  TensorData<uint16_t> out(t.size());
#pragma omp parallel for schedule(static) if (t.size() > kParallelElements)
  for (int64_t i = 0; i < t.size(); ++i) out[i] = bf16_bits(static_cast<float>(t.data[i]));
  return out;
}

// DSA_FUSED_CHECK_INPUTS=1: after the run, every input buffer is read back and must hold what went
// up (a kernel writing out of bounds into another buffer shows up here, by name).
bool check_inputs() {
  static const bool on = std::getenv("DSA_FUSED_CHECK_INPUTS") != nullptr;
  return on;
}

// The weights as bf16 on one device, converted and uploaded once per run and device: the ranks on
// that device read the same copy. At production widths they are 16 M values (32 MB), which each of
// cp rank threads on one GPU (--comm local) used to convert and upload again: most of the backend's
// time in a small case there.
class DeviceWeights {
 public:
  DeviceWeights(const Inputs& in, int device)
      : device_(current(device)), ctx_(device), W_UK_(in.W_UK.size(), ctx_->stream()),
        W_UV_(in.W_UV.size(), ctx_->stream()) {
    W_UK_.upload(all_bf16(in.W_UK), ctx_->stream());
    W_UV_.upload(all_bf16(in.W_UV), ctx_->stream());
    DSA_CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));  // the ranks' streams read them next
  }
  ~DeviceWeights() { cudaSetDevice(device_); }  // the buffers are freed next, on this device
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;
  int device() const { return device_; }
  const bf16* W_UK() const { return reinterpret_cast<const bf16*>(W_UK_.get()); }
  const bf16* W_UV() const { return reinterpret_cast<const bf16*>(W_UV_.get()); }
  // DSA_FUSED_CHECK_INPUTS: the weights must still hold what went up once every rank is done.
  void check_unchanged(const Inputs& in) const {
    if (W_UK_.download(ctx_->stream()) != all_bf16(in.W_UK) || W_UV_.download(ctx_->stream()) != all_bf16(in.W_UV))
      throw std::runtime_error("DSA_FUSED_CHECK_INPUTS: input buffer W_UK or W_UV changed during the run (a kernel "
                               "wrote out of bounds)");
  }

 private:
  static int current(int device) {  // the lease and the buffers below are made on `device`
    DSA_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }
  int device_;
  RankContextLease ctx_;  // declared before the buffers: they are freed on its stream first
  DBuf<uint16_t> W_UK_, W_UV_;
};

// The calling thread's current device, restored when this goes out of scope (DeviceWeights makes
// its own device current).
class CallersDevice {
 public:
  CallersDevice() { DSA_CUDA_CHECK(cudaGetDevice(&device_)); }
  ~CallersDevice() { cudaSetDevice(device_); }
  CallersDevice(const CallersDevice&) = delete;
  CallersDevice& operator=(const CallersDevice&) = delete;

 private:
  int device_ = 0;
};

// A rank's inputs: row rows[i] of every row tensor of `in` is the rank's local row i; the weights
// whole. run_fused passes the global inputs and the rank's global rows (no copy of a shard);
// run_fused_rank its shard and 0 … Tq−1. After the all-reduce every rank holds the same weight
// gradients; only a rank with `weight_grads` copies them back (run_fused assembles rank 0's).
struct RankInputs {
  const Inputs& in;
  std::vector<int64_t> rows;
  const DeviceWeights& weights;  // on the rank's device
  bool weight_grads = true;
};

// One rank's outputs, local rows in local order, as they came off the device.
struct RankOut {
  TensorData<int32_t> topk;
  TensorData<float> scores, lse, kl, dq_I, dw, dc, dk_pe, dk_I, dW_UK, dW_UV;
  TensorData<uint16_t> O, O_lat, dq_nope, dq_pe;
  float loss = 0;
};

struct Shared {
  const Problem& p;
  const FusedOptions& opt;
  const StreamLayout& L;
  int64_t Kp;        // indexer width K' = min(K, Tp)
  int64_t Ka;        // attention index width
  bool scores;
};

constexpr int64_t kGuardRows = 64;  // NaN rows before and after every key buffer

#if DSA_MUTANT_zigzag_chunk_swap
// The planted bug: a zigzag rank lays out its two chunks of each segment in swapped order when it
// contributes its key rows to the all-gather (the restore still assumes the right order).
std::vector<int64_t> key_upload_rows(const StreamLayout& L, int64_t r) {
  if (L.kind != Layout::zigzag) return L.rank_rows[r];
  std::vector<int64_t> rows;
  for (int64_t s = 0; s < L.segments(); ++s) {
    const int64_t h = (L.cu[s + 1] - L.cu[s]) / (2 * L.cp);
    for (int64_t chunk : {2 * L.cp - 1 - r, r})
      for (int64_t i = 0; i < h; ++i) rows.push_back(L.cu[s] + chunk * h + i);
  }
  return rows;
}
#else
std::vector<int64_t> key_upload_rows(const StreamLayout& L, int64_t r) { return L.rank_rows[r]; }
#endif

// Rank comm.rank() of the run (its local row i is global row L.rank_rows[r][i]).
void run_rank(const Shared& S, const RankInputs& ri, DeviceComm& comm, RankOut& out) {
  const Problem& p = S.p;
  const StreamLayout& L = S.L;
  const Dims& d = p.dims;
  const int r = comm.rank();
  DSA_CUDA_CHECK(cudaSetDevice(comm.device()));
  const RankContextLease ctx(comm.device());
  const cudaStream_t st = ctx->stream();
  const cublasHandle_t blas = ctx->blas();

  const auto& rows = L.rank_rows[r];
  const int64_t Tq = static_cast<int64_t>(rows.size()), Tp = L.tp;
  const int64_t H = d.H, Dn = d.Dn, R = d.R, C = d.C, Dv = d.Dv, HI = d.HI, DI = d.DI, D = C + R;
  const int64_t Kp = S.Kp, Ka = S.Ka;

  // ---- inputs of this rank ----
  std::optional<TraceSpan> span(std::in_place, "fused: inputs to bf16, up");
  std::vector<std::tuple<const char*, const DBuf<uint16_t>*, TensorData<uint16_t>>> sent;
  auto up = [&](const char* name, DBuf<uint16_t>& b, const TensorData<uint16_t>& h) {
    b.upload(h, st);
    if (check_inputs()) sent.emplace_back(name, &b, h);
  };
  DBuf<uint16_t> q_nope(Tq * H * Dn, st), q_pe(Tq * H * R, st), q_I(Tq * HI * DI, st), w(Tq * HI, st), dO(Tq * H * Dv, st);
  const Inputs& in = ri.in;
  up("q_nope", q_nope, rows_bf16(in.q_nope, ri.rows));
  up("q_pe", q_pe, rows_bf16(in.q_pe, ri.rows));
  up("q_I", q_I, rows_bf16(in.q_I, ri.rows));
  up("w", w, rows_bf16(in.w, ri.rows));
  up("dO", dO, rows_bf16(in.dO, ri.rows));
  if (ri.weights.device() != comm.device()) throw std::logic_error("run_fused: the weights are on another device");
  const bf16* const W_UK = ri.weights.W_UK();
  const bf16* const W_UV = ri.weights.W_UV();
  // The key rows it contributes (the rank's own rows, in some order), as rows of `in`.
  std::vector<int64_t> local_pos(Tp, -1), krows;
  for (int64_t i = 0; i < Tq; ++i) local_pos[rows[i]] = i;
  for (int64_t g : key_upload_rows(L, r)) krows.push_back(ri.rows[local_pos[g]]);
  DBuf<uint16_t> c_own(Tq * C, st), kpe_own(Tq * R, st), kI_own(Tq * DI, st);
  up("c_own", c_own, rows_bf16(in.c, krows));
  up("kpe_own", kpe_own, rows_bf16(in.k_pe, krows));
  up("kI_own", kI_own, rows_bf16(in.k_I, krows));

  std::vector<int32_t> h_row(Tq), h_kb(Tq), h_ke(Tq);
  std::vector<uint8_t> h_counted(Tq);
  for (int64_t i = 0; i < Tq; ++i) {
    const int64_t g = rows[i];
    h_row[i] = (int32_t)g;
    h_kb[i] = (int32_t)L.key_begin(g);
    h_ke[i] = (int32_t)L.key_end(g);
    h_counted[i] = L.active(g) ? 1 : 0;
  }
  DBuf<int32_t> row_g(Tq, st), kbeg(Tq, st), kend(Tq, st);
  DBuf<uint8_t> counted(Tq, st);
  row_g.upload(h_row, st);
  kbeg.upload(h_kb, st);
  kend.upload(h_ke, st);
  counted.upload(h_counted, st);
  const RowRanges ranges{row_g.get(), kbeg.get(), kend.get()};

  // Gathered order → global order: global row g sits at gathered position inv[g].
  const auto order = L.gathered_order();
  std::vector<int32_t> h_inv(Tp), h_order(Tp);
  for (int64_t i = 0; i < Tp; ++i) {
    h_inv[order[i]] = (int32_t)i;
    h_order[i] = (int32_t)order[i];
  }
  DBuf<int32_t> inv(Tp, st), ord(Tp, st);
  inv.upload(h_inv, st);
  ord.upload(h_order, st);

  // ---- all-gather the keys, restore global order; NaN guard rows around every key buffer ----
  auto gather_keys = [&](const DBuf<uint16_t>& own, int64_t width, DBuf<uint16_t>& glob) {
    DBuf<uint16_t> gathered(Tp * width, st);
    comm.allgather(own.get(), gathered.get(), Tq * width * 2, st);
    glob.poison(st);
    gather_rows(glob.get() + kGuardRows * width, gathered.get(), inv.get(), Tp, width * 2, st);
    DSA_CUDA_CHECK(cudaStreamSynchronize(st));
  };
  DBuf<uint16_t> c_g((Tp + 2 * kGuardRows) * C, st), kpe_g((Tp + 2 * kGuardRows) * R, st),
      kI_g((Tp + 2 * kGuardRows) * DI, st);
  gather_keys(c_own, C, c_g);
  gather_keys(kpe_own, R, kpe_g);
  gather_keys(kI_own, DI, kI_g);
  const bf16* c_p = reinterpret_cast<const bf16*>(c_g.get() + kGuardRows * C);
  const bf16* kpe_p = reinterpret_cast<const bf16*>(kpe_g.get() + kGuardRows * R);
  const bf16* kI_p = reinterpret_cast<const bf16*>(kI_g.get() + kGuardRows * DI);
  auto B = [](const DBuf<uint16_t>& b) { return reinterpret_cast<bf16*>(b.get()); };

  // ---- outputs, poisoned ----
  // Each phase its own span; under DSA_TRACE the stream is drained at each phase's end, so a span
  // holds its own kernels' time and a kernel that never ends leaves its phase open (open_spans).
  auto phase = [&](const char* name) {
    if (tracing()) DSA_CUDA_CHECK(cudaStreamSynchronize(st));
    span.emplace(name);
  };
  phase("fused: outputs");
  DBuf<int32_t> topk(Tq * Kp, st);
  DBuf<float> scores(S.scores ? Tq * Tp : 0, st);
  DBuf<uint16_t> Qt(Tq * H * D, st), O_lat(Tq * H * C, st), O(Tq * H * Dv, st), dO_lat(Tq * H * C, st), dQt(Tq * H * D, st),
      dq_nope(Tq * H * Dn, st), dq_pe(Tq * H * R, st);
  DBuf<float> lse(Tq * H, st), delta(Tq * H, st), kl(Tq, st), dq_I(Tq * HI * DI, st), dk_I(Tp * DI, st), dw(Tq * HI, st), dK(Tp * D, st),
      dW_UK(H * Dn * C, st), dW_UV(H * Dv * C, st), loss(1, st);
  topk.poison(st, 0x7F);  // 0x7F7F7F7F: an out-of-range index, never a legal −1
  for (auto* b : {&scores, &lse, &kl, &dq_I, &dk_I, &dw, &dW_UK, &dW_UV, &loss}) b->poison(st);
  for (auto* b : {&O_lat, &O, &dQt, &dq_nope, &dq_pe}) b->poison(st);

  // The sparse loss reads T^ from the attention backward and, when the attention runs on the
  // indexer's own top-k, the indexer's score of each selected key (carried into S(g)'s order).
  const bool sparse_loss = p.loss == LossMode::sparse && Ka > 0 && H <= 128;  // past 128 the loss refuses H
  const bool loss_scores = sparse_loss && !S.opt.attention_indices;
  DBuf<float> topk_scores(loss_scores ? Tq * Kp : 0, st), sel_scores(loss_scores ? Tq * Ka : 0, st);

  // ---- indexer + top-k (k1's kernels) ----
  phase("fused: indexer top-k");
  IndexerArgs ia{B(q_I), B(w), kI_p, ranges, (int)Tq, (int)Tp, (int)HI, (int)DI, (int)Kp, p.relu, topk.get(),
                 S.scores ? scores.get() : nullptr, loss_scores ? topk_scores.get() : nullptr};
  indexer_topk(ia, st);

  // ---- the attention's indices and S(g) ----
  phase("fused: select keys");
  DBuf<int32_t> injected(S.opt.attention_indices ? Tq * Ka : 0, st);
  const int32_t* att_idx = topk.get();
  if (S.opt.attention_indices) {
    const TensorI& ai = *S.opt.attention_indices;
    std::vector<int32_t> h(Tq * Ka);
    for (int64_t i = 0; i < Tq; ++i) std::memcpy(&h[i * Ka], ai.row(rows[i]), Ka * sizeof(int32_t));
    injected.upload(h, st);
    att_idx = injected.get();
  }
  DBuf<int32_t> sel(Tq * Ka, st), count(Tq, st);
  select_keys(SelectArgs{att_idx, ranges, (int)Tq, (int)Tp, (int)Ka, sel.get(), count.get(),
                         loss_scores ? topk_scores.get() : nullptr, loss_scores ? sel_scores.get() : nullptr},
              st);

  // ---- forward ----
  phase("fused: attention forward");
  const ProjDims pd{(int)Tq, (int)H, (int)Dn, (int)R, (int)C, (int)Dv};
  const float scale = static_cast<float>(p.softmax_scale);
  absorb_query(blas, pd, B(q_nope), B(q_pe), W_UK, B(Qt), st);
  attention_forward(AttnFwdArgs{B(Qt), c_p, kpe_p, sel.get(), count.get(), (int)Tq, (int)Tp, (int)H, (int)C, (int)R,
                                (int)Ka, scale, B(O_lat), lse.get()},
                    st);
  output_projection(blas, pd, B(O_lat), W_UV, B(O), st);

  // ---- backward (with the sparse loss's target T^ = Σ_h P per slot, which the loss then reads) ----
  phase("fused: attention backward");
  DBuf<float> target(sparse_loss ? Tq * Ka : 0, st);
  if (sparse_loss) target.zero(st);
  grad_o_lat(blas, pd, B(dO), W_UV, B(dO_lat), st);
  attention_delta(B(dO_lat), B(O_lat), delta.get(), Tq * H, (int)C, st);
  dK.zero(st);
  attention_backward(AttnBwdArgs{B(Qt), c_p, kpe_p, sel.get(), count.get(), B(dO_lat), lse.get(), delta.get(),
                                 (int)Tq, (int)Tp, (int)H, (int)C, (int)R, (int)Ka, scale, B(dQt), dK.get(),
                                 sparse_loss ? target.get() : nullptr},
                     st);

  // ---- indexer loss (k1's kernels), N = global counted rows ----
  phase("fused: indexer loss");
  const double N = std::max<int64_t>(1, L.counted_rows());
  if (p.loss != LossMode::off) {
    LossArgs la{B(Qt), c_p, kpe_p, lse.get(), sel.get(), B(q_I), B(w), kI_p, ranges, (int)Tq, (int)Tp, (int)H,
                (int)C, (int)R, (int)HI, (int)DI, (int)Ka, scale, p.relu, p.loss == LossMode::dense,
                static_cast<float>(p.coeff / N), counted.get(), kl.get(), dq_I.get(), dk_I.get(), dw.get(),
                sparse_loss ? target.get() : nullptr, loss_scores ? sel_scores.get() : nullptr};
    indexer_loss(la, st);
  } else {
    for (auto* b : {&kl, &dq_I, &dk_I, &dw}) b->zero(st);
  }

  phase("fused: query and weight grads");
  grad_query(blas, pd, B(dQt), W_UK, B(dq_nope), B(dq_pe), st);
  grad_W_UK(blas, pd, B(q_nope), B(dQt), dW_UK.get(), st);
  grad_W_UV(blas, pd, B(dO), B(O_lat), dW_UV.get(), st);

  // ---- CP: key gradients reduce-scattered to their owners (gathered order), weights all-reduced ----
  auto scatter_keys = [&](const DBuf<float>& full, int64_t width) {
    DBuf<float> mine(Tq * width, st);
#if DSA_MUTANT_no_key_grad_reduce_scatter
    gather_rows(mine.get(), full.get(), row_g.get(), Tq, width * 4, st);  // keeps only its own partial
#else
    DBuf<float> perm(Tp * width, st);
    gather_rows(perm.get(), full.get(), ord.get(), Tp, width * 4, st);
    comm.reduce_scatter(perm.get(), mine.get(), Tq * width, st);
#endif
    return mine.download(st);
  };
  phase("fused: key and weight grad reductions");
  const auto dK_mine = scatter_keys(dK, D);
  out.dk_I = scatter_keys(dk_I, DI);
  comm.allreduce_sum(dW_UK.get(), dW_UK.size(), st);
  comm.allreduce_sum(dW_UV.get(), dW_UV.size(), st);

  for (const auto& [name, buf, h] : sent)
    if (buf->download(st) != h)
      throw std::runtime_error(std::string("DSA_FUSED_CHECK_INPUTS: input buffer ") + name +
                               " changed during the run (a kernel wrote out of bounds)");

  // ---- copy back ----
  phase("fused: download");
  out.topk = topk.download(st);
  if (S.scores) out.scores = scores.download(st);
  out.O = O.download(st);
  out.O_lat = O_lat.download(st);
  out.lse = lse.download(st);
  out.kl = kl.download(st);
  out.dq_I = dq_I.download(st);
  out.dw = dw.download(st);
  out.dq_nope = dq_nope.download(st);
  out.dq_pe = dq_pe.download(st);
  if (ri.weight_grads) {
    out.dW_UK = dW_UK.download(st);
    out.dW_UV = dW_UV.download(st);
  }
  out.dc.resize(Tq * C);
  out.dk_pe.resize(Tq * R);
#pragma omp parallel for schedule(static) if (Tq * D > kParallelElements)
  for (int64_t i = 0; i < Tq; ++i) {
    std::memcpy(&out.dc[i * C], &dK_mine[i * D], C * sizeof(float));
    std::memcpy(&out.dk_pe[i * R], &dK_mine[i * D + C], R * sizeof(float));
  }
  // L = Σ_ranks coeff·Σ_{g on rank} KL[g] / N (the coeff/N is already in dI; KL rows are unscaled).
  double part = 0;
  for (float v : out.kl) part += v;
  const float h_loss = static_cast<float>(p.coeff * part / N);
  DSA_CUDA_CHECK(cudaMemcpyAsync(loss.get(), &h_loss, sizeof(float), cudaMemcpyHostToDevice, st));
  comm.allreduce_sum(loss.get(), 1, st);
  out.loss = loss.download(st)[0];
}

// A value as it came off the device; the 0xFF poison still there was never written: said so
// (dsa::unwritten_value).
double from_bf16(uint16_t v) { return is_poison_bits(v) ? unwritten_value() : double(bf16_float(v)); }
double from_f32(float v) { return is_poison_bits(std::bit_cast<uint32_t>(v)) ? unwritten_value() : static_cast<double>(v); }
// fp32 accumulators written out as bf16 (SPEC.md §8: every gradient is rounded on output).
double from_f32_bf16(float v) {
  return is_poison_bits(std::bit_cast<uint32_t>(v)) ? unwritten_value() : double(round_bf16(v));
}

template <class V, class F>
TensorD converted(Shape shape, const TensorData<V>& v, F conv) {
  TensorD t(std::move(shape), Uninitialized{});
#pragma omp parallel for schedule(static) if (t.size() > kParallelElements)
  for (int64_t i = 0; i < t.size(); ++i) t.data[i] = conv(v[i]);
  return t;
}

// One rank's outputs as doubles, local rows in local order (what assemble_ranks places).
RankResult to_rank_result(const RankOut& o, const Dims& d, int64_t Tq, int64_t Tp, int64_t Kp, bool scores) {
  const int64_t H = d.H, C = d.C, R = d.R;
  RankResult res;
  res.topk.shape = {Tq, Kp};
  res.topk.data = o.topk;
  if (scores) res.scores = converted({Tq, Tp}, o.scores, from_f32);
  res.O = converted({Tq, H, d.Dv}, o.O, from_bf16);
  res.O_lat = converted({Tq, H, C}, o.O_lat, from_bf16);
  res.lse = converted({Tq, H}, o.lse, from_f32);
  res.kl = converted({Tq}, o.kl, from_f32);
  res.dq_nope = converted({Tq, H, d.Dn}, o.dq_nope, from_bf16);
  res.dq_pe = converted({Tq, H, R}, o.dq_pe, from_bf16);
  res.dc = converted({Tq, C}, o.dc, from_f32_bf16);
  res.dk_pe = converted({Tq, R}, o.dk_pe, from_f32_bf16);
  res.dq_I = converted({Tq, d.HI, d.DI}, o.dq_I, from_f32_bf16);
  res.dk_I = converted({Tq, d.DI}, o.dk_I, from_f32_bf16);
  res.dw = converted({Tq, d.HI}, o.dw, from_f32_bf16);
  if (!o.dW_UK.empty()) {  // copied back by this rank (RankInputs::weight_grads)
    res.dW_UK = converted({H, d.Dn, C}, o.dW_UK, from_f32_bf16);
    res.dW_UV = converted({H, d.Dv, C}, o.dW_UV, from_f32_bf16);
  }
  res.loss = from_f32(o.loss);
  return res;
}

// What every rank of one run shares, checked once: the problem is validated and laid out.
Shared shared_of(const Problem& p, const StreamLayout& L, const FusedOptions& opt) {
  if (p.path == Path::explicit_)
    throw Unavailable("the fused cuda path implements the absorbed path only (path = explicit is not supported)");
  if (device_count() == 0) throw Unavailable("cuda: no CUDA device");
  const int64_t Tp = L.tp, Kp = topk_width(p.topk, Tp);
  int64_t Ka = Kp;
  if (opt.attention_indices) {
    const TensorI& ai = *opt.attention_indices;
    require(ai.shape.size() == 2 && ai.dim(0) == Tp && ai.dim(1) >= 1, "attention_indices",
            "must have shape [Tp, K'] = [" + std::to_string(Tp) + ", K'], got " + shape_str(ai.shape));
    Ka = ai.dim(1);
  }
  const bool scores = opt.want_scores && Tp * Tp <= opt.max_score_elements;
  return Shared{p, opt, L, Kp, Ka, scores};
}

RankResult rank_part(const Shared& S, const RankInputs& ri, DeviceComm& comm) {
  RankOut out;
  run_rank(S, ri, comm, out);
  const TraceSpan span("fused: to doubles");
  const int64_t Tq = static_cast<int64_t>(S.L.rank_rows[comm.rank()].size());
  return to_rank_result(out, S.p.dims, Tq, S.L.tp, S.Kp, S.scores);
}

}  // namespace

RankResult run_fused_rank(const Problem& p, const StreamLayout& L, const Inputs& local, const FusedOptions& opt,
                          DeviceComm& comm) {
  require(comm.size() == L.cp, "cp", "the communicator has " + std::to_string(comm.size()) + " ranks, the case cp " +
                                         std::to_string(L.cp));
  const Shared S = shared_of(p, L, opt);
  const int64_t Tq = static_cast<int64_t>(L.rank_rows[comm.rank()].size());
  check_shapes(local, p.dims, Tq);
  std::vector<int64_t> own(Tq);
  std::iota(own.begin(), own.end(), int64_t(0));
  const CallersDevice callers_device;
  const DeviceWeights weights(local, comm.device());
  RankResult res = rank_part(S, RankInputs{local, std::move(own), weights}, comm);
  if (check_inputs()) weights.check_unchanged(local);
  return res;
}

Result run_fused(const Problem& p, const Inputs& in, const FusedOptions& opt) {
  validate(p);
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  const Shared S = shared_of(p, L, opt);
  check_shapes(in, p.dims, L.tp);

  const int cp = static_cast<int>(L.cp);
  const CommKind kind = resolve_comm(opt.comm, cp);
  // NCCL groups come from a per-(world size, device) cache and go back to it after a clean run
  // (fused/comm/comm.hpp): a cp = 1 fuzz session creates its communicator once, not per case.
  const bool nccl = kind == CommKind::nccl;
  std::unique_ptr<CommGroup> group = nccl ? take_nccl_group(cp) : make_local_group(cp, 0);
  const CallersDevice callers_device;  // restored after the weights below are freed
  std::map<int, std::unique_ptr<DeviceWeights>> weights;  // one copy per device the ranks run on
  for (int r = 0; r < cp; ++r)
    if (auto& w = weights[group->comm(r).device()]; !w) w = std::make_unique<DeviceWeights>(in, group->comm(r).device());
  std::vector<RankResult> outs(cp);
  std::vector<std::exception_ptr> errs(cp);
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r)
    threads.emplace_back([&, r] {
      try {
        const TraceSpan span("fused: rank");
        // Each rank reads only its own rows, as a rank in a process of its own does (--comm mpi).
        outs[r] = rank_part(S, RankInputs{in, L.rank_rows[r], *weights.at(group->comm(r).device()), r == 0},
                            group->comm(r));
      } catch (...) {
        errs[r] = std::current_exception();
        group->comm(r).abort();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);  // an aborted group is destroyed here, never reused
  if (check_inputs())
    for (const auto& [device, w] : weights) w->check_unchanged(in);
  if (nccl) give_back_nccl_group(std::move(group));
  // One rank holding every row in order (cp = 1): its tensors are the global ones, moved.
  if (cp == 1 && std::is_sorted(L.rank_rows[0].begin(), L.rank_rows[0].end()) &&
      static_cast<int64_t>(L.rank_rows[0].size()) == L.tp)
    return assemble_whole(std::move(outs[0]));
  return assemble_ranks(L, outs);
}

}  // namespace dsa::fused
