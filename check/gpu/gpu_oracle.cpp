// The GPU oracle's host side: uploads the inputs, runs the stages of SPEC.md §3–§7 in order
// (indexer scores + top-k, S(g), attention forward, KL loss, attention backward) over chunks of
// consecutive query rows, and assembles a Result in global row order. Every product is a cuBLAS
// GEMM over gathered keys (fp64 for exact, fp32 on bf16 values for the bf16 policy); the kernels
// of kernels.hpp do the rest. Nothing is fused into a kernel; the attention's forward and backward
// of a chunk of rows run back to back on its gathered keys (attend), which gives the backward the
// P that the reference recomputes from the stored lse, and the sparse loss its target.
#include "check/gpu/gpu_oracle.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#include "check/gpu/blas.hpp"
#include "check/gpu/cuda_util.hpp"
#include "check/gpu/host_transfer.hpp"
#include "check/gpu/kernels.hpp"
#include "check/gpu/key_sets.hpp"
#include "core/errors.hpp"
#include "core/stopwatch.hpp"
#include "core/trace.hpp"

namespace dsa {
namespace gpu {
namespace {

using Clock = std::chrono::steady_clock;

std::string shape_text(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

void check_inputs(const Problem& p, const StreamLayout& L, const Inputs& in, const GpuOracleOptions& opt) {
  const Dims& d = p.dims;
  const std::pair<const char*, int64_t> dims[] = {{"dims.H", d.H},   {"dims.Dn", d.Dn}, {"dims.R", d.R},
                                                  {"dims.C", d.C},   {"dims.Dv", d.Dv}, {"dims.HI", d.HI},
                                                  {"dims.DI", d.DI}, {"topk", p.topk}};
  for (auto& [f, v] : dims)
    require(v >= 1, f, "must be at least 1, got " + std::to_string(v));
  require(L.tp >= 1 && static_cast<int64_t>(L.seg.size()) == L.tp, "layout", "must describe a stream of Tp >= 1 rows");
  require(L.tp <= std::numeric_limits<int32_t>::max(), "layout", "Tp must fit int32 key indices");
  const int64_t T = L.tp;
  const std::pair<const TensorD*, std::pair<const char*, Shape>> want[] = {
      {&in.q_nope, {"q_nope", {T, d.H, d.Dn}}}, {&in.q_pe, {"q_pe", {T, d.H, d.R}}},
      {&in.c, {"c", {T, d.C}}},                  {&in.k_pe, {"k_pe", {T, d.R}}},
      {&in.W_UK, {"W_UK", {d.H, d.Dn, d.C}}},    {&in.W_UV, {"W_UV", {d.H, d.Dv, d.C}}},
      {&in.q_I, {"q_I", {T, d.HI, d.DI}}},       {&in.k_I, {"k_I", {T, d.DI}}},
      {&in.w, {"w", {T, d.HI}}},                 {&in.dO, {"dO", {T, d.H, d.Dv}}}};
  for (auto& [t, ns] : want)
    require(t->shape == ns.second && t->size() == numel(ns.second), ns.first,
            "must have shape " + shape_text(ns.second) + ", got " + shape_text(t->shape));
  const Shape iw = {T, topk_width(p.topk, T)};
  if (opt.attention_indices)
    require(opt.attention_indices->shape == iw && opt.attention_indices->size() == numel(iw), "indices",
            "must have shape " + shape_text(iw) + ", got " + shape_text(opt.attention_indices->shape));
  require(opt.indexer || !opt.attention || opt.attention_indices.has_value(), "indices",
          "are required when the indexer stage is skipped");
}

template <class R>
DeviceArray<R> upload(const TensorD& t) {
  DeviceArray<R> d(t.data.size());
  to_device<R>(t.data.data(), d.get(), t.data.size());
  return d;
}

}  // namespace
}  // namespace gpu

class DeviceInputs {
 public:
  explicit DeviceInputs(const Inputs& in) {
    in.for_each([&](const std::string& name, const TensorD& t) {
      gpu::DeviceArray<uint16_t> d(t.data.size());
      if (gpu::to_device_bits(t.data.data(), d.get(), t.data.size())) bits_.emplace(name, std::move(d));
    });
  }
  // `name` as R, widened from its kept bits; else taken up from the host.
  template <class R>
  gpu::DeviceArray<R> get(const std::string& name, const TensorD& host) const {
    const auto it = bits_.find(name);
    if (it == bits_.end() || it->second.size() != host.data.size()) return gpu::upload<R>(host);
    gpu::DeviceArray<R> d(host.data.size());
    gpu::widen_bf16<R>(it->second.get(), d.get(), static_cast<int64_t>(d.size()));
    return d;
  }

