"""Reading stored runs: signatures, statistics, features, the diagnosis model, datasets and plots."""
