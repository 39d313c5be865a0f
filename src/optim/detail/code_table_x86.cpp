// CodeTable's vector paths on x86-64: AVX-512 (with VBMI's byte permutes for the code values) and
// AVX2, each compiled for its instruction set alone and picked at run time. The same integer key
// arithmetic and IEEE float operations as the scalar path (code_table.cpp), lane by lane; no FMA.
#include "optim/detail/code_table_kernels.hpp"

#include "optim/detail/code_table.hpp"
#include "optim/detail/quantized_math.hpp"

#include <cstdlib>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace frugal::detail {
namespace {

int64_t none_quantize(const CodeTable&, const float*, float, bool, uint8_t*, int64_t) { return 0; }
int64_t none_dequantize(const CodeTable&, const uint8_t*, float, float*, int64_t) { return 0; }
int64_t none_scan(const float*, int64_t, float* max, bool* nonfinite) {
  *max = 0.0f;
  *nonfinite = false;
  return 0;
}
constexpr VectorKernels kScalar{"scalar", none_quantize, none_dequantize, none_scan};

#if defined(__x86_64__)

constexpr uint32_t kLowest = CodeTable::kLowest, kOne = CodeTable::kOne;
constexpr int kKeys = CodeTable::kKeys;

// ---- AVX-512 (F, BW, VBMI) ----
#define FRUGAL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

// CodeTable::code_of(normed(x, absmax)) for 16 values. `Finite`: every x is finite, so x / absmax
// already lies in [-1, 1] (|x| <= absmax) and needs no clamping. `Signed`: the map has negative
// codes; the unsigned map clamps below at 0 (its first code) instead. (Reading the buckets with
// 16 plain loads instead of the gather measured the same on Zen 4.)
template <bool Signed, bool Finite>
FRUGAL_AVX512 inline __m512i codes_16(const uint32_t* buckets, __m512 x, __m512 absmax, bool zero_max) {
  __m512 y = zero_max ? _mm512_setzero_ps() : _mm512_div_ps(x, absmax);
  if constexpr (!Finite) {
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), _mm512_setzero_ps());
    y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(-1.0f)), _mm512_set1_ps(1.0f));
  }
  if constexpr (!Signed) y = _mm512_max_ps(y, _mm512_setzero_ps());  // also -0 -> +0
  const __m512i bits = _mm512_castps_si512(y);
  __m512i magnitude = Signed ? _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)) : bits;
  magnitude = _mm512_sub_epi32(_mm512_min_epu32(_mm512_max_epu32(magnitude, _mm512_set1_epi32(static_cast<int>(kLowest))),
                                                _mm512_set1_epi32(static_cast<int>(kOne))),
                               _mm512_set1_epi32(static_cast<int>(kLowest)));
  __m512i key = _mm512_srli_epi32(magnitude, 16);
  __m512i low = _mm512_and_si512(magnitude, _mm512_set1_epi32(0xffff));
  if constexpr (Signed) {
    const __m512i negative = _mm512_srai_epi32(bits, 31);  // all ones for a negative value
    key = _mm512_add_epi32(key, _mm512_and_si512(negative, _mm512_set1_epi32(kKeys)));
    low = _mm512_xor_si512(low, _mm512_and_si512(negative, _mm512_set1_epi32(0xffff)));
  }
  const __m512i bucket = _mm512_i32gather_epi32(key, buckets, 4);
  const __m512i count = _mm512_and_si512(bucket, _mm512_set1_epi32(0xff));
  const __mmask16 up = _mm512_cmpge_epu32_mask(low, _mm512_srli_epi32(bucket, 8));
  return _mm512_mask_add_epi32(count, up, count, _mm512_set1_epi32(1));
}

template <bool Signed, bool Finite>
FRUGAL_AVX512 int64_t avx512_quantize_as(const CodeTable& table, const float* x, float absmax, uint8_t* out, int64_t len) {
  const __m512 divisor = _mm512_set1_ps(absmax);
  const bool zero_max = !(absmax > 0.0f);
  const int64_t whole = len / 16 * 16;
  for (int64_t i = 0; i < whole; i += 16) {
    const __m512i codes = codes_16<Signed, Finite>(table.buckets(), _mm512_loadu_ps(x + i), divisor, zero_max);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(codes));
  }
  return whole;
}