 private:
  std::map<std::string, gpu::DeviceArray<uint16_t>> bits_;
};

std::shared_ptr<const DeviceInputs> gpu_keep_inputs(const Inputs& in) {
  if (!gpu_oracle_available()) throw Unavailable("gpu oracle: no CUDA device is present");
  const TraceSpan span("gpu oracle: keep inputs");
  auto kept = std::make_shared<const DeviceInputs>(in);
  DSA_GPU_CUDA(cudaStreamSynchronize(cudaStreamPerThread));  // other threads' runs read them
  return kept;
}

namespace gpu {
namespace {

// The attention's host outputs, allocated ahead of the download (which writes every element).
// Those of held_min elements and more stay on the device: only their shapes (allocating them
// anyway cost gigabytes of host memory per precision and case at production shapes).
struct Outputs {
  TensorD O, O_lat, lse, kl, dq_nope, dq_pe, dW_UK, dW_UV, dc, dk_pe, dq_I, dk_I, dw;
  Outputs(const Dims& d, int64_t T, int64_t held_min)
      : O(host({T, d.H, d.Dv}, held_min)), O_lat(host({T, d.H, d.C}, held_min)), lse(host({T, d.H}, held_min)),
        kl(host({T}, std::numeric_limits<int64_t>::max())), dq_nope(host({T, d.H, d.Dn}, held_min)), dq_pe(host({T, d.H, d.R}, held_min)),
        dW_UK(host({d.H, d.Dn, d.C}, held_min)), dW_UV(host({d.H, d.Dv, d.C}, held_min)),
        dc(host({T, d.C}, held_min)), dk_pe(host({T, d.R}, held_min)), dq_I(host({T, d.HI, d.DI}, held_min)),
        dk_I(host({T, d.DI}, held_min)), dw(host({T, d.HI}, held_min)) {}
  static TensorD host(Shape s, int64_t held_min) {
    if (numel(s) < held_min) return TensorD(std::move(s), Uninitialized{});
    TensorD t;
    t.shape = std::move(s);
    return t;
  }
};

template <class R>
TensorD download(const DeviceArray<R>& d, TensorD t) {
  if (static_cast<size_t>(t.size()) != d.size()) fail("download size mismatch", __FILE__, __LINE__);
  to_host<R>(d.get(), t.data.data(), d.size());
  return t;
}

DeviceArray<int32_t> upload_i(const std::vector<int32_t>& v) {
  DeviceArray<int32_t> d;
  d.upload(v);
  return d;
}
DeviceArray<int64_t> upload_l(const std::vector<int64_t>& v) {
  DeviceArray<int64_t> d;
  d.upload(v);
  return d;
}

// This thread's work (per-thread default streams, CMakeLists.txt): the other precision's run, on
// another thread, goes on meanwhile.
void sync() { DSA_GPU_CUDA(cudaStreamSynchronize(cudaStreamPerThread)); }

// One cuBLAS handle per thread for the process's life: creating one costs milliseconds and a run
// needs one per precision and stage, thousands of times a nightly. Never destroyed: destroying it at
// exit can race the CUDA runtime's own teardown.
cublasHandle_t thread_blas() {
  static thread_local cublasHandle_t h = [] {
    cublasHandle_t made = nullptr;
    DSA_GPU_BLAS(cublasCreate(&made));
    // No TF32 or other reduced-precision shortcuts: fp32 GEMMs must be fp32 (SPEC.md §8).
    DSA_GPU_BLAS(cublasSetMathMode(made, CUBLAS_DEFAULT_MATH));
    // cuBLAS is not built with per-thread streams: its stream 0 would be the legacy one.
    DSA_GPU_BLAS(cublasSetStream(made, cudaStreamPerThread));
    return made;
  }();
  return h;
}

// One run at one precision. R = double: exact; R = float: the bf16 policy.
template <class R>
class Oracle {
  static constexpr bool kLowp = std::is_same_v<R, float>;

 public:
  Oracle(const Problem& p, const StreamLayout& L, const Inputs& in, const GpuOracleOptions& opt)
      : p_(p), d_(p.dims), L_(L), opt_(opt), Tp_(L.tp), CR_(p.dims.C + p.dims.R), Kw_(topk_width(p.topk, L.tp)),
        s_(static_cast<R>(p.softmax_scale)) {
    auto t0 = Clock::now();
    const TraceSpan span(kLowp ? "bf16 oracle: upload" : "exact oracle: upload");
    q_I_ = input("q_I", in.q_I), w_ = input("w", in.w), k_I_ = input("k_I", in.k_I);
    // The indexer alone needs nothing else; the attention inputs (the weights alone are 29 M values
    // at production widths) go up only for a run that attends.
    if (opt.attention) {
      q_nope_ = input("q_nope", in.q_nope), q_pe_ = input("q_pe", in.q_pe), dO_ = input("dO", in.dO);
      W_UK_ = input("W_UK", in.W_UK), W_UV_ = input("W_UV", in.W_UV), c_ = input("c", in.c), k_pe_ = input("k_pe", in.k_pe);
      // K~ = [c ; k_pe] per key, the operand of every absorbed logit.
      Kt_.reset(Tp_ * CR_);
      copy_block<R>(c_.get(), d_.C, Kt_.get(), CR_, Tp_, d_.C, false);
      copy_block<R>(k_pe_.get(), d_.R, Kt_.get() + d_.C, CR_, Tp_, d_.R, false);
    }
    std::vector<int32_t> kb(Tp_), ke(Tp_);
    for (int64_t g = 0; g < Tp_; ++g) kb[g] = int32_t(L.key_begin(g)), ke[g] = int32_t(L.key_end(g));
    kbegin_ = upload_i(kb), kend_ = upload_i(ke);
    kbegin_h_ = kb, kend_h_ = ke;
    size_t free_b = 0, total_b = 0;
    DSA_GPU_CUDA(cudaMemGetInfo(&free_b, &total_b));
    workspace_ = opt.max_workspace_bytes > 0 ? opt.max_workspace_bytes
                                             : std::min<int64_t>(int64_t(free_b) / 3, int64_t(12) << 30);
    sync();
    times_.upload = seconds_since(t0);
  }

  // The largest element of a device array (0 when empty): the slacks' maxima.
  static double largest(const DeviceArray<R>& a) {
    std::vector<double> h(a.size());
    to_host<R>(a.get(), h.data(), a.size());
    return h.empty() ? 0.0 : *std::max_element(h.begin(), h.end());
  }

