#include "core/result.hpp"

#include <bit>
#include <cstdint>

namespace dsa {

namespace {
const char* const kFloatNames[] = {"O",     "O_lat", "lse",   "kl",  "loss", "dq_nope", "dq_pe",
                                   "dW_UK", "dW_UV", "dc",    "dk_pe", "dq_I", "dk_I",   "dw"};
}

void Result::for_each_float(const std::function<void(const std::string&, TensorD&)>& f) {
  TensorD* t[] = {&O, &O_lat, &lse, &kl, &loss, &dq_nope, &dq_pe, &dW_UK, &dW_UV, &dc, &dk_pe, &dq_I, &dk_I, &dw};
  for (int i = 0; i < 14; ++i) f(kFloatNames[i], *t[i]);
}

void Result::for_each_float(const std::function<void(const std::string&, const TensorD&)>& f) const {
  const TensorD* t[] = {&O, &O_lat, &lse, &kl, &loss, &dq_nope, &dq_pe, &dW_UK, &dW_UV, &dc, &dk_pe, &dq_I, &dk_I, &dw};
  for (int i = 0; i < 14; ++i) f(kFloatNames[i], *t[i]);
}

namespace {
constexpr uint64_t kUnwrittenBits = 0x7FF8DEADBEEF0001ull;  // a quiet NaN with a marked payload
}

double unwritten_value() { return std::bit_cast<double>(kUnwrittenBits); }
bool is_unwritten(double x) { return std::bit_cast<uint64_t>(x) == kUnwrittenBits; }

}  // namespace dsa
