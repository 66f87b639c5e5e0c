"""The emulated slice the ranks of a ``torch.distributed`` job form.

One process per chip: rank ``r`` is chip ``r`` of the slice, whose coordinates put axis 0
fastest (``r = c0 + d0 * (c1 + d1 * c2)``, the emulator's numbering). ``TPUEMU_SLICE`` names
the slice as ``tpuemu bench collective --slice`` does (``v5e:2x2``, ``v5p:2x2x2``, a preset TOML
file ``my.toml:4x4``, ``2xv5e:2x2`` for two slices joined by the data-centre network); without
it the slice is the world size's chips of the chosen chip (``TPUEMU_CHIP``, else v5e) in the
most nearly square shape (4 -> 2x2, 8 -> 2x4; 8 on v4/v5p -> 2x2x2).

A process group's ranks map onto torus axes: a group whose chips are exactly the chips along
some axes (the others fixed) runs its collectives over those axes, as ``bench collective
--axes`` does. A ``DeviceMesh`` laid out row-major over the ranks, as ``init_device_mesh``
does, puts its last (fastest) dimension on axis 0: on ``v5e:2x2`` a ``(2, 2)`` mesh
``("dp", "tp")`` has "tp" groups along axis 0 and "dp" groups along axis 1. A group that is no
such sub-torus (two diagonal chips) is timed on the smallest sub-torus holding it, with the
same bytes per chip: an upper bound, marked ``timed_over`` in the trace. A group that is a
block of the slice but not whole axes (ranks 0-3 of a 2x4 slice under a ``(2, 4)`` mesh's
"tp") is timed on a slice of the block's own shape (``v5e:2x2``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass, field

from .. import _rust


@dataclass(frozen=True)
class Slice:
    """A slice of chips: its spec, mesh and every chip's coordinates."""

    spec: str
    chip: str
    generation: str
    mesh: tuple[int, ...]
    wraparound: tuple[bool, ...]
    coords: tuple[tuple[int, ...], ...]
    dcn_axis: int | None = None
    _axes_cache: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def chips(self) -> int:
        return len(self.coords)

    @staticmethod
    def parse(text: str, world: int | None = None) -> "Slice":
        """The slice ``text`` names (``v5e:2x2``; ``v5e`` alone takes ``world`` chips)."""
        info = json.loads(_rust.slice_info(text, world))
        return Slice(
            spec=info["spec"],
            chip=info["chip"],
            generation=info["generation"],
            mesh=tuple(info["mesh"]),
            wraparound=tuple(info["wraparound"]),
            coords=tuple(tuple(c) for c in info["coords"]),
            dcn_axis=info["dcn_axis"],
        )

    def timing_of(self, ranks: list[int]) -> tuple[str, list[int], str]:
        """Where a group of ``ranks`` is timed: (slice spec, axes, how), how being ``exact`` (a
        sub-torus of this slice), ``block`` (a block of it: timed on a slice of the block's
        shape) or ``enclosing`` (timed on the smallest sub-torus holding it)."""
        axes, exact = self.axes_of(ranks)
        if exact or len(ranks) < 2:
            return self.spec, axes, "exact"
        coords = [self.coords[r] for r in ranks]
        varying = sorted({a for a in range(len(self.mesh)) if len({c[a] for c in coords}) > 1})
        extents = []
        for a in varying:
            vals = sorted({c[a] for c in coords})
            if vals != list(range(vals[0], vals[0] + len(vals))) or a == self.dcn_axis:
                return self.spec, axes, "enclosing"
            extents.append(len(vals))
        if len(set(ranks)) != len(ranks) or math.prod(extents) != len(ranks):
            return self.spec, axes, "enclosing"
        block = f"{self.chip}:{'x'.join(str(e) for e in extents)}"
        return block, list(range(len(extents)))[::-1], "block"

    def axes_of(self, ranks: list[int]) -> tuple[list[int], bool]:
        """The torus axes a group of ``ranks`` (in group order) runs over, first outermost in
        the group's rank order where the group is a sub-torus, and whether it is one."""
        key = tuple(ranks)
        hit = self._axes_cache.get(key)
        if hit is not None:
            return hit
        coords = [self.coords[r] for r in ranks]
        varying = [a for a in range(len(self.mesh)) if len({c[a] for c in coords}) > 1]
        exact = len(set(ranks)) == len(ranks) == math.prod(self.mesh[a] for a in varying)
        axes = sorted(varying, reverse=True)
        if exact and len(varying) > 1:
            # The order whose rank arithmetic ((c[a0] * n1) + c[a1]) * n2 + ... gives the
            # group's own order, if one does.
            for perm in itertools.permutations(varying):
                def rank_of(c, perm=perm):
                    r = 0
                    for a in perm:
                        r = r * self.mesh[a] + c[a]
                    return r
                if all(rank_of(c) == i for i, c in enumerate(coords)):
                    axes = list(perm)
                    break
        self._axes_cache[key] = (axes, exact)
        return axes, exact


def from_env(world_size: int) -> Slice:
    """The job's slice: ``TPUEMU_SLICE``, else ``world_size`` chips of the chosen chip. Refuses
    a world that does not fill it: every rank is one chip and every chip one rank."""
    from .. import chip as chosen_chip

    text = os.environ.get("TPUEMU_SLICE")
    if text:
        s = Slice.parse(text, world_size)
    else:
        s = Slice.parse(chosen_chip(), world_size)
    if world_size != s.chips:
        raise ValueError(
            f"tpuemu: a world of {world_size} ranks does not fit the slice {s.spec} "
            f"({s.chips} chips): each rank is one chip of the slice. Set TPUEMU_SLICE to a "
            f"slice of {world_size} chips (e.g. {s.chip}:{world_size}) or start {s.chips} "
            f"processes."
        )
    return s
