#include "core/inputs.hpp"

#include <stdexcept>

#include "core/catalogue.hpp"
#include "core/errors.hpp"

namespace dsa {

namespace {

// The members in the catalogue's input order (checked once against the catalogue's names).
constexpr TensorD Inputs::*kMembers[] = {&Inputs::q_nope, &Inputs::q_pe, &Inputs::c,   &Inputs::k_pe, &Inputs::W_UK,
                                         &Inputs::W_UV,   &Inputs::q_I,  &Inputs::k_I, &Inputs::w,    &Inputs::dO};
constexpr const char* kMemberNames[] = {"q_nope", "q_pe", "c", "k_pe", "W_UK", "W_UV", "q_I", "k_I", "w", "dO"};

const std::vector<const TensorSpec*>& specs() {
  static const std::vector<const TensorSpec*> s = [] {
    auto v = input_specs();
    if (v.size() != std::size(kMembers)) throw std::logic_error("Inputs and the tensor catalogue disagree");
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i]->name != kMemberNames[i]) throw std::logic_error("Inputs and the tensor catalogue disagree");
    return v;
  }();
  return s;
}

}  // namespace

void Inputs::for_each(const std::function<void(const std::string&, TensorD&)>& f) {
  for (size_t i = 0; i < specs().size(); ++i) f(std::string(specs()[i]->name), this->*kMembers[i]);
}

void Inputs::for_each(const std::function<void(const std::string&, const TensorD&)>& f) const {
  for (size_t i = 0; i < specs().size(); ++i) f(std::string(specs()[i]->name), this->*kMembers[i]);
}

Shape input_shape(const std::string& n, const Dims& d, int64_t tp) {
  const TensorSpec* t = find_tensor(n);
  if (!t || t->role != Role::input) throw InvalidInput(n, "is not an input tensor of SPEC.md §0");
  return shape_of(*t, d, tp, 1);
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
