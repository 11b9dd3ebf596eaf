"""Generation backends, the registry kind `generator` (contract `zoo.core.kinds.Generator`, chosen by the run
file's `sampling.backend`): `hf.py` HF `generate` with one prefill per distinct prompt, returning a
`zoo.core.batch.Batch` with `logp_rollout`; `warping.py` the warping and its log-probs; `continuation.py` and
`stops.py` `continue_` from uneven prefixes with stop strings; `hf_generator.py` the `hf` generator;
`noisy.py` the `noisy` wrapper; `progress.py` progress inside one rollout step. SamplingParams and
Continuation, the generator's record types, are `zoo.core.generator_types`."""
