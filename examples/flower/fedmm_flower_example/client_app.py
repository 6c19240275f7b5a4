# SPDX-License-Identifier: BSD-3-Clause
"""ClientApp: a FedMM client on this node's partition (``partition-id`` from the node config)."""
from fedmm.runtime.flower import client_app

from fedmm_flower_example.task import load_partition, make_algorithm

app = client_app(lambda context: make_algorithm(context.run_config),
                 lambda partition_id, context: load_partition(partition_id, context.run_config))