  Result run() {
    Result res;
    // The host output tensors are allocated (and zero-filled, GiBs at production shapes) on
    // another thread while the device computes.
    std::future<Outputs> outputs;
    const int64_t held_min = opt_.held ? opt_.held_min_elements : std::numeric_limits<int64_t>::max();
    if (opt_.attention) outputs = std::async(std::launch::async, [this, held_min] { return Outputs(d_, Tp_, held_min); });
    if (opt_.indexer) indexer(res);
    if (!opt_.attention) return res;
    auto t0 = Clock::now();
    const TensorI& idx = opt_.attention_indices ? *opt_.attention_indices : res.topk;
    S_ = select_keys(L_, idx);
    S_count_ = upload_i(S_.count), S_off_ = upload_l(S_.offset), S_keys_ = upload_i(S_.keys);
    if (p_.path == Path::explicit_) materialize_explicit_keys();
    sync();
    times_.select = seconds_since(t0);

    t0 = Clock::now();
    std::optional<TraceSpan> span(std::in_place, kLowp ? "bf16 oracle: attention" : "exact oracle: attention");
    attend(res);
    sync();
    times_.attention = seconds_since(t0);
    t0 = Clock::now();
    span.emplace(kLowp ? "bf16 oracle: loss" : "exact oracle: loss");
    loss(res);
    sync();
    times_.loss = seconds_since(t0);

    t0 = Clock::now();
    span.emplace(kLowp ? "bf16 oracle: outputs" : "exact oracle: outputs");
    Outputs o = outputs.get();
    // Downloaded, or held on the device under its name (GpuOracleOptions::held).
    auto out = [&](const char* name, DeviceArray<R>& dev, TensorD host) {
      if (numel(host.shape) < held_min) return download(dev, std::move(host));
      HeldTensor& h = (*opt_.held)[name];
      h.shape = host.shape;
      h.size = numel(host.shape);
      h.fp32 = kLowp;
      h.memory = std::shared_ptr<void>(dev.release(), [](void* p) { pool_free(p); });
      return TensorD();
    };
    res.O = out("O", O_, std::move(o.O));
    res.O_lat = out("O_lat", O_lat_, std::move(o.O_lat));
    res.lse = out("lse", lse_, std::move(o.lse));
    res.kl = download(kl_, std::move(o.kl));  // the loss is its sum, below
    res.dq_nope = out("dq_nope", dq_nope_, std::move(o.dq_nope));
    res.dq_pe = out("dq_pe", dq_pe_, std::move(o.dq_pe));
    res.dW_UK = out("dW_UK", dW_UK_, std::move(o.dW_UK));
    res.dW_UV = out("dW_UV", dW_UV_, std::move(o.dW_UV));
    res.dc = out("dc", dc_, std::move(o.dc));
    res.dk_pe = out("dk_pe", dk_pe_, std::move(o.dk_pe));
    res.dq_I = out("dq_I", dq_I_, std::move(o.dq_I));
    res.dk_I = out("dk_I", dk_I_, std::move(o.dk_I));
    res.dw = out("dw", dw_, std::move(o.dw));
    // L = coeff·Σ_g KL[g] / N, summed in fp64 as the reference does, then held at R.
    double sum = 0;
    for (double x : res.kl.data) sum += x;
    res.loss = TensorD({1}, p_.loss == LossMode::off ? 0.0 : double(R(p_.coeff * sum / counted())));
    times_.download += seconds_since(t0);
    return res;
  }

  const GpuOracleTimings& times() const { return times_; }

  // An input as R: widened from the case's kept inputs when there are some, else taken up.
  DeviceArray<R> input(const char* name, const TensorD& t) const {
    return opt_.kept_inputs ? opt_.kept_inputs->get<R>(name, t) : upload<R>(t);
  }

 private:
  // N of SPEC.md §7: rows under attend, real rows under masked; at least 1.
  double counted() const {
    int64_t n = 0;
    for (int64_t g = 0; g < Tp_; ++g) n += L_.active(g) ? 1 : 0;
    return std::max<double>(1.0, double(n));
  }

  cublasHandle_t blas() const { return thread_blas(); }
  void maybe_round(R* x, int64_t n) {
    if constexpr (kLowp) round_bf16_inplace(x, n);
  }

  // ---- indexer scores and top-k (SPEC.md §3–§4) ----
  void indexer(Result& res) {
    auto t0 = Clock::now();
    const TraceSpan span(kLowp ? "bf16 oracle: indexer" : "exact oracle: indexer");
    const bool want_scores = Tp_ * Tp_ <= opt_.max_score_elements;
    const int64_t per_row = Tp_ * (d_.HI + 2) * int64_t(sizeof(R)) + 2 * Tp_ * int64_t(sizeof(int32_t));
    const int64_t rows = std::clamp<int64_t>(workspace_ / per_row, 1, Tp_);
    DeviceArray<R> U(rows * d_.HI * Tp_), scores(rows * Tp_);
    DeviceArray<int32_t> vals(rows * Tp_), topk(Tp_ * Kw_);
    TopkSorter<R> sorter(rows, Tp_);
    if (want_scores) res.scores = TensorD({Tp_, Tp_});
    for (int64_t r0 = 0; r0 < Tp_; r0 += rows) {
      const int64_t B = std::min(rows, Tp_ - r0);
      // U[b·HI + h, t] = q_I[g, h]·k_I[t] for every key; the score kernel keeps the visible ones.
      gemm<R>(blas(), false, true, B * d_.HI, Tp_, d_.DI, R(1), {q_I_.get() + r0 * d_.HI * d_.DI, d_.DI},
              {k_I_.get(), d_.DI}, R(0), U.get(), Tp_, 0, 1);
      indexer_scores<R>(U.get(), w_.get() + r0 * d_.HI, kbegin_.get() + r0, kend_.get() + r0, B, d_.HI, Tp_,
                        p_.relu, scores.get(), vals.get());
      if (want_scores) to_host<R>(scores.get(), res.scores->row(r0), B * Tp_);  // pinned, converted on several threads
      sorter.run(scores.get(), vals.get(), kbegin_.get() + r0, kend_.get() + r0, B, Kw_, topk.get() + r0 * Kw_);
    }
    res.topk = TensorI({Tp_, Kw_});
    if (Tp_ * Kw_ > 0)
      DSA_GPU_CUDA(cudaMemcpy(res.topk.data.data(), topk.get(), Tp_ * Kw_ * sizeof(int32_t), cudaMemcpyDeviceToHost));
    times_.indexer = seconds_since(t0);
  }

