// Element types and reductions. Standard MPI types for float32/float64/int32/
// int64/uint8; float16 and bfloat16 travel as 16-bit words and are reduced by
// our own commutative MPI_Ops that widen to float32 and round back to nearest
// even. "mean" is not an MPI op: the caller reduces with sum, then divides.
#include <cmath>
#include <cstring>

#include "common.h"

namespace ulysses_mpi {

namespace {

MPI_Op halfSum = MPI_OP_NULL, halfMax = MPI_OP_NULL, bfloatSum = MPI_OP_NULL, bfloatMax = MPI_OP_NULL;

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return sign | (magnitude > 0x7f800000u ? 0x7e00 : 0x7c00);  // NaN, inf
  if (magnitude >= 0x47800000u) return sign | 0x7c00;                                       // >= 65536: inf
  if (magnitude < 0x38800000u) {                                                            // below 2^-14: subnormal
    float absolute;
    std::memcpy(&absolute, &magnitude, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(absolute * 16777216.0f));  // units of 2^-24, ties to even
  }
  uint32_t half = (magnitude - 0x38000000u) >> 13;  // rebias exponent 127 -> 15, keep 10 mantissa bits
  uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into inf: correct
  return sign | static_cast<uint16_t>(half);
}

float BfloatToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t FloatToBfloat(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), bool IsMax>
void Reduce16(void* in, void* inout, int* length, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *length; ++i) {
    float x = Widen(a[i]), y = Widen(b[i]);
    b[i] = Narrow(IsMax ? (x > y || std::isnan(x) ? x : y) : x + y);
  }
}

template <typename T>
void DivideTyped(void* data, size_t count, int divisor) {
  T* values = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / static_cast<T>(divisor));
}

}  // namespace

MPI_Datatype DatatypeOf(Napi::Env env, const std::string& dtype) {
  if (dtype == "float32") return MPI_FLOAT;
  if (dtype == "float64") return MPI_DOUBLE;
  if (dtype == "float16" || dtype == "bfloat16") return MPI_UINT16_T;
  if (dtype == "int32") return MPI_INT32_T;
  if (dtype == "int64") return MPI_INT64_T;
  if (dtype == "uint8") return MPI_UINT8_T;
  throw Napi::TypeError::New(env, "unknown dtype '" + dtype + "'");
}

size_t BytesPerElement(Napi::Env env, const std::string& dtype) {
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "uint8") return 1;
  throw Napi::TypeError::New(env, "unknown dtype '" + dtype + "'");
}

MPI_Op OpOf(Napi::Env env, const std::string& dtype, const std::string& op) {
  if (op != "sum" && op != "max") throw Napi::TypeError::New(env, "unknown reduction '" + op + "' (native ops: sum, max)");
  bool sum = op == "sum";
  if (dtype == "float16") return sum ? halfSum : halfMax;
  if (dtype == "bfloat16") return sum ? bfloatSum : bfloatMax;
  DatatypeOf(env, dtype);  // validates the name
  return sum ? MPI_SUM : MPI_MAX;
}

void CreateHalfOps() {
  MPI_Op_create(Reduce16<HalfToFloat, FloatToHalf, false>, 1, &halfSum);
  MPI_Op_create(Reduce16<HalfToFloat, FloatToHalf, true>, 1, &halfMax);
  MPI_Op_create(Reduce16<BfloatToFloat, FloatToBfloat, false>, 1, &bfloatSum);
  MPI_Op_create(Reduce16<BfloatToFloat, FloatToBfloat, true>, 1, &bfloatMax);
}

void FreeHalfOps() {
  for (MPI_Op* op : {&halfSum, &halfMax, &bfloatSum, &bfloatMax}) {
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  }
}

void DivideInPlace(void* data, size_t count, const std::string& dtype, int divisor) {
  if (divisor == 1) return;
  if (dtype == "float32") return DivideTyped<float>(data, count, divisor);
  if (dtype == "float64") return DivideTyped<double>(data, count, divisor);
  if (dtype == "int32") return DivideTyped<int32_t>(data, count, divisor);
  if (dtype == "int64") return DivideTyped<int64_t>(data, count, divisor);
  if (dtype == "uint8") return DivideTyped<uint8_t>(data, count, divisor);
  uint16_t* words = static_cast<uint16_t*>(data);
  bool half = dtype == "float16";
  for (size_t i = 0; i < count; ++i) {
    float value = (half ? HalfToFloat(words[i]) : BfloatToFloat(words[i])) / static_cast<float>(divisor);
    words[i] = half ? FloatToHalf(value) : FloatToBfloat(value);
  }
}

}  // namespace ulysses_mpi
