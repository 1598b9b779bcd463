#include "runtime/parallel/gradient_sync.h"

namespace st::runtime {

void DataParallelSync::begin_step() {
  reducer_->zero_grad();
  reducer_->set_sync(false);  // earlier micro-batches only accumulate
}

void TiedGradSync::finish() {
  for (const Tensor& p : params_) {
    Tensor g = p.grad();
    if (!g.defined()) {  // this stage's copy got no gradient: it adds zero
      g = Tensor::zeros(p.shape(), p.dtype(), p.device());
      Tensor(p).set_grad(g);
    }
    group_->all_reduce(g, comm::ReduceOp::sum)->wait();
  }
}

void Zero3Sync::finish() {
  zero_->finish();
  if (!group_) return;
  for (const std::string& name : tied_) group_->all_reduce(zero_->unit_grad(name), comm::ReduceOp::sum)->wait();
}

void SyncChain::begin_step() {
  for (auto& p : parts_) p->begin_step();
}
void SyncChain::last_backward() {
  for (auto& p : parts_) p->last_backward();
}
void SyncChain::finish() {
  for (auto& p : parts_) p->finish();
}
void SyncChain::end_step(const StepOutcome& o) {
  for (auto& p : parts_) p->end_step(o);
}

}  // namespace st::runtime
