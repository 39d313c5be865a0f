#include "remote/detail/web_libraries.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "frugal/remote/s3_client.hpp"

namespace frugal::detail {

namespace {

void* open_first(const char* const* names, const char* package) {
  std::string tried;
  for (const char* const* name = names; *name != nullptr; ++name) {
    if (void* handle = ::dlopen(*name, RTLD_NOW | RTLD_LOCAL)) return handle;
    tried += std::string(tried.empty() ? "" : ", ") + *name;
  }
  throw RemoteStorageError(std::string("checkpoints in object storage need ") + tried + ", which cannot be loaded here (" +
                           ::dlerror() + "): install " + package);
}

template <typename F>
void find(void* handle, const char* symbol, F& slot) {
  slot = reinterpret_cast<F>(::dlsym(handle, symbol));
  if (slot == nullptr) throw RemoteStorageError(std::string("the loaded library lacks ") + symbol + " (too old?)");
}

// The library loaded and `fill` run once; its error, if any, rethrown at every call.
template <typename Api, typename Fill>
const Api& load_once(const char* const* names, const char* package, Fill fill) {
  static Api api;
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [&] {
    try {
      fill(open_first(names, package), api);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw RemoteStorageError(error);
  return api;
}

}  // namespace

const Curl& curl() {
  static const char* const names[] = {"libcurl.so.4", "libcurl.so", nullptr};
  return load_once<Curl>(names, "libcurl (Debian: libcurl4)", [](void* h, Curl& api) {
    find(h, "curl_global_init", api.global_init);
    find(h, "curl_easy_init", api.easy_init);
    find(h, "curl_easy_cleanup", api.easy_cleanup);
    find(h, "curl_easy_setopt", api.easy_setopt);
    find(h, "curl_easy_perform", api.easy_perform);
    find(h, "curl_easy_getinfo", api.easy_getinfo);
    find(h, "curl_easy_strerror", api.easy_strerror);
    find(h, "curl_slist_append", api.slist_append);
    find(h, "curl_slist_free_all", api.slist_free_all);
    api.global_init(CURL_GLOBAL_DEFAULT);  // once, before any thread uses libcurl
  });
}

const Crypto& crypto() {
  static const char* const names[] = {"libcrypto.so.3", "libcrypto.so", nullptr};
  return load_once<Crypto>(names, "OpenSSL's libcrypto (Debian: libssl3)", [](void* h, Crypto& api) {
    find(h, "EVP_MD_CTX_new", api.md_ctx_new);
    find(h, "EVP_MD_CTX_free", api.md_ctx_free);
    find(h, "EVP_DigestInit_ex", api.digest_init);
    find(h, "EVP_DigestUpdate", api.digest_update);
    find(h, "EVP_DigestFinal_ex", api.digest_final);
    find(h, "EVP_md5", api.md5);
    find(h, "EVP_sha256", api.sha256);
    find(h, "EVP_EncodeBlock", api.encode_block);
  });
}

}  // namespace frugal::detail
