#include "data/image/detail/libjpeg_errors.hpp"

#include <jerror.h>

namespace frugal::detail {
namespace {

extern "C" void on_libjpeg_error(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<LibjpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

extern "C" void on_libjpeg_message(j_common_ptr cinfo, int level) {
  auto* errors = reinterpret_cast<LibjpegErrors*>(cinfo->err);
  if (level >= 0) return;  // trace messages
  const bool ran_out = cinfo->err->msg_code == JWRN_JPEG_EOF && !errors->truncated;
  if (!errors->warned || ran_out) (*cinfo->err->format_message)(cinfo, errors->message);
  errors->warned = true;
  errors->truncated = errors->truncated || ran_out;
}

}  // namespace

void use_libjpeg_errors(j_common_ptr cinfo, LibjpegErrors* errors) {
  cinfo->err = jpeg_std_error(&errors->pub);
  errors->pub.error_exit = on_libjpeg_error;
  errors->pub.emit_message = on_libjpeg_message;
}

}  // namespace frugal::detail
