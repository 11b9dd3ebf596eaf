"""`zoo tta`: test-time adaptation of a `dual_encoder` policy, one unlabelled image at a time (issue 32 §3).

    result = run_tta(load_tta_file("examples/tta_grpo.yaml").tta)
    result.zero_shot_accuracy, result.accuracy        # before / after adaptation, same images

For each test image (labels are read only to score the prediction afterwards):

1. `reset: episodic` restores the adapted parameters and the optimizer state (RLCF arXiv 2305.18010:
   `model.reset()` and `optimizer.load_state_dict(optim_state)` before every test image);
2. `views` views of the image (the original first, `zoo.tasks.shapes.random_views`); the `keep`
   fraction with the lowest prediction entropy is kept (TPT arXiv 2209.07511 §3.2 confidence selection,
   10% of 64 views; RLCF keeps the same);
3. a frozen reward model (the policy as it was before any adaptation) scores every kept view against
   every class prompt once: `tta_ref_cos` [V][C];
4. `steps` times: each kept view is a group; the policy picks K = `group_size` class candidates per view
   (`zoo.models.dual_rollout`), the rewards score them, and the variant's slots make the loss
   (`zoo.step.tta.tta_loss`; `updates.epochs` passes over the same candidates) for one AdamW step;
5. the prediction is the argmax class of the adapted policy on the original image (RLCF).

`method: tpt` replaces step 4's loss with TPT's: the entropy of the mean prediction over the kept views.
"""

from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from zoo.components.objective import combine_objectives
from zoo.config.tta import PolicySpec, TTASpec
from zoo.config.variant import load_variant
from zoo.models.dual_cache import pretrained_dual_encoder
from zoo.models.dual_encoder import DualEncoder, adapt_parameters
from zoo.models.dual_rollout import candidate_logp, entropy, rollout
from zoo.rewards.compute import compute_rewards, resolve_rewards
from zoo.step.tta import tta_loss, tta_slots
from zoo.tasks.base import derive_seed
from zoo.tasks.shapes import random_views, shape_rows


def build_policy(spec: PolicySpec) -> DualEncoder:
    """The tiny dual encoder of `spec`, pre-trained on clean tta_shapes images, from zoo's cache when
    it was built before with the same settings and code (`zoo.models.dual_cache`)."""
    return pretrained_dual_encoder(spec)


@dataclass
class TTAResult:
    """Accuracy before (zero-shot) and after adaptation on the same images, and per-image records."""

    zero_shot_accuracy: float
    accuracy: float
    images: int
    seconds: float
    records: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("zero_shot_accuracy", "accuracy", "images", "seconds")}


@dataclass
class Adapter:
    """What stays across images: the policy, the frozen reward model, the adapted parameters, the
    optimizer and the initial states that an episodic reset restores."""

    enc: DualEncoder
    ref: DualEncoder
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    init_params: list[Tensor]
    init_opt: dict[str, Any]

    @staticmethod
    def of(enc: DualEncoder, cfg: TTASpec) -> "Adapter":
        ref = copy.copy(enc)
        ref.model = copy.deepcopy(enc.model)
        params = adapt_parameters(enc, cfg.adapt)
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        return Adapter(enc, ref, params, opt, [p.detach().clone() for p in params], copy.deepcopy(opt.state_dict()))

    def reset(self) -> None:
        with torch.no_grad():
            for p, p0 in zip(self.params, self.init_params, strict=True):
                p.copy_(p0)
        self.opt.load_state_dict(copy.deepcopy(self.init_opt))


def confident_views(enc: DualEncoder, px: Tensor, keep: float) -> Tensor:
    """Indices of the ceil(keep * V) views with the lowest prediction entropy (TPT §3.2), [V'].
    Ties keep the earlier view (a stable sort), so view 0, the original, wins a tie."""
    with torch.no_grad():
        ent = entropy(enc.logits(px))  # [V]
    n = max(1, math.ceil(keep * px.shape[0]))
    return torch.sort(ent, stable=True).indices[:n]


def grpo_step(
    ad: Adapter, px: Tensor, ref_cos: list[list[float]], cfg: TTASpec, ctx: dict[str, Any]
) -> dict[str, float]:
    """One adaptation step of GRPO-TTA on the kept views px [V, 3, H, W]; returns its metrics."""
    slots, fns, weights, gen = ctx["slots"], ctx["fns"], ctx["weights"], ctx["gen"]
    names = ad.enc.classes
    roll = rollout(ad.enc.logits(px), ctx["group_size"], cfg.candidates, gen)  # candidates [V, G]
    flat = roll.candidates.reshape(-1)  # [N = V * G]
    group_ids = torch.arange(px.shape[0]).repeat_interleave(roll.candidates.shape[1])  # [N]
    rows = [{"classes": names, "tta_ref_cos": ref_cos, "tta_view": int(v)} for v in group_ids]
    obj = compute_rewards(fns, [names[c] for c in flat.tolist()], rows).objectives  # [N, K]
    scores = combine_objectives(slots.objective_norm(obj, group_ids), weights)  # [N]
    logp_old = roll.logp.reshape(-1).detach()  # [N]
    logp = roll.logp.reshape(-1)
    for epoch in range(ctx["epochs"]):
        if epoch:  # the same candidates under the updated policy: the ratio moves, the clip can act
            logp = candidate_logp(ad.enc.logits(px), roll.candidates).reshape(-1)
        out = tta_loss(slots, logp, logp_old, scores, group_ids)
        ad.opt.zero_grad()
        out.loss.backward()
        ad.opt.step()
    return {
        "reward": float(scores.mean()),
        "entropy": float(roll.entropy.detach().mean()),
        "loss": float(out.loss.detach()),
    }


