"""A finding of the doctor (its area, level, text and fix) and how a list of them prints."""
from __future__ import annotations

import dataclasses
from typing import List, Optional



OK, INFO, WARN, FAIL = "ok", "info", "warn", "FAIL"


@dataclasses.dataclass
class Finding:
    area: str
    level: str
    text: str
    fix: Optional[str] = None


def report(findings: List[Finding]) -> str:
    lines, area = [], None
    for finding in findings:
        if finding.area != area:
            area = finding.area
            lines.append(f"{area}:")
        lines.append(f"  [{finding.level:>4}] {finding.text}")
        if finding.fix and finding.level in (WARN, FAIL):
            lines.append(f"         fix: {finding.fix}")
    return "\n".join(lines)
