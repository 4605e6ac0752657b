// Case JSON (dsa-parity/case/v1): parse, validate, save, describe. Every refusal names the JSON
// path of the field and the rule it breaks.
#include <cerrno>
#include <cstdlib>
#include "harness/case.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "core/layout.hpp"
#include "harness/bounds.hpp"
#include "harness/safe_file.hpp"
#include "harness/strict_json.hpp"
#include "harness/text.hpp"

namespace dsa {

using nlohmann::json;

namespace {

std::string join(const std::string& base, const std::string& key) { return base.empty() ? key : base + "." + key; }

std::string got(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a number with a fraction";
  return std::string("a") + (v.is_array() || v.is_object() ? "n " : " ") + v.type_name();
}

// An object whose keys must all be known.
const json& object_at(const json& v, const std::string& path, std::initializer_list<const char*> known) {
  require(v.is_object(), path.empty() ? "case" : path, "must be a JSON object, got " + got(v));
  for (auto it = v.begin(); it != v.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    require(ok, join(path, text::one_line(it.key(), 80)), "unknown field");
  }
  return v;
}

const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

int64_t as_int(const json& v, const std::string& path) {
  require(v.is_number_integer(), path, "must be an integer, got " + got(v));
  require(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX), path, "is out of range");
  return v.get<int64_t>();
}

// An integer field with an upper bound that keeps allocations sane.
int64_t bounded_int(const json& v, const std::string& path, int64_t max_value) {
  const int64_t x = as_int(v, path);
  require(x <= max_value, path, "must be at most " + std::to_string(max_value) + ", got " + std::to_string(x));
  return x;
}

double as_number(const json& v, const std::string& path) {
  require(v.is_number(), path, "must be a number, got " + got(v));
  return v.get<double>();
}

bool as_bool(const json& v, const std::string& path) {
  require(v.is_boolean(), path, "must be true or false, got " + got(v));
  return v.get<bool>();
}

std::string as_string(const json& v, const std::string& path) {
  require(v.is_string(), path, "must be a string, got " + got(v));
  return v.get<std::string>();
}

// A string that must be one of a few short names: capped first, so that an error quoting it
// quotes at most ~80 bytes of it (no valid name is that long).
std::string as_name(const json& v, const std::string& path) { return text::safe(as_string(v, path), 80); }

template <class F>
void opt(const json& obj, const char* key, const std::string& path, F&& set) {
  if (const json* v = member(obj, key)) set(*v, join(path, key));
}

constexpr int64_t kMaxDim = 65536;
constexpr int64_t kMaxCp = 1024;
constexpr int64_t kMaxElements = int64_t{1} << 32;  // all input tensors together

std::vector<std::string> stage_names(const std::vector<Stage>& stages) {
  std::vector<std::string> v;
  for (Stage s : stages) v.push_back(name(s));
  return v;
}

}  // namespace

