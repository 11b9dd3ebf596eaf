"""`critic.init: reward_model`: the run has a reward model, and (once the policy's tokenizer is
loaded, `after_load`) the reward model's tokenizer gives the same ids (the critic reads the policy's
tokens). InstructGPT arXiv 2203.02155 §3.5 initialises the value function from the RM."""

from __future__ import annotations

from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import AfterLoad, BeforeLoad
from zoo.rewards.critic_init import critic_init, reward_model_spec, tokenizer_mismatch


def critic_init_errors(cfg: Any, v: Any, *, check_tokenizers: bool = True, policy_tokenizer: Any = None) -> list[str]:
    """What is wrong with `critic.init` for this run (cfg: RunConfig, v: its effective variant): an
    unknown init (the registry check reports it), `reward_model` without a `reward_model` reward in
    `rewards:`, or (check_tokenizers: loads the reward model's tokenizer, and the policy's unless
    `policy_tokenizer` is given; no model) tokenizers that differ. A reward model directory that does not
    exist yet is not compared (`run_warnings` warns about it)."""
    from zoo.rewards.reward_model import missing_models

    if critic_init(v) != "reward_model":
        return []
    spec = reward_model_spec(list(cfg.rewards))
    if spec is None:
        return [
            "critic.init: reward_model needs a reward model in rewards: (add {name: reward_model, model: DIR}); "
            f"rewards are {list(cfg.rewards)}"
        ]
    if not check_tokenizers or "model" not in spec or missing_models([spec]):  # not built yet: a warning says so
        return []
    from transformers import AutoTokenizer

    from zoo.models.sources import resolve_model

    try:
        pt = (
            policy_tokenizer
            if policy_tokenizer is not None
            else AutoTokenizer.from_pretrained(resolve_model(cfg.model).path)
        )
        rt = AutoTokenizer.from_pretrained(resolve_model(spec["model"]).path)
    except (OSError, ValueError) as e:
        return [f"critic.init: reward_model: could not load the tokenizers to compare them: {str(e).splitlines()[0]}"]
    why = tokenizer_mismatch(pt, rt)
    return (
        [
            f"critic.init: reward_model: the reward model {spec['model']!r} and the policy {cfg.model!r} do not share a "
            f"tokenizer ({why}); the critic reads the policy's tokens (use init: policy)"
        ]
        if why
        else []
    )


@check("critic_init", "before_load")
def critic_init_reward_model(s: BeforeLoad, rep: Report) -> None:
    """`critic.init: reward_model` needs a `reward_model` reward (the tokenizers are compared after load)."""
    if s.variant is not None:
        rep.errors += critic_init_errors(s.cfg, s.variant, check_tokenizers=False)


@check("critic_tokenizer", "after_load")
def critic_tokenizer(s: AfterLoad, rep: Report) -> None:
    """With `critic.init: reward_model`, the reward model's tokenizer equals the policy's."""
    if critic_init(s.variant) == "reward_model":
        rep.errors += critic_init_errors(s.cfg, s.variant, policy_tokenizer=s.tokenizer)
