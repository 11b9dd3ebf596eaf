"""Studies: study files and their arms (experiment), running them (runner), what a run records
(tracking, fingerprint, lock, arm_claim) and the report over a study folder (runs, table, plots, report)."""
