#pragma once
// XXH3-128 over a sequence of length-prefixed parts (so part boundaries count: "a"+"bc" differs
// from "ab"+"c"). Used for preprocessing-cache keys and exact-duplicate detection.

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace frugal::detail {

class ContentHash {
 public:
  ContentHash() : state_(XXH3_createState()) { XXH3_128bits_reset(state_); }
  ~ContentHash() { XXH3_freeState(state_); }
  ContentHash(const ContentHash&) = delete;
  ContentHash& operator=(const ContentHash&) = delete;

  /// Raw bytes, no length prefix (a file streamed in pieces).
  void add(const void* data, size_t size) { XXH3_128bits_update(state_, data, size); }
  void add_part(std::string_view part) {
    const uint64_t size = part.size();
    add(&size, sizeof size);
    add(part.data(), part.size());
  }
  /// The 16 digest bytes (a map key).
  std::string bytes() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state_);
    return std::string(reinterpret_cast<const char*>(&h), sizeof h);
  }
  std::string hex() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state_);
    char out[33];
    std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    return out;
  }

 private:
  XXH3_state_t* state_;
};

}  // namespace frugal::detail
