"""The catalogue: which bug leaves which metric signature, measured over seeds, out of sample
(built from stored runs by ``python -m harness.catalogue``)."""