  // ---- key sets of a chunk ----
  RowKeys sparse_keys(const Chunk& c) const {
    RowKeys k;
    k.count = S_count_.get() + c.r0, k.offset = S_off_.get() + c.r0, k.keys = S_keys_.get();
    k.B = c.rows(), k.kmax = c.kmax;
    return k;
  }
  // V(g) = every visible key, a range [key_begin, key_end) (dense loss).
  RowKeys dense_keys(const Chunk& c) const {
    RowKeys k;
    k.count = V_count_.get() + c.r0, k.first = kbegin_.get() + c.r0;
    k.B = c.rows(), k.kmax = c.kmax;
    return k;
  }

  // Scratch of a pass: per_slot reals for each of rows·kmax slots, per_row reals per row.
  std::vector<Chunk> plan(const std::vector<int32_t>& count, int64_t per_slot, int64_t per_row) const {
    const int64_t bs = per_slot * int64_t(sizeof(R)), br = per_row * int64_t(sizeof(R));
    const int64_t row_cap = std::clamp<int64_t>(workspace_ / 4 / std::max<int64_t>(br, 1), 1, 2048);
    const int64_t slots = std::max<int64_t>(1, (workspace_ - row_cap * br) / std::max<int64_t>(bs, 1));
    return plan_chunks(count, slots, row_cap);
  }
  static void maxima(const std::vector<Chunk>& cs, int64_t& rows, int64_t& slots) {
    rows = 0, slots = 0;
    for (auto& c : cs) rows = std::max(rows, c.rows()), slots = std::max(slots, c.rows() * c.kmax);
  }

  // Q~ of the chunk's rows: [q_nope·W_UK ; q_pe], rounded to bf16 under the policy.
  void project_queries(const Chunk& c, R* Qt) {
    const int64_t B = c.rows(), H = d_.H;
    gemm<R>(blas(), false, false, B, d_.C, d_.Dn, R(1), {q_nope_.get() + c.r0 * H * d_.Dn, H * d_.Dn, d_.Dn},
            {W_UK_.get(), d_.C, d_.Dn * d_.C}, R(0), Qt, H * CR_, CR_, H);
    place_q_pe<R>(q_pe_.get() + c.r0 * H * d_.R, B, H, d_.C, d_.R, Qt);
    maybe_round(Qt, B * H * CR_);
  }

  // Explicit path: k_nope[t, h, :] = W_UK[h]·c[t], v[t, h, :] = W_UV[h]·c[t] for every key (one
  // GEMM each over the stacked heads), rounded under the policy. NaN rows of poisoned pad keys
  // come out NaN here and are never gathered.
  void materialize_explicit_keys() {
    k_nope_.reset(Tp_ * d_.H * d_.Dn);
    v_.reset(Tp_ * d_.H * d_.Dv);
    gemm<R>(blas(), false, true, Tp_, d_.H * d_.Dn, d_.C, R(1), {c_.get(), d_.C}, {W_UK_.get(), d_.C}, R(0),
            k_nope_.get(), d_.H * d_.Dn, 0, 1);
    gemm<R>(blas(), false, true, Tp_, d_.H * d_.Dv, d_.C, R(1), {c_.get(), d_.C}, {W_UV_.get(), d_.C}, R(0),
            v_.get(), d_.H * d_.Dv, 0, 1);
    maybe_round(k_nope_.get(), Tp_ * d_.H * d_.Dn);
    maybe_round(v_.get(), Tp_ * d_.H * d_.Dv);
  }

  // logits[b, h, j] = s·Q~[g, h]·K~[key] (absorbed, from Qt and the gathered Kg) or the explicit
  // per-head form; padded slots are 0.
  void logits(const RowKeys& k, const Chunk& c, const R* Qt, const R* Kg, R* out) {
    const int64_t H = d_.H;
    if (p_.path == Path::absorbed) {
      gemm<R>(blas(), false, true, H, k.kmax, CR_, s_, {Qt, CR_, H * CR_}, {Kg, CR_, k.kmax * CR_}, R(0), out,
              k.kmax, H * k.kmax, k.B);
    } else {
      explicit_logits<R>(k, q_nope_.get() + c.r0 * H * d_.Dn, q_pe_.get() + c.r0 * H * d_.R, k_nope_.get(),
                         k_pe_.get(), H, d_.Dn, d_.R, s_, out);
    }
  }

