// Launchers of the oracle's device kernels (one .cu file per stage of the math). R is the
// arithmetic type and fixes the policy: double = exact (bf() is the identity), float = the bf16
// policy of SPEC.md §8 (bf() rounds to bf16, nearest even). Every launcher runs on the calling
// thread's default stream.
// Padded buffers are [B, kmax, ...] or [B, H, kmax]: slot j of row b is key keys.key(b, j) when
// j < count[b], and every padded slot is written as 0 so that no GEMM over it adds anything.
#pragma once

#include <cstdint>

#include "check/gpu/row_keys.hpp"

namespace dsa::gpu {

// ---- elementwise (elementwise.cu) ----
template <class R> void round_bf16_inplace(R* x, int64_t n);          // x = bf(x)
template <class R> void fill(R* x, int64_t n, R value);
// x = the bf16 values whose bit patterns are `bits` (exact in fp32 and fp64).
template <class R> void widen_bf16(const uint16_t* bits, R* x, int64_t n);
// dst[r, :] = keep[r] ? src[r, :] : 0, selected (not multiplied): a NaN row that is not kept
// must not turn into 0·NaN.
template <class R> void select_rows(const R* src, const uint8_t* keep, int64_t rows, int64_t cols, R* dst);
// Row-major [rows, cols] block copy with leading dimensions; optionally rounded.
template <class R> void copy_block(const R* src, int64_t lds, R* dst, int64_t ldd, int64_t rows, int64_t cols,
                                   bool round);

// ---- indexer scores (indexer_scores.cu) ----
// scores[b, t] = Σ_h w[b, h]·φ(U[b, h, t]) for kbegin[b] <= t < kend[b], else −inf (selected, so a
// NaN in a key row nobody may see stays out). −0 is stored as +0 so that the sort sees one zero.
// vals[b, t] = t (the sort's payload).
template <class R> void indexer_scores(const R* U, const R* w, const int32_t* kbegin, const int32_t* kend,
                                       int64_t B, int64_t HI, int64_t Tp, bool relu, R* scores, int32_t* vals);

// ---- top-k (topk.cu) ----
// Per row b, the visible segment [b·Tp + kbegin, b·Tp + kend) sorted by score descending, ties in
// ascending key order (a stable sort of keys given in ascending order), first min(Kw, n) keys
// written to topk[b, :], the rest −1.
template <class R>
class TopkSorter {
 public:
  TopkSorter(int64_t max_rows, int64_t Tp);
  ~TopkSorter();
  TopkSorter(const TopkSorter&) = delete;
  TopkSorter& operator=(const TopkSorter&) = delete;
  void run(const R* scores, const int32_t* vals, const int32_t* kbegin, const int32_t* kend, int64_t B,
           int64_t Kw, int32_t* topk);

