"""reports/issue7693-answer.md, generated from runs (every figure is read from a run directory; nothing typed in):

    python -m tools.evidence.issue7693_answer page [--runs DIR] [--device DIR] [--out FILE]
    python -m tools.evidence.issue7693_answer collect DIR... [--h2d FILE] [--out FILE]   # runs -> fixes JSON
    python -m tools.evidence.issue7693_answer options FIX                             # rssprobe options of a fix

`page` reads three sets of runs, each committed:
* the H200 runs of reports/gpu-check-h200/runs.tar.gz (CUDA, measured): the 28 B/param decomposed (its size
  sweep), PR #8132 on CUDA (baseline against patched);
* the release sweep of reports/cuda-pinned/runs.tar.gz (CPU, DeepSpeed 0.18.2-0.19.8 with DeepSpeed's own
  pin_memory default): since which release, predicted for CUDA from the recorded pin requests;
* this report's runs.tar.gz (CPU, `evidence.sh`): the default scenario's size sweep under each fix of
  rssprobe/data/fixes.toml, measured on the CPU (RSS, live buffers, VmLck), CUDA's holding predicted for each
  fix from the baseline's pin requests (analysis/fixes.py), and the verdict plan's base cell (PR #8132 on CPU);
and, when a device call has brought them back (`--device DIR`, default reports/issue7693-answer/device), the
fixes measured on CUDA (tests/gpu/check.sh with EVIDENCE=fixes: its fixes.json and h2d.json) for the
"measured on CUDA" column. Without them that column says "not measured".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from .page import write_page
from .runsets import HERE, ROOT, collect, options, slug


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("options")
    o.add_argument("fix")
    o.add_argument("--slug", action="store_true", help="the fix's name as a directory name instead")
    c = sub.add_parser("collect")
    c.add_argument("dirs", nargs="+", type=Path)
    c.add_argument("--h2d", type=Path)
    c.add_argument("--out", type=Path)
    p = sub.add_parser("page")
    p.add_argument("--runs", type=Path, help="this report's runs, extracted (default: runs.tar.gz, extracted)")
    p.add_argument("--device", type=Path, default=HERE / "device")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "issue7693-answer.md")
    args = ap.parse_args(argv)
    if args.cmd == "options":
        print(slug(args.fix) if args.slug else " ".join(options(args.fix)))
        return 0
    if args.cmd == "collect":
        text = json.dumps(collect(args.dirs, args.h2d), indent=1, default=str)
        if args.out:
            args.out.write_text(text + "\n")
        else:
            print(text)
        return 0
    with tempfile.TemporaryDirectory(prefix="issue7693-answer-") as tmp:
        write_page(args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
