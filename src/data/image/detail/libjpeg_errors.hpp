#pragma once
// libjpeg's error handling, shared by the decoders and the rewrite that use its C API: an error
// longjmps back to the caller's setjmp with its text; warnings are recorded, not printed. Whoever
// calls setjmp keeps the code between it and the library calls free of C++ objects with
// destructors (a longjmp does not run them).

#include <csetjmp>
#include <cstddef>
#include <cstdio>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

namespace frugal::detail {

struct LibjpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg's cinfo->err points here
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];  // the error's text, else the data running out, else the first warning
  bool warned;     // any warning: corrupt data that the decoder repaired or skipped
  bool truncated;  // "Premature end of JPEG file": the data ran out
};

/// Makes `errors` the error manager of a decompressor or compressor (both may share one).
void use_libjpeg_errors(j_common_ptr cinfo, LibjpegErrors* errors);

}  // namespace frugal::detail
