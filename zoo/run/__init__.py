"""One run, start to end: `trainer` (set up, loop, save, evaluate), its resumable checkpoint
(`checkpoint`), progress and evaluation during training (`progress`, `evaluate`, `eval_record`), what a
run records (`provenance`, `tracking`, `fingerprint`), the run folder's lease (`lock`), autocast
(`precision`) and CPU threads (`threads`). Kept free of imports so that `zoo.run.threads` loads before torch."""
