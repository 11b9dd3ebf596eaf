"""Studies: study files and their arms (experiment, validate), running them (runner, ray_runner,
arm_claim), a run file that may be a one-arm study (run_file), and the report over a study folder
(`report/`: runs, tables, plots, statistics over seeds). What one run records (tracking, fingerprint,
lock) is `zoo.run`. `tta_study`: a `zoo tta` study (experiments/grpo_tta.yaml), its arms x shifts x
seeds on a dual encoder and its report."""