Case case_from_json(const json& j) {
  object_at(j, "", {"schema", "seed", "seqlens", "cp", "dims", "topk", "softmax_scale", "relu", "loss", "path",
                    "pad_rows", "init", "stages", "note"});
  const json* schema = member(j, "schema");
  require(schema != nullptr, "schema", std::string("is required and must be \"") + kCaseSchema + "\"");
  require(schema->is_string() && schema->get<std::string>() == kCaseSchema, "schema",
          std::string("must be \"") + kCaseSchema + "\", got " +
              (schema->is_string() ? text::quoted(schema->get<std::string>()) : got(*schema)));

  Case c;
  Problem& p = c.problem;
  const json* seed = member(j, "seed");
  require(seed != nullptr, "seed", "is required (a non-negative integer)");
  if (seed->is_string()) {  // reports write seeds as strings of decimal digits (JSON numbers lose bits above 2^53)
    const std::string& t = seed->get_ref<const std::string&>();
    const bool digits = !t.empty() && t.size() <= 20 && t.find_first_not_of("0123456789") == std::string::npos;
    errno = 0;
    const unsigned long long x = digits ? std::strtoull(t.c_str(), nullptr, 10) : 0;
    require(digits && errno != ERANGE, "seed", "must be a non-negative integer below 2^64 (a number or a string of digits), got " + got(*seed));
    c.seed = x;
  } else {
    require(seed->is_number_unsigned() || (seed->is_number_integer() && seed->get<int64_t>() >= 0), "seed",
            "must be a non-negative integer below 2^64, got " + (seed->is_number_integer() ? seed->dump() : got(*seed)));
    c.seed = seed->get<uint64_t>();
  }

  const json* seqlens = member(j, "seqlens");
  require(seqlens != nullptr, "seqlens", "is required (a list of sequence lengths)");
  require(seqlens->is_array(), "seqlens", "must be an array of integers, got " + got(*seqlens));
  require(!seqlens->empty(), "seqlens", "must list at least one sequence");
  for (size_t i = 0; i < seqlens->size(); ++i) {
    const std::string f = "seqlens[" + std::to_string(i) + "]";
    const int64_t len = as_int((*seqlens)[i], f);
    require(len >= 0, f, "must be >= 0, got " + std::to_string(len));
    require(len <= INT32_MAX / 2, f, "must be at most 2^30, got " + std::to_string(len));
    p.seqlens.push_back(len);
  }

  opt(j, "cp", "", [&](const json& v, const std::string& path) {
    object_at(v, path, {"size", "layout", "pad_multiple"});
    opt(v, "size", path, [&](const json& x, const std::string& f) { p.cp.size = bounded_int(x, f, kMaxCp); });
    opt(v, "layout", path, [&](const json& x, const std::string& f) { p.cp.layout = parse_layout(as_name(x, f), f); });
    opt(v, "pad_multiple", path,
        [&](const json& x, const std::string& f) { p.cp.pad_multiple = bounded_int(x, f, 1 << 20); });
  });
  opt(j, "dims", "", [&](const json& v, const std::string& path) {
    object_at(v, path, {"H", "Dn", "R", "C", "Dv", "HI", "DI"});
    const std::pair<const char*, int64_t*> dims[] = {{"H", &p.dims.H},   {"Dn", &p.dims.Dn}, {"R", &p.dims.R},
                                                     {"C", &p.dims.C},   {"Dv", &p.dims.Dv}, {"HI", &p.dims.HI},
                                                     {"DI", &p.dims.DI}};
    for (auto& kv : dims) {  // (no structured binding: clang < 16 cannot capture one)
      int64_t* dst = kv.second;
      opt(v, kv.first, path, [&](const json& x, const std::string& f) { *dst = bounded_int(x, f, kMaxDim); });
    }
  });
  opt(j, "topk", "", [&](const json& v, const std::string& f) { p.topk = bounded_int(v, f, INT32_MAX); });
  const json* scale = member(j, "softmax_scale");
  require(scale != nullptr, "softmax_scale", "is required: pass it explicitly (Megatron: m^2/sqrt(Dn+R))");
  p.softmax_scale = as_number(*scale, "softmax_scale");
  opt(j, "relu", "", [&](const json& v, const std::string& f) { p.relu = as_bool(v, f); });
  opt(j, "loss", "", [&](const json& v, const std::string& path) {
    object_at(v, path, {"mode", "coeff"});
    opt(v, "mode", path, [&](const json& x, const std::string& f) { p.loss = parse_loss_mode(as_name(x, f), f); });
    opt(v, "coeff", path, [&](const json& x, const std::string& f) { p.coeff = as_number(x, f); });
  });
  opt(j, "path", "", [&](const json& v, const std::string& f) { p.path = parse_path(as_name(v, f), f); });
  opt(j, "pad_rows", "", [&](const json& v, const std::string& f) { p.pad_rows = parse_pad_rows(as_name(v, f), f); });

  InitSpec& in = c.init;
  opt(j, "init", "", [&](const json& v, const std::string& path) {
    object_at(v, path, {"distribution", "scale", "score_ties", "zero_rows", "large_logits", "huge_future_k_I",
                        "poison_pad_keys", "inject_indices", "hot_keys", "duplicate_indices"});
    opt(v, "distribution", path, [&](const json& x, const std::string& f) {
      in.distribution = as_string(x, f);
      require(in.distribution == "normal" || in.distribution == "uniform", f,
              "must be one of normal|uniform, got " + text::quoted(in.distribution));
    });
    opt(v, "scale", path, [&](const json& x, const std::string& f) {
      in.scale = as_number(x, f);
      require(std::isfinite(in.scale) && in.scale > 0 && in.scale <= 1e6, f, "must be finite, > 0 and <= 1e6");
    });
    const std::pair<const char*, bool*> flags[] = {{"score_ties", &in.score_ties},
                                                   {"zero_rows", &in.zero_rows},
                                                   {"large_logits", &in.large_logits},
                                                   {"huge_future_k_I", &in.huge_future_k_I},
                                                   {"poison_pad_keys", &in.poison_pad_keys},
                                                   {"inject_indices", &in.inject_indices},
                                                   {"hot_keys", &in.hot_keys},
                                                   {"duplicate_indices", &in.duplicate_indices}};
    for (auto& kv : flags) {
      bool* dst = kv.second;
      opt(v, kv.first, path, [&](const json& x, const std::string& f) { *dst = as_bool(x, f); });
    }
  });
  opt(j, "stages", "", [&](const json& v, const std::string& path) {
    require(v.is_array(), path, "must be an array of stage names, got " + got(v));
    require(!v.empty(), path, "must list at least one stage");
    c.stages.clear();
    std::string allowed;
    for (Stage s : kStages) allowed += (allowed.empty() ? "" : "|") + std::string(name(s));
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string f = path + "[" + std::to_string(i) + "]";
      const std::string s = as_string(v[i], f);
      const std::optional<Stage> st = parse_stage(s);
      require(st.has_value(), f, "unknown stage " + text::quoted(s) + ", must be one of " + allowed);
      require(!c.checks(*st), f, "stage '" + s + "' is listed twice");
      c.stages.push_back(*st);
    }
  });
  opt(j, "note", "", [&](const json& v, const std::string& f) { c.note = as_string(v, f); });

  // Bounds from the numbers alone (rows, bytes, visible pairs: harness/bounds.hpp) before any
  // layout is built, then the problem rules, then the layout's (lengths, cp, pad_multiple), then
  // the case's own.
  check_bounds(p);
  validate(p);
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  int64_t elements = 0;
  for (const char* n : {"q_nope", "q_pe", "c", "k_pe", "W_UK", "W_UV", "q_I", "k_I", "w", "dO"})
    elements += numel(input_shape(n, p.dims, L.tp));
  require(elements <= kMaxElements, "dims",
          "the inputs would hold " + std::to_string(elements) + " elements for Tp = " + std::to_string(L.tp) +
              ", at most 2^32");
  require(!in.poison_pad_keys || p.pad_rows == PadRows::masked, "init.poison_pad_keys",
          "requires pad_rows \"masked\": under \"attend\" pad rows are queries that see their own keys");
  require(!in.duplicate_indices || in.inject_indices, "init.duplicate_indices",
          "requires inject_indices: duplicates are made in the injected attention indices");
  return c;
}

