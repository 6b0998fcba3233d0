"""JUnit XML for CI: one test case per checked figure (failure = regression, skipped = undecided)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def write(path: Path, suite: str, cases: list[tuple[str, str, str]]) -> None:
    """cases: (name, verdict, message)."""
    failures = sum(v == "regression" for _, v, _ in cases)
    skipped = sum(v in ("undecided", "~") for _, v, _ in cases)
    root = ET.Element("testsuite", name=suite, tests=str(len(cases)), failures=str(failures),
                      skipped=str(skipped), errors="0")
    for name, verdict, message in cases:
        case = ET.SubElement(root, "testcase", classname=suite, name=name)
        if verdict == "regression":
            ET.SubElement(case, "failure", message=message, type="regression")
        elif verdict in ("undecided", "~"):
            ET.SubElement(case, "skipped", message=f"{verdict}: {message}")
        else:
            case.set("verdict", verdict)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
