#include "core/types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <ostream>
#include <string>

namespace minfer {
namespace {

struct TypeName {
  TensorType type;
  std::string_view name;
};

// Names as ggml prints them (ggml.c type_traits[].type_name).
constexpr std::array<TypeName, 35> kNames{{
    {TensorType::F32, "f32"},         {TensorType::F16, "f16"},
    {TensorType::Q4_0, "q4_0"},       {TensorType::Q4_1, "q4_1"},
    {TensorType::Q5_0, "q5_0"},       {TensorType::Q5_1, "q5_1"},
    {TensorType::Q8_0, "q8_0"},       {TensorType::Q8_1, "q8_1"},
    {TensorType::Q2_K, "q2_K"},       {TensorType::Q3_K, "q3_K"},
    {TensorType::Q4_K, "q4_K"},       {TensorType::Q5_K, "q5_K"},
    {TensorType::Q6_K, "q6_K"},       {TensorType::Q8_K, "q8_K"},
    {TensorType::IQ2_XXS, "iq2_xxs"}, {TensorType::IQ2_XS, "iq2_xs"},
    {TensorType::IQ3_XXS, "iq3_xxs"}, {TensorType::IQ1_S, "iq1_s"},
    {TensorType::IQ4_NL, "iq4_nl"},   {TensorType::IQ3_S, "iq3_s"},
    {TensorType::IQ2_S, "iq2_s"},     {TensorType::IQ4_XS, "iq4_xs"},
    {TensorType::I8, "i8"},           {TensorType::I16, "i16"},
    {TensorType::I32, "i32"},         {TensorType::I64, "i64"},
    {TensorType::F64, "f64"},         {TensorType::IQ1_M, "iq1_m"},
    {TensorType::BF16, "bf16"},       {TensorType::TQ1_0, "tq1_0"},
    {TensorType::TQ2_0, "tq2_0"},     {TensorType::MXFP4, "mxfp4"},
    {TensorType::NVFP4, "nvfp4"},     {TensorType::Q1_0, "q1_0"},
    {TensorType::Q2_0, "q2_0"},
}};

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::string_view type_name(TensorType t) {
  for (const auto& n : kNames)
    if (n.type == t) return n.name;
  static thread_local std::string unknown;
  unknown = "type#" + std::to_string(static_cast<uint32_t>(t));
  return unknown;
}

std::optional<TensorType> parse_type_name(std::string_view name) {
  for (const auto& n : kNames)
    if (iequal(n.name, name)) return n.type;
  return std::nullopt;
}

bool is_known_type_id(uint32_t v) {
  return std::any_of(kNames.begin(), kNames.end(),
                     [v](const TypeName& n) { return static_cast<uint32_t>(n.type) == v; });
}

std::ostream& operator<<(std::ostream& os, TensorType t) { return os << type_name(t); }

}  // namespace minfer
