"""The catalogue: which bug leaves which metric signature, measured over seeds, out of sample
(built from stored runs by ``python -m harness.catalogue``).

Stages: :mod:`~harness.catalogue.settings` (the command's settings), :mod:`~harness.catalogue.protocol`
(windows, the calibration / held-out split, one cell's evaluation and verdict),
:mod:`~harness.catalogue.views` (the same per framework view), :mod:`~harness.catalogue.detectors`
(reference detectors per cell), :mod:`~harness.catalogue.agreement` (backends side by side),
:mod:`~harness.catalogue.baselines` (signatures on healthy runs), :mod:`~harness.catalogue.report`
(the summary page and FAULTS.md), :mod:`~harness.catalogue.pages` (a page per fault),
:mod:`~harness.catalogue.rows` (the typed rows and the written columns), and
:mod:`~harness.catalogue.build` (running them and writing the files, or re-rendering the pages from
the files alone)."""
