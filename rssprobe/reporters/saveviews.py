"""The save phase's table (analysis/saves.py), from a summary dict: per save kind and rank, what the save needs
above the RSS before it, what it holds at its top, what it leaves, and the consolidated state dict it built."""

from __future__ import annotations

from typing import Any

from ..analysis.resultparts import SaveFigures
from ..analysis.results import RunSummary
from .table import NA, Table, bpp

WHAT = {"save_checkpoint": "DeepSpeed save_checkpoint", "save_16bit_model": "DeepSpeed save_16bit_model",
        "model_16bit": "16-bit model, as Trainer.save_model",
        "trainer_checkpoint": "Trainer checkpoint (_save_checkpoint)", "trainer_save_model": "Trainer save_model",
        "final": "the final save (after the last step)"}
COLUMNS = ["save", "rank", "saves", "after steps", "peak above pre-save", "peak above baseline", "retained",
           "of it freed by gc", "state dict"]


def _rows(kind: str, rank: str, f: SaveFigures) -> list[Any]:
    return [WHAT.get(kind, kind), rank, str(f["occurrences"]), ",".join(map(str, f["steps"])), bpp(f["peak"]),
            bpp(f["peak_rss"]), bpp(f["retained"], True), bpp(f.get("collected"), True), bpp(f["state_dict"])]


def saves_table(s: RunSummary) -> Table | None:
    """Every save kind on every rank (a multi-rank run's other ranks from their figures), the node's sums."""
    mine = s.get("saves")
    if not mine:
        return None
    t = Table("The save phase (bytes per parameter of the whole model, per rank)", COLUMNS)
    ranks = s.get("ranks") or []
    for kind, f in mine.items():
        t.rows.append(_rows(kind, str(s.get("rank", 0)), f))
        for r in ranks[1:]:
            m = r.get("metrics") or {}
            if f"save.{kind}.peak" in m:
                t.rows.append([WHAT.get(kind, kind), str(r["rank"]), "", "", bpp(m[f"save.{kind}.peak"]),
                               bpp(m.get(f"save.{kind}.peak_rss")), bpp(m.get(f"save.{kind}.retained"), True),
                               bpp(m.get(f"save.{kind}.collected"), True), bpp(m.get(f"save.{kind}.state_dict"))])
        node = s.get("metrics", {})
        if len(ranks) > 1 and f"node.save.{kind}.peak" in node:
            t.rows.append([WHAT.get(kind, kind), "node (sum)", "", "", bpp(node[f"node.save.{kind}.peak"]),
                           bpp(node.get(f"node.save.{kind}.peak_rss")), NA, NA,
                           bpp(node.get(f"node.save.{kind}.state_dict"))])
    t.note = ("peak above pre-save: the save's exact peak (VmHWM) above the RSS right before it, what the save needs "
              "on top of training; peak above baseline: the same peak above the run's pre-model baseline; of it "
              "freed by gc: the part of `retained` Python's garbage collector freed right after a scenario's save "
              "(n/a: a user's own save, not collected), a state dict a reference cycle kept alive (DeepSpeed's "
              "ZeRO-3 consolidation builds it in a recursive closure); state dict: the consolidated 16-bit weights "
              "the save built on that rank (storage bytes, exact); node: the ranks' figures summed (their peaks "
              "need not coincide: an upper bound of the node's rise).")
    return t
