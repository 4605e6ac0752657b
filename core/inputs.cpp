#include "core/inputs.hpp"

#include "core/errors.hpp"

namespace dsa {

namespace {
const char* const kNames[] = {"q_nope", "q_pe", "c", "k_pe", "W_UK", "W_UV", "q_I", "k_I", "w", "dO"};
}

void Inputs::for_each(const std::function<void(const std::string&, TensorD&)>& f) {
  TensorD* t[] = {&q_nope, &q_pe, &c, &k_pe, &W_UK, &W_UV, &q_I, &k_I, &w, &dO};
  for (int i = 0; i < 10; ++i) f(kNames[i], *t[i]);
}

void Inputs::for_each(const std::function<void(const std::string&, const TensorD&)>& f) const {
  const TensorD* t[] = {&q_nope, &q_pe, &c, &k_pe, &W_UK, &W_UV, &q_I, &k_I, &w, &dO};
  for (int i = 0; i < 10; ++i) f(kNames[i], *t[i]);
}

Shape input_shape(const std::string& n, const Dims& d, int64_t tp) {
  if (n == "q_nope") return {tp, d.H, d.Dn};
  if (n == "q_pe") return {tp, d.H, d.R};
  if (n == "c") return {tp, d.C};
  if (n == "k_pe") return {tp, d.R};
  if (n == "W_UK") return {d.H, d.Dn, d.C};
  if (n == "W_UV") return {d.H, d.Dv, d.C};
  if (n == "q_I") return {tp, d.HI, d.DI};
  if (n == "k_I") return {tp, d.DI};
  if (n == "w") return {tp, d.HI};
  if (n == "dO") return {tp, d.H, d.Dv};
  throw InvalidInput(n, "is not an input tensor of SPEC.md §0");
}

Inputs zero_inputs(const Dims& d, int64_t tp) {
  Inputs in;
  in.for_each([&](const std::string& n, TensorD& t) { t = TensorD(input_shape(n, d, tp)); });
  return in;
}

void check_shapes(const Inputs& in, const Dims& d, int64_t tp) {
  in.for_each([&](const std::string& n, const TensorD& t) {
    Shape want = input_shape(n, d, tp);
    require(t.shape == want && t.size() == numel(want), n,
            "must have shape " + shape_str(want) + ", got " + shape_str(t.shape));
  });
}

}  // namespace dsa
