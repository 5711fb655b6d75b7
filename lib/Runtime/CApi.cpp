//===- CApi.cpp - The C API over moe::runtime::Bundle ---------------------===//

#include "moe/Runtime/Runtime.h"

#include <algorithm>
#include <cstring>

using namespace moe::runtime;

struct MoeBundle {
  std::unique_ptr<Bundle> bundle;
};

namespace {
/// Copies the message of `status` into the caller's buffer and returns its
/// code.
int report(const Status &status, char *errbuf, size_t errlen) {
  if (errbuf && errlen) {
    size_t length = std::min(status.message().size(), errlen - 1);
    std::memcpy(errbuf, status.message().data(), length);
    errbuf[length] = '\0';
  }
  return status.code();
}

Status nullArgument(const char *name) {
  return Status(MOE_ERROR_INVALID_ARGUMENT, std::string(name) + " is null");
}
} // namespace

int moe_bundle_open(const char *path, int device, MoeBundle **bundle,
                    char *errbuf, size_t errlen) {
  if (!bundle)
    return report(nullArgument("the bundle handle pointer"), errbuf, errlen);
  *bundle = nullptr;
  if (!path)
    return report(nullArgument("the bundle path"), errbuf, errlen);
  std::unique_ptr<Bundle> opened;
  Status status = Bundle::open(path, device, opened);
  if (status.ok())
    *bundle = new MoeBundle{std::move(opened)};
  return report(status, errbuf, errlen);
}

int moe_bundle_run(MoeBundle *bundle, int64_t tokens, const MoeTensor *tensors,
                   int count, void *stream, char *errbuf, size_t errlen) {
  if (!bundle)
    return report(nullArgument("the bundle"), errbuf, errlen);
  return report(bundle->bundle->run(tokens, tensors, count,
                                    static_cast<CUstream>(stream)),
                errbuf, errlen);
}

int moe_bundle_bind_peers(MoeBundle *bundle, int tensor,
                          const void *const *slices, int count, char *errbuf,
                          size_t errlen) {
  if (!bundle)
    return report(nullArgument("the bundle"), errbuf, errlen);
  if (!slices)
    return report(nullArgument("the slices"), errbuf, errlen);
  return report(bundle->bundle->bindPeers(tensor, slices, count), errbuf,
                errlen);
}

void moe_bundle_close(MoeBundle *bundle) { delete bundle; }

int64_t moe_bundle_tokens_max(const MoeBundle *bundle) {
  return bundle ? bundle->bundle->tokensMax() : 0;
}

int moe_bundle_num_tensors(const MoeBundle *bundle) {
  return bundle ? bundle->bundle->numTensors() : 0;
}

int moe_bundle_num_variants(const MoeBundle *bundle) {
  return bundle ? bundle->bundle->numVariants() : 0;
}

int64_t moe_bundle_variant_max_tokens(const MoeBundle *bundle, int index) {
  return bundle ? bundle->bundle->variantMaxTokens(index) : 0;
}

int moe_bundle_variant_for_tokens(const MoeBundle *bundle, int64_t tokens,
                                  int *index, char *errbuf, size_t errlen) {
  if (!bundle)
    return report(nullArgument("the bundle"), errbuf, errlen);
  if (!index)
    return report(nullArgument("the variant index pointer"), errbuf, errlen);
  return report(bundle->bundle->variantForTokens(tokens, *index), errbuf,
                errlen);
}

int moe_bundle_tensor_info(const MoeBundle *bundle, int index, int64_t tokens,
                           MoeTensorInfo *info, char *errbuf, size_t errlen) {
  if (!bundle)
    return report(nullArgument("the bundle"), errbuf, errlen);
  if (!info)
    return report(nullArgument("the tensor info"), errbuf, errlen);
  return report(bundle->bundle->tensorInfo(index, tokens, *info), errbuf,
                errlen);
}

int moe_device_alloc(int device, size_t bytes, void **pointer, char *errbuf,
                     size_t errlen) {
  if (!pointer)
    return report(nullArgument("the pointer to store into"), errbuf, errlen);
  return report(allocateDevice(device, bytes, *pointer), errbuf, errlen);
}

int moe_device_free(int device, void *pointer, char *errbuf, size_t errlen) {
  return report(freeDevice(device, pointer), errbuf, errlen);
}

int moe_device_upload(int device, void *destination, const void *source,
                      size_t bytes, char *errbuf, size_t errlen) {
  if (!destination || !source)
    return report(nullArgument("a copy's pointer"), errbuf, errlen);
  return report(copyToDevice(device, destination, source, bytes), errbuf,
                errlen);
}

int moe_device_download(int device, void *destination, const void *source,
                        size_t bytes, char *errbuf, size_t errlen) {
  if (!destination || !source)
    return report(nullArgument("a copy's pointer"), errbuf, errlen);
  return report(copyToHost(device, destination, source, bytes), errbuf, errlen);
}

int moe_device_synchronize(int device, char *errbuf, size_t errlen) {
  return report(synchronizeDevice(device), errbuf, errlen);
}