 private:
  int64_t max_rows_, tp_;
  void* temp_ = nullptr;
  size_t temp_bytes_ = 0;
  R* keys_out_ = nullptr;
  int32_t* vals_out_ = nullptr;
  int64_t* seg_begin_ = nullptr;
  int64_t* seg_end_ = nullptr;
};

// ---- gather / scatter of key rows (gather_scatter.cu) ----
// dst[b, j, :] = src[key(b, j), :] (cols wide, row stride lds) for j < count[b], 0 otherwise.
template <class R> void gather_keys(const RowKeys& k, const R* src, int64_t lds, int64_t cols, R* dst);
// dst[key(b, j), :] += rows[b, j, :] for j < count[b] (atomic: keys repeat across rows).
template <class R> void scatter_add_keys(const RowKeys& k, const R* rows, int64_t cols, R* dst, int64_t ldd);
// Per-slot values of a chunk ↔ the key sets' CSR order (list form): packed[offset[b] + j] =
// padded[b, j] for j < count[b]; unpack writes 0 to the padded slots.
template <class R> void pack_rows(const RowKeys& k, const R* padded, R* packed);
template <class R> void unpack_rows(const RowKeys& k, const R* packed, R* padded);

// ---- softmax over each row's keys (softmax_rows.cu) ----
// For every (b, h): with l = x[b, h, :count[b]], norm = lse_in[b, h] when lse_in is given, else
// log Σ exp(l) (max-shifted). x becomes exp(l − norm) (fp, the P of the backward and A_h of the
// loss), Pb (when given) bf(exp(l − norm)), lse_out (when given) norm. Padded slots become 0; an
// empty row gives norm −inf and P = 0, never NaN. lse rows are [B, H] with stride H.
template <class R> void softmax_rows(R* x, R* Pb, const int32_t* count, int64_t B, int64_t H, int64_t kmax,
                                     const R* lse_in, R* lse_out);

// ---- attention forward (attention_forward.cu) ----
// Qt[b, h, C:] = q_pe[b, h, :] (the rope half of Q~; the nope half is a GEMM).
template <class R> void place_q_pe(const R* q_pe, int64_t B, int64_t H, int64_t C, int64_t Rr, R* Qt);
// Explicit path: logit[b, h, j] = s·(q_nope[b,h]·k_nope[t,h] + q_pe[b,h]·k_pe[t]), 0 on padding.
template <class R> void explicit_logits(const RowKeys& k, const R* q_nope, const R* q_pe, const R* k_nope,
                                        const R* k_pe, int64_t H, int64_t Dn, int64_t Rr, R s, R* logits);
// Explicit path: O[b, h, :] = Σ_j Pb[b, h, j]·v[key, h, :] (not rounded here).
template <class R> void explicit_output(const RowKeys& k, const R* Pb, const R* v, int64_t H, int64_t Dv, R* O);

// ---- attention backward (attention_backward.cu) ----
// out[r] = a[r, :]·b[r, :] over n rows of len (Δ = dO_lat·O_lat, or dO·O on the explicit path).
template <class R> void row_dots(const R* a, const R* b, int64_t n, int64_t len, R* out);
// Per (b, h): Δ = Σ_j P[b, h, j]·dP[b, h, j] over j < count[b], then dl[b, h, j] = bf(P·(dP − Δ)) in
// place of dP (0 on padding), Δ stored in delta. In exact arithmetic Σ P·dP equals dO·O, and it is
// exactly dP of the key that holds all the weight where P is one-hot (one key, or a saturated
// softmax), so dP − Δ is then exactly 0 as in the CPU reference (a separately summed dO·O differs
// from dP by rounding). The exact policy's Δ everywhere; under the bf16 policy (Δ = dO_lat·O_lat,
// O_lat rounded, given in delta) it equals that only on one-hot rows, so one_hot_only replaces
// the given row dot there alone.
template <class R> void dlogit_rows(const R* P, R* dP_dl, const int32_t* count, int64_t B, int64_t H, int64_t kmax,
                                    bool one_hot_only, R* delta);
// The exact run's Δ slack terms per (b, h) (core/result.hpp DeltaSlack), with dP still in dP:
// slack_nope[b·H + h], slack_pe[b·H + h]. dOx, Ox: dO_lat, O_lat (width C; W_norm = row_norm_max
// of W_UK) or, on the explicit path, dO, O (width Dv; W_norm null, k_nope [Tp, H, Dn] instead).
// The key side (ks): for each of the row's keys, ks.key_nope[key] += P·noise·max|Q~[:C]| and
// ks.key_pe[key] += P·noise·max|Q~[C:]| (atomic; [Tp], zeroed by the caller), from the chunk's Q~
// [B, H, C+R] (absorbed) or its q_nope [B, H, Dn] through W_col[h] = col_norm_max of W_UK and its
// q_pe [B, H, Rr] (explicit).
template <class R>
struct KeySlack {
  const R* Qt;
  const R* q_nope;
  const R* q_pe;
  const R* W_col;
  R* key_nope;
  R* key_pe;
};
template <class R>
void delta_slack(const RowKeys& k, const R* P, const R* dP, int64_t H, const R* Kg, int64_t C, int64_t Rr,
                 const R* dOx, const R* Ox, int64_t width, const R* W_norm, const R* k_nope, int64_t Dn, R s,
                 R* slack_nope, R* slack_pe, const KeySlack<R>& ks);
// out[h] = max over d < rows of ‖W[h, d, :len]‖.
template <class R> void row_norm_max(const R* W, int64_t heads, int64_t rows, int64_t len, R* out);
// out[h] = max over c < len of ‖W[h, :rows, c]‖.
template <class R> void col_norm_max(const R* W, int64_t heads, int64_t rows, int64_t len, R* out);
// Explicit path: dP[b, h, j] = dO[b, h]·v[key, h].
template <class R> void explicit_dP(const RowKeys& k, const R* dO, const R* v, int64_t H, int64_t Dv, R* dP);
// Explicit path: dq_nope[b, h, :] = bf(s Σ_j dl·k_nope[key, h]), dq_pe[b, h, :] = bf(s Σ_j dl·k_pe[key]).
template <class R> void explicit_dq(const RowKeys& k, const R* dl, const R* k_nope, const R* k_pe, int64_t H,
                                    int64_t Dn, int64_t Rr, R s, R* dq_nope, R* dq_pe);
// Explicit path, key side (atomic): dKn[t, h, :] += s·dl·q_nope[b, h]; dKpe[t, :] += s Σ_h dl·q_pe[b, h];
// dVv[t, h, :] += Pb·dO[b, h].
template <class R> void explicit_dkv(const RowKeys& k, const R* dl, const R* Pb, const R* q_nope, const R* q_pe,
                                     const R* dO, int64_t H, int64_t Dn, int64_t Rr, int64_t Dv, R s, R* dKn,
                                     R* dKpe, R* dVv);
// Absorbed path: dc[t, :] = bf(dKt[t, :C]), dk_pe[t, :] = bf(dKt[t, C:]) (dV~ is summed into the
// first C columns of dK~ as it is accumulated).
template <class R> void absorbed_key_grads(const R* dKt, int64_t Tp, int64_t C, int64_t Rr, R* dc, R* dk_pe);

// ---- indexer KL loss (kl_loss.cu) ----
// T[b, j] = Σ_h A[b, h, j] / max(Σ_j Σ_h A, 1e-10): the target, a constant.
template <class R> void kl_target(const R* A, const int32_t* count, int64_t B, int64_t H, int64_t kmax, R* T);
// Per row b: I[j] = Σ_h w[b,h]·φ(u[b,j,h]), logQ = log-softmax(I), kl[b] = Σ_{T>0} T·(log max(T,1e-10) − logQ),
// dI = scale·(Q − T), dw[b, h] = Σ_j dI·φ(u) (not rounded here), du[b, j, h] = bf(dI·w·φ'(u)).
// Rows with no keys give kl 0, dw 0, du 0. scratch holds [B, kmax].
template <class R> void kl_rows(const R* u, const R* w, const R* T, const int32_t* count, int64_t B, int64_t HI,
                                int64_t kmax, bool relu, R scale, R* kl, R* dw, R* du, R* scratch);
// The kink slack of SPEC.md §9 over one chunk (core/result.hpp KinkSlack), after kl_rows (dI: its
// scratch): terms with |u| ≤ band·‖q_I[g,h]‖·‖k_I[key]‖ (band = kink_band(DI, 1, 1)) add
// |dI·w|·max|k_I[key]| to their (row, head) and |dI·w|·max|q_I[g,h]| to key_slack[key];
// row_slack[b] is row b's largest head sum. kIg [B, kmax, DI], qI [B, HI, DI].
template <class R>
void kink_slack(const RowKeys& k, const R* u, const R* w, const R* dI, const R* kIg, const R* qI, int64_t HI,
                int64_t DI, R band, R* row_slack, R* key_slack);

}  // namespace dsa::gpu