int64_t avx512_quantize(const CodeTable& table, const float* x, float absmax, bool finite, uint8_t* out, int64_t len) {
  if (table.is_signed()) {
    return finite ? avx512_quantize_as<true, true>(table, x, absmax, out, len) : avx512_quantize_as<true, false>(table, x, absmax, out, len);
  }
  return finite ? avx512_quantize_as<false, true>(table, x, absmax, out, len) : avx512_quantize_as<false, false>(table, x, absmax, out, len);
}

// 64 codes at a time: byte b of each code's value by two 128-entry byte permutes and a blend on
// the code's top bit, the four bytes interleaved back into floats. The codes are first shuffled
// so that the interleaving (which works within 128-bit lanes) yields the values in order.
FRUGAL_AVX512 int64_t avx512_dequantize(const CodeTable& table, const uint8_t* codes, float scale, float* out, int64_t len) {
  // Position 16 L + 4 r + j of the shuffled codes holds code 16 r + 4 L + j (L: 128-bit lane).
  alignas(64) static const uint8_t order[64] = {
      0, 1, 2, 3, 16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51, 4, 5, 6, 7, 20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,
      8, 9, 10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59, 12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63};
  const __m512i shuffle = _mm512_load_si512(order);
  const uint8_t* bytes = table.value_bytes();
  __m512i low_half[4], high_half[4];
  for (int b = 0; b < 4; ++b) {
    low_half[b] = _mm512_loadu_si512(bytes + 256 * b);
    high_half[b] = _mm512_loadu_si512(bytes + 256 * b + 64);
  }
  __m512i low_half2[4], high_half2[4];
  for (int b = 0; b < 4; ++b) {
    low_half2[b] = _mm512_loadu_si512(bytes + 256 * b + 128);
    high_half2[b] = _mm512_loadu_si512(bytes + 256 * b + 192);
  }
  const __m512 s = _mm512_set1_ps(scale);
  const int64_t whole = len / 64 * 64;
  for (int64_t i = 0; i < whole; i += 64) {
    const __m512i c = _mm512_permutexvar_epi8(shuffle, _mm512_loadu_si512(codes + i));
    const __mmask64 top = _mm512_movepi8_mask(c);
    __m512i plane[4];
    for (int b = 0; b < 4; ++b) {
      plane[b] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(low_half[b], c, high_half[b]),
                                        _mm512_permutex2var_epi8(low_half2[b], c, high_half2[b]));
    }
    const __m512i lo01 = _mm512_unpacklo_epi8(plane[0], plane[1]), hi01 = _mm512_unpackhi_epi8(plane[0], plane[1]);
    const __m512i lo23 = _mm512_unpacklo_epi8(plane[2], plane[3]), hi23 = _mm512_unpackhi_epi8(plane[2], plane[3]);
    const __m512i values[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23), _mm512_unpacklo_epi16(hi01, hi23),
                               _mm512_unpackhi_epi16(hi01, hi23)};
    for (int r = 0; r < 4; ++r) _mm512_storeu_ps(out + i + 16 * r, _mm512_mul_ps(_mm512_castsi512_ps(values[r]), s));
  }
  return whole;
}

FRUGAL_AVX512 int64_t avx512_scan(const float* x, int64_t len, float* max, bool* nonfinite) {
  const __m512i sign_off = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
  __m512i top = _mm512_setzero_si512(), raw = _mm512_setzero_si512();
  const int64_t whole = len / 16 * 16;
  for (int64_t i = 0; i < whole; i += 16) {
    const __m512i magnitude = _mm512_and_si512(_mm512_loadu_si512(x + i), sign_off);
    raw = _mm512_max_epu32(raw, magnitude);
    top = _mm512_mask_max_epu32(top, _mm512_cmplt_epu32_mask(magnitude, infinity), top, magnitude);
  }
  const uint32_t bits = _mm512_reduce_max_epu32(top);
  __builtin_memcpy(max, &bits, sizeof(bits));
  *nonfinite = _mm512_reduce_max_epu32(raw) >= 0x7f800000u;
  return whole;
}

