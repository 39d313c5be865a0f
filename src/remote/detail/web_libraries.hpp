#pragma once
// libcurl and OpenSSL's libcrypto, opened at run time: programs that never touch object storage
// (the GPU machine's, which lacks both packages) load and run without them, and a run with
// checkpoint.remote set says which library is missing instead of failing to start. Searched as
// libcurl.so.4 / libcurl.so and libcrypto.so.3 / libcrypto.so on the loader's path.

#include <curl/curl.h>
#include <openssl/evp.h>

namespace frugal::detail {

struct Curl {
  decltype(&::curl_global_init) global_init = nullptr;
  decltype(&::curl_easy_init) easy_init = nullptr;
  decltype(&::curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&::curl_easy_setopt) easy_setopt = nullptr;
  decltype(&::curl_easy_perform) easy_perform = nullptr;
  decltype(&::curl_easy_getinfo) easy_getinfo = nullptr;
  decltype(&::curl_easy_strerror) easy_strerror = nullptr;
  decltype(&::curl_slist_append) slist_append = nullptr;
  decltype(&::curl_slist_free_all) slist_free_all = nullptr;
};

struct Crypto {
  decltype(&::EVP_MD_CTX_new) md_ctx_new = nullptr;
  decltype(&::EVP_MD_CTX_free) md_ctx_free = nullptr;
  decltype(&::EVP_DigestInit_ex) digest_init = nullptr;
  decltype(&::EVP_DigestUpdate) digest_update = nullptr;
  decltype(&::EVP_DigestFinal_ex) digest_final = nullptr;
  decltype(&::EVP_md5) md5 = nullptr;
  decltype(&::EVP_sha256) sha256 = nullptr;
  decltype(&::EVP_EncodeBlock) encode_block = nullptr;
};

/// The libraries' functions (loaded, and libcurl initialised, once); RemoteStorageError naming
/// the library and the package to install when one cannot be loaded.
const Curl& curl();
const Crypto& crypto();

}  // namespace frugal::detail
