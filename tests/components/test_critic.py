"""Clipped value loss: hand-worked value and gradient, padding, step-share."""

import pytest
import torch

from zoo.components.critic import clipped_value
from zoo.core.registry import ComponentError, build
from zoo.core.types import StepCounts


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


def test_hand_worked():
    # token 1: V .5, V_old 0, R 1: (V-R)^2 = .25; V_clip = 0 + clip(.5) = .2 -> (.2-1)^2 = .64; max .64
    # token 2: V 1.1, V_old 1.0, R 0: inside the clip, V_clip = V -> 1.21
    # token 3: padding with garbage
    # loss = 0.1 * 0.5 * (0.64 + 1.21) / 2 tokens = 0.04625
    v = _t([[0.5, 1.1, float("nan")]]).requires_grad_(True)
    old = _t([[0.0, 1.0, float("inf")]])
    ret = _t([[1.0, 0.0, float("nan")]])
    mask = _t([[1, 1, 0]])
    loss = build("critic", "clipped_value")(v, old, ret, mask, StepCounts.of(mask))
    assert loss.item() == pytest.approx(0.04625, abs=1e-9)
    loss.backward()
    # d/dV: token 1 is clipped (constant branch wins) -> 0; token 2: 0.1 * 0.5 / 2 * 2 * 1.1 = 0.055
    torch.testing.assert_close(v.grad, _t([[0.0, 0.055, 0.0]]), atol=1e-9, rtol=0)


def test_divides_by_step_tokens():
    v, old, ret, mask = _t([[1.0]]), _t([[1.0]]), _t([[0.0]]), _t([[1.0]])
    counts = StepCounts(tokens=4, sequences=2, max_new_tokens=2)
    assert clipped_value(v, old, ret, mask, counts).item() == pytest.approx(0.1 * 0.5 * 1.0 / 4)


@pytest.mark.parametrize("spec", [{"clip_range": 0.0}, {"clip_range": -0.2}, {"coef": -0.1}])
def test_bad_parameters(spec):
    with pytest.raises(ComponentError):
        build("critic", {"name": "clipped_value", **spec})