// ---- AVX2 ----
#define FRUGAL_AVX2 __attribute__((target("avx2")))

// As codes_16 above, 8 values at a time; the bucket reads are scalar loads. A finite block
// (|x| <= absmax) multiplies by 1 / absmax where that reciprocal is a normal float and the table
// allows it (CodeTable::product_path): the product is then at most 2 bit patterns from the
// quotient (each lies within half an ulp of the real quotient, the reciprocal within half an ulp
// of 1 / absmax), so its code is the quotient's unless its key's threshold field lies within 2
// patterns of it. A block with such a value (about 1 in 400 blocks of 256) is gone over again.
template <bool Finite, bool Multiply>
FRUGAL_AVX2 int64_t avx2_quantize_as(const CodeTable& table, const float* x, float absmax, uint8_t* out, int64_t len) {
  const __m256 minus_one = _mm256_set1_ps(-1.0f), one = _mm256_set1_ps(1.0f);
  const __m256i lowest = _mm256_set1_epi32(static_cast<int>(kLowest)), top = _mm256_set1_epi32(static_cast<int>(kOne));
  const __m256i low_bits = _mm256_set1_epi32(0xffff), keys = _mm256_set1_epi32(kKeys), sign_off = _mm256_set1_epi32(0x7fffffff);
  const auto* buckets = reinterpret_cast<const int*>(table.buckets());
  const bool zero_max = !Multiply && !(absmax > 0.0f);  // a reciprocal that is a normal float has absmax > 0
  static_assert(Finite || !Multiply, "only a finite block's values lie within its maximum");
  const __m256 scale = _mm256_set1_ps(Multiply ? 1.0f / absmax : absmax);
  const int64_t whole = len / 8 * 8;
  // Over the lanes so far: the least distance of a product's low bits to its key's threshold field.
  __m256i nearest = _mm256_set1_epi32(-1);
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 y = zero_max ? _mm256_setzero_ps() : Multiply ? _mm256_mul_ps(v, scale) : _mm256_div_ps(v, scale);
    if constexpr (!Finite) {
      y = _mm256_andnot_ps(_mm256_cmp_ps(y, y, _CMP_UNORD_Q), y);  // NaN -> +0
      y = _mm256_min_ps(_mm256_max_ps(y, minus_one), one);
    }
    const __m256i bits = _mm256_castps_si256(y);
    const __m256i negative = _mm256_srai_epi32(bits, 31);  // all ones for a negative value
    __m256i magnitude = _mm256_and_si256(bits, sign_off);
    magnitude = _mm256_sub_epi32(_mm256_min_epu32(_mm256_max_epu32(magnitude, lowest), top), lowest);
    const __m256i key = _mm256_add_epi32(_mm256_srli_epi32(magnitude, 16), _mm256_and_si256(negative, keys));
    // Eight scalar loads: AVX2's gather costs about twice as much on Zen 4 (and on Intel CPUs
    // with the Gather Data Sampling microcode).
    alignas(32) int k[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(k), key);
    const __m256i bucket = _mm256_setr_epi32(buckets[k[0]], buckets[k[1]], buckets[k[2]], buckets[k[3]], buckets[k[4]], buckets[k[5]],
                                             buckets[k[6]], buckets[k[7]]);
    const __m256i low = _mm256_xor_si256(_mm256_and_si256(magnitude, low_bits), _mm256_and_si256(negative, low_bits));
    const __m256i threshold = _mm256_srli_epi32(bucket, 8);
    // low >= threshold, as 0 or -1; both below 2^17, so the signed comparison is exact.
    const __m256i below = _mm256_cmpgt_epi32(threshold, low);
    const __m256i code = _mm256_sub_epi32(_mm256_and_si256(bucket, _mm256_set1_epi32(0xff)), _mm256_xor_si256(below, _mm256_set1_epi32(-1)));
    // Pack 8 codes (0..255) into 8 bytes.
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(words, words));
    if constexpr (Multiply) nearest = _mm256_min_epu32(nearest, _mm256_abs_epi32(_mm256_sub_epi32(low, threshold)));
  }
  if constexpr (Multiply) {
    // No call in the loop above (it would make the compiler keep its constants in memory): the
    // rare block with a product near a threshold is gone over again here.
    alignas(32) uint32_t distance[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(distance), nearest);
    bool near = false;
    for (const uint32_t d : distance) near = near || d <= CodeTable::kProductSlack;
    if (near) [[unlikely]] {
      const float reciprocal = 1.0f / absmax;
      for (int64_t i = 0; i < whole; ++i) {
        if (table.near_threshold(x[i] * reciprocal)) out[i] = table.code_of(normed(x[i], absmax));
      }
    }
  }
  return whole;
}

