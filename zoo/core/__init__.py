"""The core every other layer builds on, importing nothing else from zoo: the slot table (`kinds`),
the component registry (`registry`), what a component declares (`declarations`) and the field table
(`fields`), the one record between stages (`batch.Batch`), the component record types (`types`) and the
generator's (`generator_types`), plugin stages (`stages`), and the run-time primitives every layer uses:
data-parallel collectives (`dist`), the guards that stop a run which cannot learn (`guards`) and
file-system faults as one line (`faults`). The layer order is in docs/concepts/engine.md ("Source layout")."""
