"""Every `harness bench ...`: each measures harness and its bare counterpart side by side in one run,
in rounds, and reports medians and ratios (see `harness.bench.measure`)."""