int64_t avx2_quantize(const CodeTable& table, const float* x, float absmax, bool finite, uint8_t* out, int64_t len) {
  if (!finite) return avx2_quantize_as<false, false>(table, x, absmax, out, len);
  // 1 / absmax a normal float (so within half an ulp of the real reciprocal).
  if (table.product_path() && absmax >= 0x1p-125f && absmax <= 0x1p125f) return avx2_quantize_as<true, true>(table, x, absmax, out, len);
  return avx2_quantize_as<true, false>(table, x, absmax, out, len);
}

FRUGAL_AVX2 int64_t avx2_dequantize(const CodeTable& table, const uint8_t* codes, float scale, float* out, int64_t len) {
  const __m256 s = _mm256_set1_ps(scale);
  const float* value = table.codes();  // scalar loads, not a gather (see avx2_quantize)
  const int64_t whole = len / 8 * 8;
  for (int64_t i = 0; i < whole; i += 8) {
    const uint8_t* c = codes + i;
    const __m256 values = _mm256_setr_ps(value[c[0]], value[c[1]], value[c[2]], value[c[3]], value[c[4]], value[c[5]], value[c[6]], value[c[7]]);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(values, s));
  }
  return whole;
}

FRUGAL_AVX2 int64_t avx2_scan(const float* x, int64_t len, float* max, bool* nonfinite) {
  const __m256i sign_off = _mm256_set1_epi32(0x7fffffff), infinity = _mm256_set1_epi32(0x7f800000);
  __m256i top = _mm256_setzero_si256(), raw = _mm256_setzero_si256();
  const int64_t whole = len / 8 * 8;
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256i magnitude = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), sign_off);
    const __m256i finite = _mm256_cmpgt_epi32(infinity, magnitude);  // both non-negative as int32
    raw = _mm256_max_epu32(raw, magnitude);
    top = _mm256_max_epu32(top, _mm256_and_si256(magnitude, finite));
  }
  alignas(32) uint32_t lanes[8], raw_lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), top);
  _mm256_store_si256(reinterpret_cast<__m256i*>(raw_lanes), raw);
  uint32_t bits = 0, raw_bits = 0;
  for (int k = 0; k < 8; ++k) {
    bits = lanes[k] > bits ? lanes[k] : bits;
    raw_bits = raw_lanes[k] > raw_bits ? raw_lanes[k] : raw_bits;
  }
  __builtin_memcpy(max, &bits, sizeof(bits));
  *nonfinite = raw_bits >= 0x7f800000u;
  return whole;
}

constexpr VectorKernels kAvx2{"avx2", avx2_quantize, avx2_dequantize, avx2_scan};

VectorKernels choose(std::string_view forced) {
  const bool avx2 = __builtin_cpu_supports("avx2");
  if (forced == "avx2" && avx2) return kAvx2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vbmi")) {
    return {"avx512vbmi", avx512_quantize, avx512_dequantize, avx512_scan};
  }
  if (avx2) return kAvx2;
  return kScalar;
}

#else

VectorKernels choose(std::string_view) { return kScalar; }

#endif

}  // namespace

const VectorKernels& vector_kernels() {
  static const VectorKernels kernels = [] {
    // FRUGAL_OPTIM_KERNELS=scalar forces the scalar path, =avx2 the AVX2 path on a CPU that also
    // has AVX-512 (tests and benchmarks compare them; a path the CPU lacks is not taken).
    const char* forced = std::getenv("FRUGAL_OPTIM_KERNELS");
    const std::string_view name = forced != nullptr ? forced : "";
    return name == "scalar" ? kScalar : choose(name);
  }();
  return kernels;
}

}  // namespace frugal::detail