def tpt_step(ad: Adapter, px: Tensor) -> dict[str, float]:
    """One TPT step (arXiv 2209.07511 eq. 3): minimise the entropy of the mean prediction over the views."""
    probs = ad.enc.logits(px).float().softmax(dim=-1).mean(dim=0)  # [C]
    loss = -(probs * probs.clamp_min(1e-12).log()).sum()
    ad.opt.zero_grad()
    loss.backward()
    ad.opt.step()
    return {"loss": float(loss.detach())}


class TTADiverged(ValueError):
    """A test-time update gave a non-finite loss: the run stops rather than report a NaN model's accuracy."""


def adapt_image(ad: Adapter, image: Any, cfg: TTASpec, ctx: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Steps 1-5 of the module doc for one image; returns {prediction, zero_shot, metrics of the last step}."""
    if cfg.reset == "episodic":
        ad.reset()
    px_all = ad.enc.pixels(random_views(image, cfg.views, rng))  # [V, 3, H, W], view 0 = the image
    with torch.no_grad():
        zero_shot = int(ad.ref.logits(px_all[:1]).argmax(-1))
    px = px_all[confident_views(ad.enc, px_all, cfg.keep)]
    with torch.no_grad():
        ref_cos = (ad.ref.image_embeddings(px) @ ad.ref.class_embeddings().T).tolist()  # [V'][C]
    metrics: dict[str, float] = {}
    for k in range(cfg.steps):
        metrics = tpt_step(ad, px) if ctx["method"] == "tpt" else grpo_step(ad, px, ref_cos, cfg, ctx)
        if not math.isfinite(metrics.get("loss", 0.0)):
            raise TTADiverged(
                f"the adaptation loss is {metrics['loss']} at step {k + 1} of {cfg.steps} on an image: the update "
                f"diverged (lower tta.lr, now {cfg.lr:g}) or no reward could score the candidates (tta.rewards); "
                f"an accuracy from these weights would mean nothing, so none is reported"
            )
    with torch.no_grad():
        pred = int(ad.enc.logits(px_all[:1]).argmax(-1))
    return {"prediction": pred, "zero_shot": zero_shot, **metrics}


def variant_context(cfg: TTASpec) -> dict[str, Any]:
    """What the update reads besides the image: `method`, and for `method: variant` the variant's slots
    (`tta_slots`: refuses a KL, a critic, ...), group size, epochs, the rewards and the candidates'
    generator. `tpt` reads neither the variant nor the rewards (TPT eq. 3 is the entropy of the mean
    prediction), so they are not built for it."""
    if cfg.method == "tpt":
        return {"method": "tpt"}
    v = load_variant(cfg.variant)
    resolved = resolve_rewards(cfg.rewards)
    return {
        "method": cfg.method,
        "slots": tta_slots(v),
        "fns": [f for f, _ in resolved],
        "weights": [w for _, w in resolved],
        "group_size": v.group_size,
        "epochs": v.updates.epochs,
        "gen": torch.Generator().manual_seed(cfg.seed),
    }


def run_tta(cfg: TTASpec, enc: DualEncoder | None = None) -> TTAResult:
    """Adapt to every image of `cfg.data` in turn (module doc); `enc` defaults to `build_policy`."""
    start = time.perf_counter()
    ctx = variant_context(cfg)
    enc = enc if enc is not None else build_policy(cfg.policy)
    ad = Adapter.of(enc, cfg)
    d = cfg.data
    rows = shape_rows(d.size, d.seed, shift=d.shift, severity=d.severity, image_size=cfg.policy.image_size)
    rng = random.Random(derive_seed(cfg.seed, "tta_views"))
    records = []
    for row in rows:
        rec = adapt_image(ad, row["images"][0], cfg, ctx, rng)
        rec["answer"] = enc.classes.index(row["answer"])
        records.append(rec)
    n = len(records)
    return TTAResult(
        zero_shot_accuracy=sum(r["zero_shot"] == r["answer"] for r in records) / n,
        accuracy=sum(r["prediction"] == r["answer"] for r in records) / n,
        images=n,
        seconds=time.perf_counter() - start,
        records=records,
    )