  // ---- attention forward and backward (SPEC.md §5–§6), one pass over each chunk of rows ----
  // A row's backward needs only its own forward (P, lse, O_lat), so both run while the chunk's
  // gathered K~ is on the device: one gather, one logits GEMM and one softmax per row where
  // separate passes took three (forward, loss, backward). P recomputed from the stored lse is the
  // forward's P, bit for bit; so is the sparse loss's A_h, whose target T is kept here (T_).
  void attend(Result& res) {
    const int64_t H = d_.H, C = d_.C, Dn = d_.Dn, Rr = d_.R, Dv = d_.Dv;
    const bool absorbed = p_.path == Path::absorbed;
    const bool target = p_.loss == LossMode::sparse;
    O_lat_.reset(Tp_ * H * C);
    O_.reset(Tp_ * H * Dv);
    lse_.reset(Tp_ * H);
    fill<R>(lse_.get(), Tp_ * H, -std::numeric_limits<R>::infinity());  // empty S(g): lse −inf
    T_.reset(target ? S_.keys.size() : 0);
    dq_nope_.reset(Tp_ * H * Dn), dq_pe_.reset(Tp_ * H * Rr);
    dW_UK_.reset(H * Dn * C), dW_UV_.reset(H * Dv * C), dc_.reset(Tp_ * C), dk_pe_.reset(Tp_ * Rr);
    // Key-side accumulators: absorbed dK~ [Tp, C+R], dV~ summed into its first C columns (dc is
    // their sum); explicit dk_nope, dk_pe, dv.
    DeviceArray<R> dKt(absorbed ? Tp_ * CR_ : 0);
    DeviceArray<R> dKn(absorbed ? 0 : Tp_ * H * Dn), dKpe(absorbed ? 0 : Tp_ * Rr), dVv(absorbed ? 0 : Tp_ * H * Dv);
    const auto chunks = plan(S_.count, 2 * CR_ + 3 * H + 1, 2 * H * CR_ + H * C + H);
    int64_t mr, ms;
    maxima(chunks, mr, ms);
    DeviceArray<R> Qt(mr * H * CR_), dOl(absorbed ? mr * H * C : 0), dQ(absorbed ? mr * H * CR_ : 0), delta(mr * H);
    DeviceArray<R> Kg(ms * CR_), P(ms * H), Pb(ms * H), dl(ms * H), rowsK(absorbed ? ms * CR_ : 0), T(target ? ms : 0);
    // The exact run's Δ slack (core/result.hpp DeltaSlack): per (row, head), the largest at the end.
    const bool slack = !kLowp;
    DeviceArray<R> slack_nope(slack ? Tp_ * H : 0), slack_pe(slack ? Tp_ * H : 0), W_norm(slack ? H : 0);
    DeviceArray<R> key_nope(slack ? Tp_ : 0), key_pe(slack ? Tp_ : 0);  // the key side's sums per key
    if (slack) {
      fill<R>(slack_nope.get(), Tp_ * H, R(0));  // rows no chunk visits keep 0
      fill<R>(slack_pe.get(), Tp_ * H, R(0));
      fill<R>(key_nope.get(), Tp_, R(0));
      fill<R>(key_pe.get(), Tp_, R(0));
      if (absorbed) row_norm_max<R>(W_UK_.get(), H, Dn, C, W_norm.get());
      else col_norm_max<R>(W_UK_.get(), H, Dn, C, W_norm.get());  // explicit: the key side's bound
    }
    for (const Chunk& c : chunks) {
      const RowKeys k = sparse_keys(c);
      const int64_t B = c.rows();
      R* O_lat = O_lat_.get() + c.r0 * H * C;
      R* O = O_.get() + c.r0 * H * Dv;
      const R* dO = dO_.get() + c.r0 * H * Dv;
      // Forward: logits, P = softmax with its lse, O_lat (and O on the explicit path), rounded.
      if (absorbed) project_queries(c, Qt.get());
      gather_keys<R>(k, Kt_.get(), CR_, CR_, Kg.get());
      logits(k, c, Qt.get(), Kg.get(), P.get());
      softmax_rows<R>(P.get(), Pb.get(), k.count, B, H, k.kmax, nullptr, lse_.get() + c.r0 * H);
      // O_lat[b, h] = Σ_j bf(P)·c[key]: the first C columns of the gathered K~ rows are V~.
      gemm<R>(blas(), false, false, H, C, k.kmax, R(1), {Pb.get(), k.kmax, H * k.kmax}, {Kg.get(), CR_, k.kmax * CR_},
              R(0), O_lat, C, H * C, B);
      maybe_round(O_lat, B * H * C);
      if (!absorbed) {
        explicit_output<R>(k, Pb.get(), v_.get(), H, Dv, O);
        maybe_round(O, B * H * Dv);
      }
      if (target) {  // the sparse loss's T over S(g), in the key sets' CSR order
        kl_target<R>(P.get(), k.count, B, H, k.kmax, T.get());
        pack_rows<R>(k, T.get(), T_.get());
      }
      // Backward: dP, Δ and dlogit, then the query-side and key-side gradients.
      if (absorbed) {
        // dO_lat = W_UVᵀ·dO (a GEMM output: rounded under the policy); dP = dO_lat·V~ᵀ; Δ = dO_lat·O_lat.
        gemm<R>(blas(), false, false, B, C, Dv, R(1), {dO, H * Dv, Dv}, {W_UV_.get(), C, Dv * C}, R(0), dOl.get(),
                H * C, C, H);
        maybe_round(dOl.get(), B * H * C);
        gemm<R>(blas(), false, true, H, k.kmax, C, R(1), {dOl.get(), C, H * C}, {Kg.get(), CR_, k.kmax * CR_}, R(0),
                dl.get(), k.kmax, H * k.kmax, B);
        if (kLowp) row_dots<R>(dOl.get(), O_lat, B * H, C, delta.get());
      } else {
        explicit_dP<R>(k, dO, v_.get(), H, Dv, dl.get());
        if (kLowp) row_dots<R>(dO, O, B * H, Dv, delta.get());
      }
      if (slack) {
        const KeySlack<R> ks{absorbed ? Qt.get() : nullptr, absorbed ? nullptr : q_nope_.get() + c.r0 * H * Dn,
                             absorbed ? nullptr : q_pe_.get() + c.r0 * H * Rr, W_norm.get(), key_nope.get(),
                             key_pe.get()};
        delta_slack<R>(k, P.get(), dl.get(), H, Kg.get(), C, Rr, absorbed ? dOl.get() : dO, absorbed ? O_lat : O,
                       absorbed ? C : Dv, absorbed ? W_norm.get() : nullptr, k_nope_.get(), Dn, s_,
                       slack_nope.get() + c.r0 * H, slack_pe.get() + c.r0 * H, ks);
      }
      // Exact: Δ = Σ P·dP; bf16 policy: the SPEC's dO_lat·O_lat, except on one-hot rows (kernels.hpp).
      dlogit_rows<R>(P.get(), dl.get(), k.count, B, H, k.kmax, kLowp, delta.get());  // dP → dlogit in place
      if (absorbed) {
        // dQ~ = s·dl·K~ (rounded on output); dK~[key] += s·dlᵀ·Q~ + [bf(P)ᵀ·dO_lat | 0] (dV~ in the
        // first C columns): one atomic scatter of the key rows.
        gemm<R>(blas(), false, false, H, CR_, k.kmax, s_, {dl.get(), k.kmax, H * k.kmax}, {Kg.get(), CR_, k.kmax * CR_},
                R(0), dQ.get(), CR_, H * CR_, B);
        maybe_round(dQ.get(), B * H * CR_);
        gemm<R>(blas(), true, false, k.kmax, CR_, H, s_, {dl.get(), k.kmax, H * k.kmax}, {Qt.get(), CR_, H * CR_},
                R(0), rowsK.get(), CR_, k.kmax * CR_, B);
        gemm<R>(blas(), true, false, k.kmax, C, H, R(1), {Pb.get(), k.kmax, H * k.kmax}, {dOl.get(), C, H * C}, R(1),
                rowsK.get(), CR_, k.kmax * CR_, B);
        scatter_add_keys<R>(k, rowsK.get(), CR_, dKt.get(), CR_);
        // dq_nope[g, h] = dQ~[g, h, :C]·W_UK[h]ᵀ;  dq_pe = dQ~[g, h, C:];  dW_UK[h] += q_nopeᵀ·dQ~[:, h, :C]
        gemm<R>(blas(), false, true, B, Dn, C, R(1), {dQ.get(), H * CR_, CR_}, {W_UK_.get(), C, Dn * C}, R(0),
                dq_nope_.get() + c.r0 * H * Dn, H * Dn, Dn, H);
        copy_block<R>(dQ.get() + C, CR_, dq_pe_.get() + c.r0 * H * Rr, Rr, B * H, Rr, false);
        gemm<R>(blas(), true, false, Dn, C, B, R(1), {q_nope_.get() + c.r0 * H * Dn, H * Dn, Dn},
                {dQ.get(), H * CR_, CR_}, R(1), dW_UK_.get(), C, Dn * C, H);
      } else {
        explicit_dq<R>(k, dl.get(), k_nope_.get(), k_pe_.get(), H, Dn, Rr, s_, dq_nope_.get() + c.r0 * H * Dn,
                       dq_pe_.get() + c.r0 * H * Rr);
        explicit_dkv<R>(k, dl.get(), Pb.get(), q_nope_.get() + c.r0 * H * Dn, q_pe_.get() + c.r0 * H * Rr, dO, H, Dn,
                        Rr, Dv, s_, dKn.get(), dKpe.get(), dVv.get());
      }
    }
    if (slack) {
      res.delta = DeltaSlack{largest(slack_nope), largest(slack_pe), largest(key_nope), largest(key_pe)};
    }
    if (absorbed) {
      // O[g, h] = W_UV[h]·O_lat[g, h], every row at once.
      gemm<R>(blas(), false, true, Tp_, Dv, C, R(1), {O_lat_.get(), H * C, C}, {W_UV_.get(), C, Dv * C}, R(0),
              O_.get(), H * Dv, Dv, H);
      maybe_round(O_.get(), Tp_ * H * Dv);
      absorbed_key_grads<R>(dKt.get(), Tp_, C, Rr, dc_.get(), dk_pe_.get());
      // dW_UV[h] = Σ_g dO[g, h] ⊗ O_lat[g, h] over every row at once.
      gemm<R>(blas(), true, false, Dv, C, Tp_, R(1), {dO_.get(), H * Dv, Dv}, {O_lat_.get(), H * C, C}, R(0),
              dW_UV_.get(), C, Dv * C, H);
    } else {
      // Only keys some query used: an unused key row may be NaN poison, and 0·NaN = NaN, so the
      // c of the weight-gradient products is c with unused rows selected to 0.
      std::vector<uint8_t> used(Tp_, 0);
      for (int32_t t : S_.keys) used[t] = 1;
      DeviceArray<uint8_t> used_d;
      used_d.upload(used);
      DeviceArray<R> c_used(Tp_ * C);
      select_rows<R>(c_.get(), used_d.get(), Tp_, C, c_used.get());
      // dc = Σ_h dk_nope[:, h]·W_UK[h] + dv[:, h]·W_UV[h]: one GEMM each over the stacked heads.
      gemm<R>(blas(), false, false, Tp_, C, H * Dn, R(1), {dKn.get(), H * Dn}, {W_UK_.get(), C}, R(0), dc_.get(), C, 0, 1);
      gemm<R>(blas(), false, false, Tp_, C, H * Dv, R(1), {dVv.get(), H * Dv}, {W_UV_.get(), C}, R(1), dc_.get(), C, 0, 1);
      maybe_round(dc_.get(), Tp_ * C);
      copy_block<R>(dKpe.get(), Rr, dk_pe_.get(), Rr, Tp_, Rr, kLowp);
      gemm<R>(blas(), true, false, H * Dn, C, Tp_, R(1), {dKn.get(), H * Dn}, {c_used.get(), C}, R(0), dW_UK_.get(), C,
              0, 1);
      gemm<R>(blas(), true, false, H * Dv, C, Tp_, R(1), {dVv.get(), H * Dv}, {c_used.get(), C}, R(0), dW_UV_.get(), C,
              0, 1);
    }
    maybe_round(dq_nope_.get(), Tp_ * H * Dn);
    maybe_round(dq_pe_.get(), Tp_ * H * Rr);
    maybe_round(dW_UK_.get(), H * Dn * C);
    maybe_round(dW_UV_.get(), H * Dv * C);
  }

