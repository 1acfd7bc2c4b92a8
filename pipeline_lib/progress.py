"""How often long stages (training, decoding, stanza's trainers) write a progress line.

WHY one place: a job's output goes to its log file, which a person reads with ``tail -f``; a
line every 30 s there, every second on a terminal, is the one rule every stage follows.
"""

from __future__ import annotations

import sys

#: seconds between progress lines in a job's log
LOG_EVERY_S = 30.0


def progress_interval() -> float:
    """Seconds between progress lines (tqdm's ``mininterval``): every second on a terminal,
    ``LOG_EVERY_S`` into a log file."""
    return 1.0 if sys.stderr.isatty() else LOG_EVERY_S
