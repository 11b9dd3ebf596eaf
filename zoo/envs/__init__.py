"""Multi-turn rollouts with environments (registry kind `env`): the contract and `task.env`
(zoo.envs.base), the built-ins `calculator` (zoo.envs.calculator) and `retry` (zoo.envs.retry), the rollout (zoo.envs.rollout) and
its place in the step (zoo.envs.run). docs/guides/environments.md, "Environments"."""

from zoo.envs import calculator, retry  # noqa: F401  (registers the built-in environments)
from zoo.envs.base import Env, EnvSpec, env_errors, env_spec

__all__ = ["Env", "EnvSpec", "env_errors", "env_spec"]
