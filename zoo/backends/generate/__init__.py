"""Generation backends. `hf.py`: HF `generate` with one prefill per distinct prompt, returning a
`zoo.batch.Batch` (the `generator` registry kind with its contract comes with the generation issue)."""
