//===- Link.cpp - Object file to shared object with in-process lld --------===//
//
// lld reads and writes files, so the object goes to a private temporary
// directory that is removed afterwards.
//
//===----------------------------------------------------------------------===//
#include "Link.h"

#include "attnc/format/KernelFile.h"

#include "lld/Common/Driver.h"
#include "llvm/Support/raw_ostream.h"
#include "attnc/support/Files.h"

#include <cstdlib>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

LLD_HAS_DRIVER(elf)

namespace attnc::codegen {

namespace {

const char *findLibm() {
  for (const char *path : {"/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                           "/lib64/libm.so.6", "/usr/lib64/libm.so.6"}) {
    struct stat st;
    if (stat(path, &st) == 0)
      return path;
  }
  return nullptr;
}

const char *findLibmvec() {
  for (const char *path : {"/lib/x86_64-linux-gnu/libmvec.so.1", "/usr/lib/x86_64-linux-gnu/libmvec.so.1",
                           "/lib64/libmvec.so.1", "/usr/lib64/libmvec.so.1"}) {
    struct stat st;
    if (stat(path, &st) == 0)
      return path;
  }
  return nullptr;
}

} // namespace

bool linkSharedObject(const std::string &object, std::string &sharedObject, std::string &error) {
  return linkSharedObject(std::vector<std::string>{object}, sharedObject, error);
}

bool linkSharedObject(const std::vector<std::string> &objects, std::string &sharedObject,
                      std::string &error) {
  static std::mutex lldMutex;
  char dirTemplate[] = "/tmp/attnc-link-XXXXXX";
  if (!mkdtemp(dirTemplate)) {
    error = "cannot create a temporary directory for linking";
    return false;
  }
  std::string dir = dirTemplate;
  std::string soPath = dir + "/kernel.so";
  std::vector<std::string> objPaths;
  for (size_t k = 0; k < objects.size(); ++k)
    objPaths.push_back(dir + "/kernel" + std::to_string(k) + ".o");
  auto cleanup = [&] {
    for (const std::string &p : objPaths)
      unlink(p.c_str());
    unlink(soPath.c_str());
    rmdir(dir.c_str());
  };
  for (size_t k = 0; k < objects.size(); ++k)
    if (!support::writeFileAtomically(objPaths[k], objects[k], error)) {
      cleanup();
      return false;
    }
  std::vector<const char *> args = {"ld.lld", "-shared", "--as-needed", "-O1", "-o", soPath.c_str()};
  for (const std::string &p : objPaths)
    args.push_back(p.c_str());
  if (const char *libmvec = findLibmvec())
    args.push_back(libmvec);
  if (const char *libm = findLibm())
    args.push_back(libm);
  std::string out, err;
  llvm::raw_string_ostream outStream(out), errStream(err);
  lld::Result result;
  {
    std::lock_guard<std::mutex> lock(lldMutex);
    result = lld::lldMain(args, outStream, errStream, {{lld::Gnu, &lld::elf::link}});
  }
  if (result.retCode != 0) {
    error = "linking the kernel failed: " + errStream.str();
    cleanup();
    return false;
  }
  bool ok = support::readFileBytes(soPath, sharedObject, error);
  cleanup();
  return ok;
}

} // namespace attnc::codegen
