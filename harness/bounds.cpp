#include "harness/bounds.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "harness/text.hpp"
#include "core/errors.hpp"

namespace dsa {

namespace {

using u128 = unsigned __int128;

constexpr u128 kMaxRows = INT32_MAX;             // Tp ≤ 2^31 − 1: indices are int32
constexpr u128 kMaxScoreElements = u128(1) << 22;  // reference/core.hpp: max_score_elements
constexpr u128 kHeaderAllowance = 1 << 20;

std::string str(u128 x) {
  if (x == 0) return "0";
  std::string s;
  while (x) {
    s.insert(s.begin(), char('0' + int(x % 10)));
    x /= 10;
  }
  return s;
}

u128 roundup(u128 x, u128 m) { return m == 0 ? x : (x + m - 1) / m * m; }
u128 tri(u128 n) { return n * (n + 1) / 2; }  // Σ_{pos<n} (pos+1)

// Rows are capped long before any product here overflows 128 bits: a padded segment is at most
// 2^63 · 2 (cp ≤ 2^62), and products are only taken once Tp < 2^31.
bool basic_rules_hold(const Problem& p) {
  if (p.seqlens.empty() || p.cp.size < 1 || p.cp.pad_multiple < 0 || p.topk < 1) return false;
  for (int64_t len : p.seqlens)
    if (len < 0) return false;
  const Dims& d = p.dims;
  for (int64_t v : {d.H, d.Dn, d.R, d.C, d.Dv, d.HI, d.DI})
    if (v < 1) return false;
  if (p.cp.size > (int64_t{1} << 40)) return true;  // refused below, before any product
  if (p.cp.layout == Layout::zigzag && p.cp.effective_pad_multiple() % (2 * p.cp.size) != 0) return false;
  return true;
}

}  // namespace

uint64_t default_max_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return uint64_t{8} << 30;
  return uint64_t(pages) * uint64_t(page) / 2;
}

Limits& limits() {
  static Limits l;
  return l;
}

uint64_t effective_max_bytes(const Limits& l) { return l.max_bytes ? l.max_bytes : default_max_bytes(); }

Footprint footprint(const Problem& p) {
  Footprint f;
  if (!basic_rules_hold(p)) return f;
  const u128 cp = u128(p.cp.size);
  if (cp > (u128(1) << 40)) {  // no layout of that many ranks fits anywhere
    f.computable = true;
    f.rows = ~u128(0) >> 1;
    return f;
  }
  f.computable = true;
  const bool zigzag = p.cp.layout == Layout::zigzag, masked = p.pad_rows == PadRows::masked;
  const u128 m = p.cp.pad_multiple > 0 ? u128(p.cp.pad_multiple) : zigzag ? 2 * cp : 1;
  u128 segments = 0;
  for (int64_t len : p.seqlens) {
    const u128 L = u128(len), P = zigzag ? roundup(L, m) : L;
    f.real_rows += L;
    f.rows += P;
    f.pairs += masked ? tri(L) : tri(P);
    ++segments;
  }
  if (!zigzag) {  // the whole stream padded at its end: one extra pad segment of its own
    const u128 padded = roundup(f.rows, cp * m), pad = padded - f.rows;
    if (pad) {
      ++segments;
      if (!masked) f.pairs += tri(pad);
    }
    f.rows = padded;
  }
  if (f.rows > kMaxRows) return f;
  const u128 tp = f.rows;
  f.tp = int64_t(tp);
  const Dims& d = p.dims;
  const u128 H = d.H, Dn = d.Dn, R = d.R, C = d.C, Dv = d.Dv, HI = d.HI, DI = d.DI;
  const u128 K = std::min<u128>(u128(p.topk), tp);
  const u128 per_row_in = H * Dn + H * R + C + R + HI * DI + DI + HI + H * Dv;
  const u128 weights = H * Dn * C + H * Dv * C;
  // Forward outputs (O, O_lat, lse, kl, topk) and the gradients (dq_nope, dq_pe, dc, dk_pe, dq_I, dk_I, dw).
  const u128 per_row_out = H * Dv + H * C + H + 1 + K + (H * Dn + H * R + C + R + HI * DI + DI + HI);
  const u128 scores = tp * tp <= kMaxScoreElements ? tp * tp : 0;
  f.output_elements = tp * per_row_out + weights + 1 + scores;
  const u128 row_part = 8 * tp * (per_row_in + 3 * per_row_out), weight_part = 8 * 4 * weights;
  const u128 layout_part = tp * (4 + 1 + 8) + cp * 24 + segments * 16;
  f.bytes = row_part + weight_part + 8 * 3 * scores + layout_part;
  // The field to name: whatever makes the biggest part big.
  if (layout_part > row_part && layout_part > weight_part)
    f.bytes_field = p.cp.pad_multiple > 0 && !zigzag ? "cp.pad_multiple" : "cp.size";
  else if (weight_part >= row_part || per_row_in + per_row_out >= tp)
    f.bytes_field = "dims";
  else if (tp > 2 * f.real_rows + 2)
    f.bytes_field = p.cp.pad_multiple > 0 ? "cp.pad_multiple" : "cp.size";
  else
    f.bytes_field = "seqlens";
  return f;
}

