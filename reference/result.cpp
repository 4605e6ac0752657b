#include "reference/result.hpp"

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

}  // namespace dsa
