# SPDX-License-Identifier: BSD-3-Clause
"""``python -m fedmm``: the same as the ``fedmm`` console command."""
import sys

from fedmm.cli import main

sys.exit(main())
