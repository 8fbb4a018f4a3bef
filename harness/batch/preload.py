"""Loaded by each Dask worker process `harness worker` starts (`dask worker --preload`): sets the
process's store from `--harness-store` (see harness.batch.shipping)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from harness.batch import shipping


@click.command()
@click.option("--harness-store", type=click.Path(file_okay=False), required=True)
def dask_setup(worker: Any, harness_store: str) -> None:
    shipping.use_store(Path(harness_store))
