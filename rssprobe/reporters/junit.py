"""JUnit XML for CI: one test case per checked figure, its state read from rssprobe.verdicts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .. import verdicts


def render(suite: str, cases: list[tuple[str, str, str]]) -> bytes:
    """The JUnit XML document; cases: (name, verdict, message)."""
    states = [verdicts.meaning(v).junit for _, v, _ in cases]
    root = ET.Element("testsuite", name=suite, tests=str(len(cases)), failures=str(states.count("failure")),
                      skipped=str(states.count("skipped")), errors="0")
    for (name, verdict, message), state in zip(cases, states, strict=True):
        case = ET.SubElement(root, "testcase", classname=suite, name=name)
        if state == "failure":
            ET.SubElement(case, "failure", message=message, type=verdict)
        elif state == "skipped":
            ET.SubElement(case, "skipped", message=f"{verdict}: {message}")
        else:
            case.set("verdict", verdict)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
