"""The configuration layer: what a run, study or variant file says, checked before any model loads.

`schema` (the base model and its one-line errors), `overrides` (dotted overrides), `desugar` (the
`kl:` slot's parts), `variant` (variant files), `diff` (`diff_variants`, `zoo diff`), `run` (the run
file's schema and reading), `user_keys`, `yaml_strict`. The checks are `zoo.checks`. Nothing is
re-exported here: import the module that holds a name.
"""
