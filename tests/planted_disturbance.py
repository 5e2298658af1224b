"""A pytest plugin for the suite's tests: the kernel's accounting is replaced by a script.

The rounds whose windows are numbered in $LLMBENCH_PLANTED_DISTURBED (counted per benchmark,
warm-up rounds included, from 0) read as if another process took half of the machine, and
every other round as if it had the machine to itself, whatever the test machine is doing.
Loaded with `-p planted_disturbance` (tests/ on PYTHONPATH).
"""

from __future__ import annotations

import os

from llmbench.engine import disturbance

PLANTED_ENV = "LLMBENCH_PLANTED_DISTURBED"
PLANTED = {int(i) for i in os.environ.get(PLANTED_ENV, "").split(",") if i.strip()}
_close = disturbance.Rounds.close


def _scripted_close(self: disturbance.Rounds) -> None:
    _close(self)
    wall = self.windows[-1].wall_s if self.windows[-1] is not None else 0.01
    # Half the machine, and never less than the ticks a window needs to count as disturbed.
    others = (max(wall * len(self.cpus) / 2, 3 * disturbance.TICK_S)
              if len(self.windows) - 1 in PLANTED else 0.0)
    self.windows[-1] = disturbance.Window(wall_s=wall, cpus=len(self.cpus), others_s=others,
                                          steal_s=0.0, own_s=wall)


disturbance.Rounds.close = _scripted_close
