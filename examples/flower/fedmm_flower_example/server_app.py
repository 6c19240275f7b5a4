# SPDX-License-Identifier: BSD-3-Clause
"""ServerApp: the FedMM server as a Flower strategy; writes the History as JSON if asked."""
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedmm.runtime.flower import FedMMStrategy

from fedmm_flower_example.task import initial_statistic, make_algorithm

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    strategy = FedMMStrategy(make_algorithm(config), int(config["num-clients"]), seed=int(config["seed"]),
                             init=initial_statistic(config))
    history = strategy.run(grid, int(config["num-server-rounds"]), timeout=float(config["round-timeout"]))
    for record in history.records:
        print(f"round {record['t']}: E_s={record['E_s']:.3e} active={record['active']} "
              f"dropped={record['dropped']} bytes_up={record['bytes_up']}")
    if str(config["history-path"]):
        history.save(str(config["history-path"]))
