"""The configuration layer: what a run, study or variant file says, checked before any model loads.

`schema` (the base model and its one-line errors), `overrides` (dotted overrides), `desugar` (the
`kl:` slot's parts), `variant` (variant files), `checks` (variant checks and diffs), `run` (the run
file's schema and reading), `run_checks` (run warnings). Nothing is re-exported here: import the
module that holds a name.
"""
