// AllocateNow: inside a Storage::DeferAllocation (ZeRO-3 builds its model so: names, shapes and
// no parameter's bytes), storages made while this is alive get their bytes at once — state built
// with the model that is no parameter (the FP8 GEMMs' scaling states). Nests; restores what was
// in effect. Defined beside DeferAllocation (tensor/storage.cpp), whose switch it turns off.
#pragma once

namespace st {

class AllocateNow {
 public:
  AllocateNow();
  ~AllocateNow();
  AllocateNow(const AllocateNow&) = delete;
  AllocateNow& operator=(const AllocateNow&) = delete;

 private:
  bool prev_;
};

}  // namespace st
