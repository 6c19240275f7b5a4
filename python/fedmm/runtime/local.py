# SPDX-License-Identifier: BSD-3-Clause
"""The in-process runtime, defined in :mod:`fedmm.federation.local` (the algorithms' default runtime) and
listed here with the other runtimes; ``round_record`` and ``finish_round`` are the round-end helpers
every runtime shares."""
from fedmm.federation.local import (LocalRuntime, finish_round, record_initial, record_start_drops, round_record,
                                run_monitor, split_contiguous, warn_all_dropped)

__all__ = ["LocalRuntime", "finish_round", "record_initial", "record_start_drops", "round_record", "run_monitor",
           "split_contiguous", "warn_all_dropped"]
