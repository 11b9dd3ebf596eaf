"""One training step: `pipeline.step` lists the stages in order (the table opening docs/concepts/engine.md);
each stage is a function in its own module here.

    sample.py      generate -> reward -> length -> objectives -> filter, in resampling rounds
    forwards.py    old / reference log-probs and critic values, only where a component needs them
    advantages.py  KL in the reward, the advantage estimator, the normalizer (global batch)
    update.py      epochs x minibatches optimizer steps, micro-batched
    types.py       the step's inputs: built slots, models, settings, the run's mutable state
"""
