#pragma once

// A function compiled for several x86 levels and picked at load time (GCC's target_clones). Under
// ThreadSanitizer the load-time resolver runs instrumented before TSan's runtime has started and
// crashes the program at start-up, so a TSan build compiles the baseline only.
#if defined(__SANITIZE_THREAD__)
#define FRUGAL_TARGET_CLONES(...)
#else
#define FRUGAL_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#endif