Case load_case(const std::string& path) {
  // A case file is small: a regular file of at most 1 MiB, a symlink only into its own folder.
  SafeRead opt;
  opt.max_bytes = kMaxCaseFileBytes;
  opt.confine_to = std::filesystem::path(path).parent_path().string();
  if (opt.confine_to.empty()) opt.confine_to = ".";
  json j;
  try {
    j = parse_strict_json(read_file_safely(path, opt));
  } catch (const FileRefused& e) {
    throw InvalidInput("case", "the case file " + text::quoted(path, 200) + " " + e.rule);
  } catch (const JsonRefused& e) {
    if (e.field.empty()) throw InvalidInput("case", e.rule + " in " + text::quoted(path, 200));
    throw InvalidInput(e.field, e.rule);
  }
  return case_from_json(j);
}

bool Case::checks(Stage stage) const {
  return std::find(stages.begin(), stages.end(), stage) != stages.end();
}

json to_json(const Case& c) {
  const Problem& p = c.problem;
  const Dims& d = p.dims;
  const InitSpec& in = c.init;
  json j = {
      {"schema", kCaseSchema},
      {"seed", c.seed},
      {"seqlens", p.seqlens},
      {"cp", {{"size", p.cp.size}, {"layout", name(p.cp.layout)}, {"pad_multiple", p.cp.pad_multiple}}},
      {"dims", {{"H", d.H}, {"Dn", d.Dn}, {"R", d.R}, {"C", d.C}, {"Dv", d.Dv}, {"HI", d.HI}, {"DI", d.DI}}},
      {"topk", p.topk},
      {"softmax_scale", p.softmax_scale},
      {"relu", p.relu},
      {"loss", {{"mode", name(p.loss)}, {"coeff", p.coeff}}},
      {"path", name(p.path)},
      {"pad_rows", name(p.pad_rows)},
      {"init",
       {{"distribution", in.distribution},
        {"scale", in.scale},
        {"score_ties", in.score_ties},
        {"zero_rows", in.zero_rows},
        {"large_logits", in.large_logits},
        {"huge_future_k_I", in.huge_future_k_I},
        {"poison_pad_keys", in.poison_pad_keys},
        {"inject_indices", in.inject_indices}}},
      {"stages", stage_names(c.stages)},
  };
  if (in.hot_keys) j["init"]["hot_keys"] = true;
  if (in.duplicate_indices) j["init"]["duplicate_indices"] = true;
  if (!c.note.empty()) j["note"] = c.note;
  return j;
}

