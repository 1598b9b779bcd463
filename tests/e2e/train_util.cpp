#include "tests/e2e/train_util.h"

namespace st::test {

Param make_param(const Shape& shape, float std, Generator& gen) {
  Tensor w = Tensor::zeros(shape);
  if (std > 0.f) fill_normal(w, gen, 0.f, std);
  w.requires_grad_();
  return Param{w, Tensor::zeros(shape), Tensor::zeros(shape), shape.size() >= 2};
}

void adamw_all(std::vector<Param*>& params, const ops::AdamWParams& hp, int64_t step) {
  for (Param* p : params) {
    if (!p->w.grad().defined()) continue;  // not in this graph (PyTorch skips grad None too)
    ops::AdamWParams h = hp;
    if (!p->decay) h.weight_decay = 0.f;
    ops::adamw_step(p->w, p->w.grad(), p->m, p->v, h, step);
    p->w.zero_grad();
  }
}

}  // namespace st::test
