"""``python -m harness.catalogue``: aggregate stored runs into the catalogue and the labelled dataset.

The work is done in :mod:`harness.catalogue.build`; this module is the command.
"""

from __future__ import annotations

import hydra
import pandas as pd
from omegaconf import DictConfig

from harness.catalogue.build import write
from harness.catalogue.settings import CatalogueSettings
from harness.commands.app import run_app
from harness.config import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="catalogue", version_base=None)
def app(cfg: DictConfig) -> None:
    settings = CatalogueSettings.from_cfg(cfg)
    rs_count = len(list((settings.results_dir / "runs").iterdir()))
    print(f"reading {rs_count} run directories under {settings.results_dir}/runs ...", flush=True)
    written = write(settings)
    cat = pd.read_parquet(written["catalogue"]) if "catalogue" in written else pd.DataFrame()
    if not cat.empty:
        cells = cat.drop_duplicates("cell")
        print(f"{len(cells)} fault cells; manifested: {int(cells['manifested'].sum())}, "
              f"not: {int((~cells['manifested']).sum())}")
        for _, c in cells.iterrows():
            print(f"  {c['cell']}: {'manifested via ' + c['manifested_by'] if c['manifested'] else 'NOT manifested'}"
                  f"{f' ({c.n_diverged} diverged)' if c['n_diverged'] else ''}")
    for path in written.values():
        print(f"wrote {path}")


def main() -> None:
    run_app(app, config_name="catalogue", validate=CatalogueSettings.from_cfg)


if __name__ == "__main__":
    main()
