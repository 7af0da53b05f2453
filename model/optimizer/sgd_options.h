// The hyper-parameters of SGD with momentum and weight decay (torch.optim.SGD's).
#pragma once

namespace gradsync {

struct SgdOptions {
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
};

}  // namespace gradsync