  // ---- indexer KL loss (SPEC.md §7) ----
  void loss(Result& res) {
    const int64_t H = d_.H, HI = d_.HI, DI = d_.DI;
    kl_.reset(Tp_), dq_I_.reset(Tp_ * HI * DI), dw_.reset(Tp_ * HI), dk_I_.reset(Tp_ * DI);
    if (p_.loss == LossMode::off) return;
    // The sparse loss's target came with the attention's P (attend); the dense one's support is every
    // visible key, its softmax normalized afresh over it.
    const bool dense = p_.loss == LossMode::dense;
    std::vector<int32_t> vcount;
    if (dense) {
      vcount.resize(Tp_);
      for (int64_t g = 0; g < Tp_; ++g) vcount[g] = kend_h_[g] - kbegin_h_[g];
      V_count_ = upload_i(vcount);
    }
    const std::vector<int32_t>& count = dense ? vcount : S_.count;
    const auto chunks = dense ? plan(count, CR_ + H + 2 + 2 * DI + 2 * HI, H * CR_) : plan(count, 2 + 2 * DI + 2 * HI, 0);
    int64_t mr, ms;
    maxima(chunks, mr, ms);
    DeviceArray<R> Qt(dense ? mr * H * CR_ : 0), Kg(dense ? ms * CR_ : 0), A(dense ? ms * H : 0), T(ms),
        kIg(ms * DI), u(ms * HI), du(ms * HI), dk(ms * DI), scratch(ms);
    // The exact run's kink slack (SPEC.md §9): per row, the largest head sum; per key, the sum.
    const bool kinks = !kLowp && p_.relu;
    DeviceArray<R> row_slack(kinks ? Tp_ : 0), key_slack(kinks ? Tp_ : 0);
    const R scale = static_cast<R>(p_.coeff / counted());
    for (const Chunk& c : chunks) {
      const RowKeys k = dense ? dense_keys(c) : sparse_keys(c);
      if (dense) {
        if (p_.path == Path::absorbed) {
          project_queries(c, Qt.get());
          gather_keys<R>(k, Kt_.get(), CR_, CR_, Kg.get());
        }
        logits(k, c, Qt.get(), Kg.get(), A.get());
        softmax_rows<R>(A.get(), nullptr, k.count, k.B, H, k.kmax, nullptr, nullptr);
        kl_target<R>(A.get(), k.count, k.B, H, k.kmax, T.get());
      } else {
        unpack_rows<R>(k, T_.get(), T.get());
      }
      gather_keys<R>(k, k_I_.get(), DI, DI, kIg.get());
      const R* qI = q_I_.get() + c.r0 * HI * DI;
      // u[b, j, h] = k_I[key]·q_I[g, h]
      gemm<R>(blas(), false, true, k.kmax, HI, DI, R(1), {kIg.get(), DI, k.kmax * DI}, {qI, DI, HI * DI}, R(0),
              u.get(), HI, k.kmax * HI, k.B);
      kl_rows<R>(u.get(), w_.get() + c.r0 * HI, T.get(), k.count, k.B, HI, k.kmax, p_.relu, scale,
                 kl_.get() + c.r0, dw_.get() + c.r0 * HI, du.get(), scratch.get());
      if (kinks)
        kink_slack<R>(k, u.get(), w_.get() + c.r0 * HI, scratch.get(), kIg.get(), qI, HI, DI, R(kink_band(DI, 1, 1)),
                      row_slack.get() + c.r0, key_slack.get());
      // dq_I[g] = duᵀ·k_I[keys];  dk_I[key] += du·q_I[g]
      gemm<R>(blas(), true, false, HI, DI, k.kmax, R(1), {du.get(), HI, k.kmax * HI}, {kIg.get(), DI, k.kmax * DI},
              R(0), dq_I_.get() + c.r0 * HI * DI, DI, HI * DI, k.B);
      gemm<R>(blas(), false, false, k.kmax, DI, HI, R(1), {du.get(), HI, k.kmax * HI}, {qI, DI, HI * DI}, R(0),
              dk.get(), DI, k.kmax * DI, k.B);
      scatter_add_keys<R>(k, dk.get(), DI, dk_I_.get(), DI);
    }
    if (kinks) {
      res.kink = KinkSlack{largest(row_slack), largest(key_slack)};
    }
    maybe_round(dq_I_.get(), Tp_ * HI * DI);
    maybe_round(dw_.get(), Tp_ * HI);
    maybe_round(dk_I_.get(), Tp_ * DI);
  }

