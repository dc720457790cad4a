"""Spies for the checks: a real ``GradScaler`` and a real ``SGD`` that write down what the learner's code does.

They behave exactly like the real classes (they are subclasses that call ``super()``); on the side they
log each call in order and keep a copy of the gradients the optimizer really steps with, so a check can
tell *what happened* without reading the learner's source text.
"""

from __future__ import annotations

import torch


class SpyScaler(torch.amp.GradScaler):
    """A real GradScaler that writes down what is called, in order."""

    def __init__(self, log, device_type, **kwargs):
        super().__init__(device_type, **kwargs)
        self.log = log
        self.scaled_dtypes: list[torch.dtype] = []  # the dtype of each loss given to scale() (a float16 loss
        # means the loss was computed outside autocast, on float16 outputs)
        self.grads_at_unscale: list[list[torch.Tensor]] = []  # the gradients each unscale_ found (still scaled,
        # if backward ran on the scaled loss); scaler.step calls unscale_ too when the answer did not

    def scale(self, outputs):
        self.log.append("scale")
        if isinstance(outputs, torch.Tensor):
            self.scaled_dtypes.append(outputs.dtype)
        return super().scale(outputs)

    def unscale_(self, optimizer):
        self.log.append("unscale_")
        self.grads_at_unscale.append([p.grad.detach().clone() for group in optimizer.param_groups
                                      for p in group["params"] if p.grad is not None])
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        self.log.append("scaler.step")
        optimizer.inside_scaler = True
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            optimizer.inside_scaler = False

    def update(self, new_scale=None):
        self.log.append("update")
        return super().update(new_scale)


class SpyOptimizer(torch.optim.SGD):
    """SGD that records zero_grad, and the gradients it sees when it really steps."""

    def __init__(self, params, log, **kwargs):
        super().__init__(params, **kwargs)
        self.log, self.inside_scaler, self.grads_at_step = log, False, []
        self.stale_grad: float | None = None  # if set, .grad holds this value after each step (see step)

    def zero_grad(self, set_to_none=True):
        self.log.append("zero_grad")
        return super().zero_grad(set_to_none)

    def step(self, closure=None):
        self.log.append("optimizer.step" if self.inside_scaler else "optimizer.step (direct)")
        self.grads_at_step.append([p.grad.detach().clone() for p in self.param_groups[0]["params"]])
        result = super().step(closure)
        if self.stale_grad is not None:
            # A large stale gradient left behind: unless the learner zeroes the gradients before the next
            # backward, it shows up in the next step (a small one would hide: unscale_ divides it by S).
            for p in self.param_groups[0]["params"]:
                p.grad = torch.full_like(p, self.stale_grad)
        return result
