# SPDX-License-Identifier: BSD-3-Clause
"""Paper experiments (DESIGN §7): each module runs one figure's setting and writes JSON + PNG."""
