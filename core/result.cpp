#include "core/result.hpp"

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "core/catalogue.hpp"

namespace dsa {

namespace {

// The float results of the catalogue (every result but the optional scores and the integer topk),
// in catalogue order, and the member holding each.
struct FloatMember {
  std::string name;
  TensorD Result::*member;
};

TensorD Result::*member_of(std::string_view n) {
  static const std::pair<const char*, TensorD Result::*> m[] = {
      {"O", &Result::O},         {"O_lat", &Result::O_lat}, {"lse", &Result::lse},     {"kl", &Result::kl},
      {"loss", &Result::loss},   {"dq_nope", &Result::dq_nope}, {"dq_pe", &Result::dq_pe}, {"dW_UK", &Result::dW_UK},
      {"dW_UV", &Result::dW_UV}, {"dc", &Result::dc},       {"dk_pe", &Result::dk_pe}, {"dq_I", &Result::dq_I},
      {"dk_I", &Result::dk_I},   {"dw", &Result::dw}};
  for (auto& [name, member] : m)
    if (n == name) return member;
  throw std::logic_error("Result has no member for catalogue tensor " + std::string(n));
}

const std::vector<FloatMember>& float_members() {
  static const std::vector<FloatMember> v = [] {
    std::vector<FloatMember> out;
    for (const TensorSpec* t : result_specs())
      if (t->dtype != DType::i32 && !t->optional) out.push_back({std::string(t->name), member_of(t->name)});
    return out;
  }();
  return v;
}

}  // namespace

void Result::for_each_float(const std::function<void(const std::string&, TensorD&)>& f) {
  for (const FloatMember& m : float_members()) f(m.name, this->*m.member);
}

void Result::for_each_float(const std::function<void(const std::string&, const TensorD&)>& f) const {
  for (const FloatMember& m : float_members()) f(m.name, this->*m.member);
}

double unwritten_value() { return std::bit_cast<double>(kUnwrittenBits); }
bool is_unwritten(double x) { return std::bit_cast<uint64_t>(x) == kUnwrittenBits; }

}  // namespace dsa
