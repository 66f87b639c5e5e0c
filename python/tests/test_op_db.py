"""PyTorch's operator database on the tpu with the CPU fallback off.

One test per op_db entry (``tpuemu/op_db.py`` says how each (entry, dtype) pair runs and what
passing means). A test fails when a pair does not pass and ``op_db_known.toml`` does not list
it, and when a listed pair now does something else: passes (remove it from the list, the
coverage grew) or ends another way (update its outcome, or fix the regression).

A pair runs at most ``SAMPLES`` of its sample inputs: 8 of the 705 entries have more (max
pooling up to 1,440 per dtype: its four entries took 143 s of the suite on a 2-core machine);
for them a fixed random choice spread over the whole generator runs (``tpuemu.op_db.chosen``).
``python -m tpuemu.op_db`` runs every sample.

    scripts/python.sh -m pytest python/tests/test_op_db.py -q [-k NAME]
    scripts/python.sh -m tpuemu.op_db             the same run as one table
"""

import tomllib
from pathlib import Path

import pytest

import tpuemu
from tpuemu import op_db

KNOWN_FILE = Path(__file__).with_name("op_db_known.toml")
ENTRIES = op_db.entries()
SAMPLES = 300


def load_known(text: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(entry key, dtype) -> (outcome, reason), from the list's groups."""
    known = {}
    for group in tomllib.loads(text)["group"]:
        outcome, reason = group["outcome"], group["reason"]
        if outcome not in op_db.OUTCOMES or outcome == "pass":
            raise ValueError(f"{reason!r}: outcome {outcome!r} is not one of {op_db.OUTCOMES[1:]}")
        for pair in group["pairs"]:
            key, sep, dtype = pair.rpartition(":")
            if not sep:
                raise ValueError(f"{pair!r}: expected 'entry:dtype'")
            if (key, dtype) in known:
                raise ValueError(f"{pair!r} is listed twice")
            known[(key, dtype)] = (outcome, reason)
    return known


KNOWN = load_known(KNOWN_FILE.read_text())


@pytest.fixture(scope="module", autouse=True)
def _fallback_off():
    precision = tpuemu.matmul_precision()
    fallback = tpuemu.cpu_fallback_enabled()
    op_db.prepare()
    yield
    tpuemu.set_cpu_fallback(fallback)
    tpuemu.set_matmul_precision(precision)


def problems(result: op_db.EntryResult, known: dict) -> list[str]:
    """What is wrong with an entry's outcomes against the list."""
    out = []
    for dtype, o in result.dtypes.items():
        listed = known.get((result.key, dtype))
        if o.outcome == "pass":
            if listed:
                out.append(f"{dtype}: passes now; remove '{result.key}:{dtype}' from {KNOWN_FILE.name}")
        elif listed is None:
            out.append(f"{dtype}: {o.outcome}: {o.detail}")
        elif listed[0] != o.outcome:
            out.append(f"{dtype}: {o.outcome}, listed as {listed[0]} ({listed[1]}): {o.detail}")
    for key, dtype in known:
        if key == result.key and dtype not in result.dtypes:
            out.append(f"'{key}:{dtype}' is listed but the entry does not support {dtype} on the CPU")
    return out


# The entries are dealt into this many classes: scripts/test.sh runs pytest-xdist with `--dist
# loadscope`, which gives a worker a whole file of test functions (its module fixtures built
# once) but a class on its own, so the workers share the database's entries.
SHARDS = 6


def _shard(i: int) -> type:
    @pytest.mark.parametrize("op", ENTRIES[i::SHARDS], ids=op_db.key)
    def test_entry_runs_natively_or_is_listed(self, op):
        result = op_db.run_entry(op, SAMPLES)
        found = problems(result, KNOWN)
        assert not found, f"{result.key}:\n  " + "\n  ".join(found)

    return type(f"TestShard{i}", (), {"test_entry_runs_natively_or_is_listed": test_entry_runs_natively_or_is_listed})


for _i in range(SHARDS):
    globals()[f"TestShard{_i}"] = _shard(_i)


def test_every_listed_entry_exists():
    keys = {op_db.key(op) for op in ENTRIES}
    missing = sorted({k for k, _ in KNOWN} - keys)
    assert not missing, f"{KNOWN_FILE.name} lists entries op_db does not have: {missing}"


def test_the_check_fails_on_what_it_must():
    """The list check itself: an unlisted failure, a listed pass, a changed outcome and a stale
    dtype are each reported; a listed failure with its outcome is not."""
    known = load_known(
        '[[group]]\noutcome = "wrong"\nreason = "r"\npairs = ["a:float32", "b:int64", "c:bool", "d:bool"]\n'
    )
    r = op_db.EntryResult("a", {"float32": op_db.Outcome("wrong")})
    assert problems(r, known) == []
    assert len(problems(op_db.EntryResult("b", {"int64": op_db.Outcome("pass")}), known)) == 1
    assert len(problems(op_db.EntryResult("c", {"bool": op_db.Outcome("error")}), known)) == 1
    assert len(problems(op_db.EntryResult("d", {}), known)) == 1
    assert len(problems(op_db.EntryResult("e", {"float32": op_db.Outcome("not-native")}), known)) == 1
    with pytest.raises(ValueError):
        load_known('[[group]]\noutcome = "pass"\nreason = "r"\npairs = ["a:float32"]\n')