  const Problem& p_;
  const Dims& d_;
  const StreamLayout& L_;
  const GpuOracleOptions& opt_;
  int64_t Tp_, CR_, Kw_;
  R s_;
  int64_t workspace_ = 0;
  GpuOracleTimings times_;
  DeviceArray<R> q_nope_, q_pe_, q_I_, w_, dO_, W_UK_, W_UV_, c_, k_pe_, k_I_, Kt_, k_nope_, v_;
  DeviceArray<int32_t> kbegin_, kend_, S_count_, S_keys_, V_count_;
  DeviceArray<int64_t> S_off_;
  std::vector<int32_t> kbegin_h_, kend_h_;
  KeySets S_;
  DeviceArray<R> T_;  // the sparse loss's target over S(g), CSR order (KeySets)
  DeviceArray<R> O_lat_, O_, lse_, kl_, dq_I_, dw_, dk_I_, dq_nope_, dq_pe_, dW_UK_, dW_UV_, dc_, dk_pe_;
};

template <class R>
Result run_at(const Problem& p, const StreamLayout& L, const Inputs& in, const GpuOracleOptions& opt) {
  const auto t0 = Clock::now();
  Oracle<R> o(p, L, in, opt);
  Result r = o.run();
  if (opt.timings) {
    *opt.timings = o.times();
    opt.timings->total = seconds_since(t0);
  }
  return r;
}

// Scores of query rows [r0, r0 + B) over every key, as Oracle::indexer computes them, in
// sub-chunks whose q_I·k_Iᵀ products fit a fixed scratch.
template <class R>
TensorD score_rows_at(const Problem& p, const StreamLayout& L, const Inputs& in, int64_t r0, int64_t B) {
  const Dims& d = p.dims;
  const int64_t Tp = L.tp, sub = std::clamp<int64_t>((int64_t{1} << 27) / (d.HI * Tp), 1, B);
  DeviceArray<R> k_I = upload<R>(in.k_I), q_I(sub * d.HI * d.DI), w(sub * d.HI), U(sub * d.HI * Tp),
                 scores(sub * Tp);
  DeviceArray<int32_t> vals(sub * Tp);
  std::vector<int32_t> kb(sub), ke(sub);
  TensorD out({B, Tp});
  for (int64_t s0 = 0; s0 < B; s0 += sub) {
    const int64_t n = std::min(sub, B - s0), g0 = r0 + s0;
    to_device<R>(in.q_I.data.data() + g0 * d.HI * d.DI, q_I.get(), n * d.HI * d.DI);
    to_device<R>(in.w.data.data() + g0 * d.HI, w.get(), n * d.HI);
    for (int64_t b = 0; b < n; ++b) kb[b] = int32_t(L.key_begin(g0 + b)), ke[b] = int32_t(L.key_end(g0 + b));
    DeviceArray<int32_t> kbegin = upload_i(kb), kend = upload_i(ke);
    gemm<R>(thread_blas(), false, true, n * d.HI, Tp, d.DI, R(1), {q_I.get(), d.DI}, {k_I.get(), d.DI}, R(0),
            U.get(), Tp, 0, 1);
    indexer_scores<R>(U.get(), w.get(), kbegin.get(), kend.get(), n, d.HI, Tp, p.relu, scores.get(), vals.get());
    to_host<R>(scores.get(), out.row(s0), n * Tp);
  }
  return out;
}

}  // namespace
}  // namespace gpu

TensorD gpu_oracle_score_rows(const Problem& p, const StreamLayout& L, const Inputs& in, Precision precision,
                              int64_t r0, int64_t rows) {
  require(r0 >= 0 && rows >= 1 && r0 + rows <= L.tp, "rows", "must be a range of the stream's Tp rows");
  GpuOracleOptions opt;
  opt.precision = precision;
  gpu::check_inputs(p, L, in, opt);
  if (!gpu_oracle_available()) throw Unavailable("gpu oracle: no CUDA device is present");
  return precision == Precision::exact ? gpu::score_rows_at<double>(p, L, in, r0, rows)
                                       : gpu::score_rows_at<float>(p, L, in, r0, rows);
}

bool gpu_oracle_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

int64_t gpu_oracle_free_bytes() {
  if (!gpu_oracle_available()) return 0;
  size_t free_b = 0, total_b = 0;
  DSA_GPU_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(free_b);
}

int64_t gpu_oracle_total_bytes() {
  if (!gpu_oracle_available()) return 0;
  size_t free_b = 0, total_b = 0;
  DSA_GPU_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(total_b);
}

Result gpu_oracle_run(const Problem& p, const StreamLayout& L, const Inputs& in, const GpuOracleOptions& opt) {
  gpu::check_inputs(p, L, in, opt);
  if (!gpu_oracle_available()) throw Unavailable("gpu oracle: no CUDA device is present");
  return opt.precision == Precision::exact ? gpu::run_at<double>(p, L, in, opt) : gpu::run_at<float>(p, L, in, opt);
}

}  // namespace dsa