void check_bounds(const Problem& p, const Limits& l) {
  const Footprint f = footprint(p);
  if (!f.computable) return;
  if (f.rows > kMaxRows) {
    const bool by_padding = f.real_rows <= kMaxRows;
    const std::string field = !by_padding ? "seqlens" : p.cp.pad_multiple > 0 ? "cp.pad_multiple" : "cp.size";
    throw InvalidInput(field, "the padded stream would hold " + str(f.rows) + " rows (" + str(f.real_rows) +
                                  " real), at most 2^31 - 1: top-k indices are int32 (a hard limit)");
  }
  const u128 max_bytes = effective_max_bytes(l);
  if (f.bytes > max_bytes)
    throw InvalidInput(f.bytes_field, "the case needs about " + str(f.bytes) + " bytes of tensors (Tp = " +
                                          std::to_string(f.tp) + "), more than the limit of " + str(max_bytes) +
                                          " (raise it with --max-bytes)");
  if (f.pairs > l.max_pairs)
    throw InvalidInput("seqlens", "the indexer would score " + str(f.pairs) + " visible (query, key) pairs, more than " +
                                      str(l.max_pairs) + " (raise the limit with --max-pairs)");
}

uint64_t max_outputs_file_bytes(const Problem& p) {
  const Footprint f = footprint(p);
  const u128 b = f.output_elements * 8 + kHeaderAllowance;
  return b > UINT64_MAX ? UINT64_MAX : uint64_t(b);
}

uint64_t max_inputs_file_bytes(const Problem& p) {
  const Footprint f = footprint(p);
  const Dims& d = p.dims;
  const u128 tp = u128(f.tp);
  const u128 per_row = u128(d.H) * (d.Dn + d.R + d.Dv) + d.C + d.R + u128(d.HI) * d.DI + d.DI + d.HI;
  const u128 weights = u128(d.H) * d.Dn * d.C + u128(d.H) * d.Dv * d.C;
  const u128 b = 2 * (tp * per_row + weights) + 4 * (tp * (2 + std::min<u128>(u128(p.topk), tp)) + p.seqlens.size() + 2) +
                 kHeaderAllowance;
  return b > UINT64_MAX ? UINT64_MAX : uint64_t(b);
}

uint64_t parse_byte_count(const std::string& text, const std::string& field) {
  uint64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  auto [end, ec] = std::from_chars(b, e, v);
  uint64_t mul = 1;
  if (ec == std::errc() && end + 1 == e) {
    switch (*end) {
      case 'K': case 'k': mul = uint64_t{1} << 10; break;
      case 'M': case 'm': mul = uint64_t{1} << 20; break;
      case 'G': case 'g': mul = uint64_t{1} << 30; break;
      case 'T': case 't': mul = uint64_t{1} << 40; break;
      default: mul = 0;
    }
    end = e;
  }
  require(ec == std::errc() && end == e && mul != 0 && !text.empty(), field,
          "must be a number of bytes (optionally with K, M, G or T), got " + text::quoted(text));
  require(v >= 1 && v <= UINT64_MAX / mul, field, "must be at least 1 and below 2^64 bytes");
  return v * mul;
}

}  // namespace dsa