void save_case(const Case& c, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  require(f.good(), path, "cannot write the case file");
  f << to_json(c).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  require(f.good(), path, "writing the case file failed");
}

std::string describe(const Case& c) {
  const Problem& p = c.problem;
  const Dims& d = p.dims;
  std::ostringstream o;
  o << "dsa(seed=" << c.seed << " seqlens=";
  for (size_t i = 0; i < p.seqlens.size(); ++i) o << (i ? "," : "") << p.seqlens[i];
  o << " cp=" << p.cp.size << "/" << name(p.cp.layout);
  if (p.cp.pad_multiple) o << "/pad" << p.cp.pad_multiple;
  o << " H=" << d.H << " Dn=" << d.Dn << " R=" << d.R << " C=" << d.C << " Dv=" << d.Dv << " HI=" << d.HI
    << " DI=" << d.DI << " K=" << p.topk << " loss=" << name(p.loss);
  if (p.loss != LossMode::off && p.coeff != 1.0) o << "*" << p.coeff;
  o << " pad=" << name(p.pad_rows);
  if (p.path == Path::explicit_) o << " explicit";
  if (!p.relu) o << " no-relu";
  const InitSpec& in = c.init;
  if (in.distribution != "normal") o << " " << in.distribution;
  if (in.scale != 1.0) o << " scale=" << in.scale;
  if (in.score_ties) o << " ties";
  if (in.zero_rows) o << " zero-rows";
  if (in.large_logits) o << " large-logits";
  if (in.huge_future_k_I) o << " huge-future-kI";
  if (in.poison_pad_keys) o << " poison-pads";
  if (in.inject_indices) o << " inject";
  if (in.duplicate_indices) o << " dup-indices";
  if (in.hot_keys) o << " hot-keys";
  if (c.stages != all_stages()) {
    o << " stages=";
    for (size_t i = 0; i < c.stages.size(); ++i) o << (i ? "," : "") << name(c.stages[i]);
  }
  o << ")";
  return o.str();
}

}  // namespace dsa
