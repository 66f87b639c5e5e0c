"""Removes from python/tests/op_db_known.toml the pairs that pass in an op_db JSON run
(`scripts/python.sh -m tpuemu.op_db --json F`), and groups left empty; the rest of the file,
comments and order, is kept.

    python3 scripts/prune_op_db_known.py F
"""

import json
import re
import sys
from pathlib import Path

KNOWN = Path(__file__).resolve().parents[1] / "python" / "tests" / "op_db_known.toml"


def main(path: str) -> int:
    entries = json.loads(Path(path).read_text())["entries"]
    passing = {
        f"{key}:{dtype}"
        for key, dtypes in entries.items()
        for dtype, o in dtypes.items()
        if o["outcome"] == "pass"
    }
    text = KNOWN.read_text()
    head, *groups = re.split(r"(?m)^(?=\[\[group\]\]$)", text)
    kept, removed = [], []
    for g in groups:
        lines = []
        pairs = 0
        for line in g.splitlines(keepends=True):
            m = re.fullmatch(r'\s*"([^"]+)",?\s*\n?', line)
            if m and m.group(1) in passing:
                removed.append(m.group(1))
                continue
            pairs += bool(m)
            lines.append(line)
        if pairs:
            kept.append("".join(lines))
    out = head + "".join(kept)
    KNOWN.write_text(out.rstrip("\n") + "\n")
    print(f"removed {len(removed)} passing pairs; {len(kept)} groups left", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
